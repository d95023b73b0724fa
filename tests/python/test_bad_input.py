"""Bad input never crashes the host: wrong shapes/dtypes give ORT's clean errors, nodes MLX
can't do exactly fall back to the CPU EP, empty tensors work, and errors raised inside MLX
surface as ORT errors that name the partition and the node. Sessions cannot fall back to CPU
silently (harness.mlx_session), and where a run must succeed ORT's profile shows it ran on MLX."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from harness import assert_ran_on_mlx, check_parity, make_model, mlx_session, profiled_nodes, run_cpu, run_mlx


def add_model(shape=(2, 3), b_shape=None):
    b_shape = shape if b_shape is None else b_shape
    return make_model("Add", [("a", np.float32, list(shape)), ("b", np.float32, list(b_shape))],
                      [("y", np.float32, list(np.broadcast_shapes(shape, b_shape)))])


def test_wrong_input_shape_is_an_ort_error():
    sess = mlx_session(add_model())
    with pytest.raises(Exception, match="(?i)dimension|shape|Got invalid"):
        sess.run(None, {"a": np.zeros((3, 3), np.float32), "b": np.zeros((2, 3), np.float32)})


def test_wrong_input_dtype_is_an_ort_error():
    sess = mlx_session(add_model())
    with pytest.raises(Exception, match="(?i)type"):
        sess.run(None, {"a": np.zeros((2, 3), np.float64), "b": np.zeros((2, 3), np.float32)})


def test_session_survives_a_failed_run():
    sess = mlx_session(add_model(), profile=True)
    with pytest.raises(Exception):
        sess.run(None, {"a": np.zeros((3, 3), np.float32), "b": np.zeros((2, 3), np.float32)})
    a = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(sess.run(None, {"a": a, "b": a})[0], 2 * a)
    nodes = profiled_nodes(sess)
    assert_ran_on_mlx(nodes)
    assert len(nodes) == 1, nodes  # the failed run was rejected before any kernel ran


def test_unclaimed_op_falls_back_to_cpu():
    # Det has no MLX translation: the model still runs, entirely on the CPU EP.
    model = make_model("Det", [("x", np.float32, [3, 3])], [("y", np.float32, [])])
    x = np.array([[2, 0, 0], [0, 3, 0], [0, 0, 4]], np.float32)
    got, mlx, total = run_mlx(model, {"x": x})
    assert mlx == 0 and total == 1
    np.testing.assert_allclose(got[0], 24.0, rtol=1e-6)


def test_string_tensors_fall_back_to_cpu():
    model = make_model("Identity", [("s", np.float32, [2])], [("t", np.float32, [2])])
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.STRING
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.STRING
    s = np.array(["a", "bc"], dtype=object)
    got, mlx, _ = run_mlx(model, {"s": s})
    assert mlx == 0
    assert list(got[0]) == ["a", "bc"]


# (0, 3) + (1, 3) broadcasting killed the process with SIGFPE on MLX's CUDA backend before
# graphs holding empty tensors were routed to MLX's CPU device (runtime/runner.h).
@pytest.mark.parametrize("shape,b_shape", [((0,), None), ((0, 3), None), ((2, 0, 4), None), ((0, 3), (1, 3))])
def test_empty_tensors(shape, b_shape):
    model = add_model(shape, b_shape)
    feeds = {"a": np.zeros(shape, np.float32), "b": np.ones(b_shape or shape, np.float32)}
    check_parity(model, feeds)


def test_error_inside_mlx_names_the_node():
    # Reshape to a runtime shape whose element count does not match: MLX raises while tracing;
    # ORT must return an error that names our partition and the node, and the process lives on.
    model = make_model("Reshape", [("x", np.float32, [2, 3]), ("shape", np.int64, [2])],
                       [("y", np.float32, None)])
    got, mlx, _ = run_mlx(model, {"x": np.ones((2, 3), np.float32), "shape": np.array([3, 2], np.int64)})
    assert mlx == 1
    np.testing.assert_array_equal(got[0], np.ones((3, 2), np.float32))
    sess = mlx_session(model)
    with pytest.raises(Exception) as err:
        sess.run(None, {"x": np.ones((2, 3), np.float32), "shape": np.array([4, 2], np.int64)})
    msg = str(err.value)
    assert "MLXExecutionProvider" in msg and "Reshape" in msg, msg


def test_runtime_shape_input_specialises_compiled_graph():
    # The same session sees two different runtime shape values: both must be right.
    model = make_model("Reshape", [("x", np.float32, [2, 6]), ("shape", np.int64, [2])],
                       [("y", np.float32, None)])
    sess = mlx_session(model, profile=True)
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    for shape in ([3, 4], [6, 2], [3, 4]):
        y = sess.run(None, {"x": x, "shape": np.array(shape, np.int64)})[0]
        np.testing.assert_array_equal(y, x.reshape(shape))
    nodes = profiled_nodes(sess)
    assert_ran_on_mlx(nodes)
    assert len(nodes) == 3, nodes


def test_input_buffers_are_not_modified():
    # The same input feeds an MLX node and is returned unchanged through a graph output.
    nodes = [helper.make_node("Add", ["x", "x"], ["y"]), helper.make_node("Identity", ["x"], ["x_out"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64]),
                               helper.make_tensor_value_info("x_out", TensorProto.FLOAT, [64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    x = np.random.default_rng(0).standard_normal(64).astype(np.float32)
    keep = x.copy()
    sess = mlx_session(model, profile=True)
    for _ in range(3):
        y, x_out = sess.run(None, {"x": x})
    assert_ran_on_mlx(profiled_nodes(sess))
    np.testing.assert_array_equal(x, keep)
    np.testing.assert_array_equal(x_out, keep)
    np.testing.assert_array_equal(y, 2 * keep)
    assert run_cpu(model, {"x": x})[0].shape == (64,)


# ---- ORT's error codes: the exception class a user of ORT catches -----------------------------
# Errors carry the code ORT's users expect (src/common/error.h): bad inputs or attributes at run
# time are INVALID_ARGUMENT (pybind's InvalidArgument), a failed allocation FAIL (as ORT's CPU EP
# says it), MLX's and the EP's own runtime failures RUNTIME_EXCEPTION. tests/cpp/host_test.cc
# checks the mapping of every kind, NotImplemented included.

def error_class(run):
    with pytest.raises(Exception) as err:
        run()
    return type(err.value).__name__


def scalar_inputs(*names):
    return [(n, np.float32, []) for n in names]


ERROR_CASES = {
    # ORT's CPU EP: INVALID_ARGUMENT too.
    "gather_index_out_of_range": (
        make_model("Gather", [("x", np.float32, [3, 2]), ("i", np.int64, [1])], [("y", np.float32, None)],
                   {"axis": 0}),
        {"x": np.ones((3, 2), np.float32), "i": np.array([7], np.int64)}, "InvalidArgument", "InvalidArgument"),
    "range_with_nan_limit": (
        make_model("Range", scalar_inputs("s", "l", "d"), [("y", np.float32, None)]),
        {"s": np.array(0, np.float32), "l": np.array(np.nan, np.float32), "d": np.array(1, np.float32)},
        "InvalidArgument", "InvalidArgument"),
    # ORT's CPU EP says FAIL here (its kernels' ORT_ENFORCE); the EP says what the error is.
    "reshape_to_another_count": (
        make_model("Reshape", [("x", np.float32, [2, 3]), ("shape", np.int64, [2])], [("y", np.float32, None)]),
        {"x": np.ones((2, 3), np.float32), "shape": np.array([4, 2], np.int64)}, "InvalidArgument", "Fail"),
    "integer_division_by_zero": (
        make_model("Div", [("a", np.int32, [2]), ("b", np.int32, [2])], [("y", np.int32, [2])]),
        {"a": np.ones(2, np.int32), "b": np.array([1, 0], np.int32)}, "InvalidArgument", "Fail"),
}


@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_errors_carry_the_ort_code_users_expect(case):
    model, feeds, expected, cpu_expected = ERROR_CASES[case]
    assert error_class(lambda: mlx_session(model).run(None, feeds)) == expected
    assert error_class(lambda: run_cpu(model, feeds)) == cpu_expected
