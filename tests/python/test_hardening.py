"""Hardening (docs/reliability.md): the EP never kills the host process, keeps ORT's CPU EP's
contract on inputs that contradict the model (accepts what it accepts, rejects what it
rejects), holds no memory across runs, and survives the session lifecycle: cancelled runs,
sessions destroyed while others run, the library unregistered and registered again. The fuzz
run at the end classifies a fixed set of mutated ONNX node tests against ORT's CPU EP."""
import gc
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from harness import check_parity, make_graph_model, mlx_session, node_model, run_cpu

ROOT = Path(__file__).resolve().parents[2]


def mlx_error(model, feeds):
    """The message of the error the MLX session raises (it must raise)."""
    with pytest.raises(Exception) as err:
        mlx_session(model).run(None, feeds)
    return str(err.value)


def cpu_error(model, feeds):
    with pytest.raises(Exception) as err:
        run_cpu(model, feeds)
    return str(err.value)


# ---- (1) never crash: allocation failures become errors ----------------------------------------

OOM_SCRIPT = textwrap.dedent("""
    import resource, sys
    sys.path[:0] = {paths!r}
    limit = 3 << 30
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    import numpy as np
    from onnx import TensorProto, helper
    from harness import mlx_session
    shape = helper.make_tensor("s", TensorProto.INT64, [2], {dims!r})
    node = helper.make_node("{op}", ["s"], ["y"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0]))
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    sess = mlx_session(model)
    try:
        sess.run(None, {{}})
        print("RAN")
    except Exception as e:
        print("ERROR", type(e).__name__, e)
    # The process and the session live on: a small run still works.
    small = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])]), opset_imports=[helper.make_opsetid("", 17)])
    small.ir_version = 8
    print("SMALL", mlx_session(small).run(None, {{"x": np.array([-1, 0, 2], np.float32)}})[0].tolist())
""")


@pytest.mark.parametrize("dims", [[1 << 16, 1 << 15], [1 << 20, 1 << 12]], ids=["8GiB", "16GiB"])
def test_allocation_failure_is_an_error_not_a_crash(dims):
    # MLX's CPU allocator returns a null buffer when malloc fails and its kernels write through
    # it; under an address-space limit this was a SIGSEGV. Now the trace reserves what it needs.
    script = OOM_SCRIPT.format(paths=[str(ROOT / "tests" / "python"), str(ROOT / "python")], dims=dims,
                               op="ConstantOfShape")
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"exit status {p.returncode}\n{p.stdout}\n{p.stderr[-2000:]}"
    assert "ERROR" in p.stdout and "Failed to allocate memory" in p.stdout, p.stdout
    assert "ERROR Fail " in p.stdout, p.stdout  # ORT_FAIL, as ORT's CPU EP says for a failed allocation
    assert "ConstantOfShape" in p.stdout, p.stdout  # names the node
    assert "SMALL [0.0, 0.0, 2.0]" in p.stdout, p.stdout


# ---- (2) ORT's contract ------------------------------------------------------------------------

def test_stale_declared_output_shape_uses_the_real_shape():
    # Exporters stamp stale static shapes; ORT only warns when a produced value disagrees.
    model = make_graph_model([helper.make_node("Relu", ["x"], ["y"])], [("x", np.float32, ["n", 3])],
                             [("y", np.float32, [7, 3])])
    check_parity(model, {"x": np.arange(-6, 6, dtype=np.float32).reshape(4, 3)})


def gather_model(n_idx):
    return make_graph_model([helper.make_node("Gather", ["x", "i"], ["y"], axis=0)],
                            [("x", np.float32, [3, 2]), ("i", np.int64, [n_idx])], [("y", np.float32, None)])


@pytest.mark.parametrize("indices", [[0, 3], [-4, 0], [7, -9]], ids=["past_end", "before_start", "both"])
def test_gather_out_of_range_indices_are_an_error(indices):
    model, feeds = gather_model(2), {"x": np.ones((3, 2), np.float32), "i": np.array(indices, np.int64)}
    assert "out of data bounds" in cpu_error(model, feeds)
    assert "out of data bounds" in mlx_error(model, feeds)


def test_gather_session_survives_out_of_range_indices():
    sess = mlx_session(gather_model(2))
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    with pytest.raises(Exception, match="out of data bounds"):
        sess.run(None, {"x": x, "i": np.array([0, 5], np.int64)})
    np.testing.assert_array_equal(sess.run(None, {"x": x, "i": np.array([-1, 0], np.int64)})[0], x[[2, 0]])


@pytest.mark.parametrize("op,extra", [("GatherElements", {}), ("ScatterElements", {})])
def test_elements_ops_out_of_range_indices_are_an_error(op, extra):
    data = [("x", np.ones((2, 3), np.float32)), ("i", np.array([[0, 5, 1]], np.int64))]
    if op == "ScatterElements":
        data.append(("u", np.ones((1, 3), np.float32)))
    model, feeds = node_model(op, data, {"axis": 1, **extra})
    cpu_error(model, feeds)
    assert "out of data bounds" in mlx_error(model, feeds)


def scalar_inputs_model(op, names, dtype, attrs=None, opset=17):
    return make_graph_model([helper.make_node(op, names, ["y"], **(attrs or {}))],
                            [(n, dtype, []) for n in names], [("y", dtype, None)], opset=opset)


@pytest.mark.parametrize("limit,delta", [(5.0, np.nan), (np.inf, 1.0), (np.nan, 1.0)])
def test_range_without_a_finite_length_is_an_error(limit, delta):
    model = scalar_inputs_model("Range", ["a", "b", "c"], np.float32, opset=11)
    feeds = {"a": np.array(0, np.float32), "b": np.array(limit, np.float32), "c": np.array(delta, np.float32)}
    assert "not a finite value" in cpu_error(model, feeds)
    assert "not a finite value" in mlx_error(model, feeds)


def test_reduce_with_rank0_axes_is_an_error():
    model, feeds = node_model("ReduceSum", [("x", np.ones((2, 3), np.float32))], opset=18,
                              host=[("axes", np.array(1, np.int64))], host_as_input=True)
    assert "vector" in cpu_error(model, feeds)
    assert "vector" in mlx_error(model, feeds)


@pytest.mark.parametrize("axes", [None, [0], [-1]])
def test_reduce_sum_square_of_a_scalar(axes):
    host = [("axes", np.array(axes, np.int64))] if axes is not None else None
    model, feeds = node_model("ReduceSumSquare", [("x", np.array(3.0, np.float32))], opset=18, host=host,
                              host_as_input=True, out_dtype=np.float32)
    check_parity(model, feeds)


@pytest.mark.parametrize("allowzero", [2, -1])
def test_reshape_allowzero_other_than_one_copies_dims(allowzero):
    model, feeds = node_model("Reshape", [("x", np.arange(6, dtype=np.float32).reshape(2, 3))],
                              {"allowzero": allowzero}, opset=14, host=[("shape", np.array([0, 3], np.int64))])
    check_parity(model, feeds)


@pytest.mark.parametrize("lo,hi", [(np.nan, 1.0), (-1.0, np.nan), (np.nan, np.nan)])
def test_clip_ignores_a_nan_bound_like_ort(lo, hi):
    x = np.array([-2, -0.5, 0, np.nan, 0.5, 2, np.inf, -np.inf] * 3, np.float32)
    model, feeds = node_model("Clip", [("x", x)], opset=13,
                              host=[("lo", np.array(lo, np.float32)), ("hi", np.array(hi, np.float32))],
                              host_as_input=True)
    check_parity(model, feeds)


@pytest.mark.parametrize("scale_shape", [(1,), (1, 4), (4,)])
def test_layer_norm_broadcasts_scale_and_bias(scale_shape):
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    model, feeds = node_model("LayerNormalization", [("x", x), ("s", np.full(scale_shape, 1.5, np.float32)),
                                                     ("b", np.full(scale_shape, 0.25, np.float32))],
                              {"axis": -1})
    check_parity(model, feeds)


def test_layer_norm_scale_that_does_not_broadcast_is_an_error():
    x = np.ones((2, 4), np.float32)
    model, feeds = node_model("LayerNormalization", [("x", x), ("s", np.ones(2, np.float32)),
                                                     ("b", np.zeros(2, np.float32))], {"axis": -1})
    assert "broadcastable" in cpu_error(model, feeds)
    assert "broadcastable" in mlx_error(model, feeds)


def test_concat_skips_empty_inputs():
    model = make_graph_model([helper.make_node("Concat", ["a", "b", "c"], ["y"], axis=1)],
                             [("a", np.float32, None), ("b", np.float32, None), ("c", np.float32, None)],
                             [("y", np.float32, None)])
    check_parity(model, {"a": np.ones((2, 3), np.float32), "b": np.zeros((2, 0), np.float32),
                         "c": np.full((2, 1), 2, np.float32)})
    check_parity(model, {"a": np.ones((2, 3), np.float32), "b": np.zeros((5, 0), np.float32),
                         "c": np.full((2, 1), 2, np.float32)})


def test_rotary_embedding_position_out_of_range_is_an_error():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, 2, 4)).astype(np.float32)  # [batch, heads, seq, head]
    cache = rng.standard_normal((3, 2)).astype(np.float32)
    model, feeds = node_model("RotaryEmbedding", [("x", x), ("cos", cache), ("sin", cache),
                                                  ("pos", np.array([[0, 7]], np.int64))], opset=23)
    assert "out of range" in cpu_error(model, feeds)
    assert "out of range" in mlx_error(model, feeds)


@pytest.mark.parametrize("op,message", [("Div", "division by zero"), ("Mod", "modulo by zero")])
@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int64])
def test_integer_division_by_zero_is_an_error(op, message, dtype):
    model, feeds = node_model(op, [("a", np.array([3, 4, 5], dtype)), ("b", np.array([1, 0, 2], dtype))])
    assert message in cpu_error(model, feeds)
    assert message in mlx_error(model, feeds)
    feeds["b"] = np.array([1, 3, 2], dtype)
    check_parity(model, feeds)


@pytest.mark.parametrize("flag", ["exclusive", "reverse"])
def test_cumsum_flag_other_than_0_1_is_left_to_ort(flag):
    model, feeds = node_model("CumSum", [("x", np.arange(4, dtype=np.float32))], {flag: 2}, opset=14,
                              host=[("axis", np.array(0, np.int64))], out_dtype=np.float32)
    cpu_error(model, feeds)  # ORT rejects it when it creates the kernel; the EP declines the node
    with pytest.raises(Exception, match=f"{flag} can only be 0 or 1"):
        mlx_session(model).run(None, feeds)


@pytest.mark.parametrize("which", [3, 4])
def test_slice_axes_or_steps_of_another_length_is_an_error(which):
    host = [("starts", np.array([0, 1], np.int64)), ("ends", np.array([2, 3], np.int64)),
            ("axes", np.array([0, 1], np.int64)), ("steps", np.array([1, 1], np.int64))]
    host[which - 1] = (host[which - 1][0], np.zeros(0, np.int64))
    model, feeds = node_model("Slice", [("x", np.ones((4, 4), np.float32))], opset=13, host=host,
                              host_as_input=True, out_dtype=np.float32)
    assert "shape mismatch" in cpu_error(model, feeds)
    assert "shape mismatch" in mlx_error(model, feeds)


def test_lstm_sequence_lens_out_of_range_is_an_error():
    rng = np.random.default_rng(0)
    seq, batch, inp, hidden = 2, 2, 3, 4
    data = [("x", rng.standard_normal((seq, batch, inp)).astype(np.float32)),
            ("w", rng.standard_normal((1, 4 * hidden, inp)).astype(np.float32)),
            ("r", rng.standard_normal((1, 4 * hidden, hidden)).astype(np.float32)),
            ("b", np.zeros((1, 8 * hidden), np.float32)), ("lens", np.array([2, 5], np.int32))]
    model, feeds = node_model("LSTM", data, {"hidden_size": hidden}, opset=14, out_dtype=np.float32)
    assert "sequence_lens" in cpu_error(model, feeds)
    assert "sequence_lens" in mlx_error(model, feeds)
    feeds["lens"] = np.array([2, 1], np.int32)
    check_parity(model, feeds)


def test_attention_with_no_q_heads_is_an_error():
    # Was a SIGFPE (0 heads passed the "multiple of kv heads" test, then divided by zero).
    rng = np.random.default_rng(0)
    data = [("q", np.zeros((2, 0, 4, 8), np.float32)), ("k", rng.standard_normal((2, 3, 6, 8)).astype(np.float32)),
            ("v", rng.standard_normal((2, 3, 6, 8)).astype(np.float32))]
    model, feeds = node_model("Attention", data, opset=23, out_dtype=np.float32)
    assert "heads must be greater than 0" in cpu_error(model, feeds)
    assert "heads must be greater than 0" in mlx_error(model, feeds)


def test_pad_checks_constant_value_in_every_mode():
    model, feeds = node_model("Pad", [("x", np.ones((2, 3), np.float32))], {"mode": "wrap"}, opset=19,
                              host=[("pads", np.array([0, 1, 0, 1], np.int64)),
                                    ("value", np.ones((2, 3), np.float32))], out_dtype=np.float32)
    cpu_error(model, feeds)
    assert "constant_value" in mlx_error(model, feeds)


def test_pool_ceil_mode_other_than_0_1_is_left_to_ort():
    x = np.random.default_rng(0).standard_normal((1, 1, 7, 7)).astype(np.float32)
    model, feeds = node_model("AveragePool", [("x", x)], {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 64},
                              opset=19, out_dtype=np.float32)
    ref = run_cpu(model, feeds)
    got = mlx_session(model).run(None, feeds)
    np.testing.assert_array_equal(got[0], ref[0])  # ORT's kernel ran it (the EP declines)


# ---- (5) no leak -------------------------------------------------------------------------------

def leak_runs():
    """tools/fuzz/leak_runs.py (the long leak check): its model and RSS reader serve this test too."""
    sys.path.insert(0, str(ROOT / "tools" / "fuzz"))
    import leak_runs as lr  # noqa: PLC0415
    return lr


def test_rss_stays_flat_over_runs_with_varying_shapes():
    # Shapes cycle through a bounded set (the compile cache holds them all), so after a warm-up
    # nothing may grow: not MLX's buffers, not the caches, not ORT's outputs.
    lr = leak_runs()
    sess = mlx_session(lr.model())
    rng = np.random.default_rng(0)
    shapes = [(n, k) for n in (1, 3, 8, 17) for k in (1, 5)]

    def runs(count):
        for r in range(count):
            n, k = shapes[r % len(shapes)]
            sess.run(None, {"x": rng.standard_normal((n, 16)).astype(np.float32),
                            "i": rng.integers(-n, n, size=k).astype(np.int64)})

    runs(300)
    gc.collect()
    before = lr.rss()
    runs(2000)
    gc.collect()
    grown = lr.rss() - before
    assert grown < 4 << 20, f"RSS grew by {grown} bytes over 2000 runs"


# ---- (6) lifecycle -----------------------------------------------------------------------------

def long_model():
    f = TensorProto.FLOAT
    nodes = [helper.make_node("MatMul", ["x", "x"], ["a"]), helper.make_node("Tanh", ["a"], ["y"])]
    graph = helper.make_graph(nodes, "long", [helper.make_tensor_value_info("x", f, [256, 256])],
                              [helper.make_tensor_value_info("y", f, [256, 256])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_run_cancelled_through_the_terminate_flag():
    sess = mlx_session(long_model())
    x = np.ones((256, 256), np.float32) / 256
    ro = ort.RunOptions()
    ro.terminate = True
    with pytest.raises(Exception, match="(?i)terminate"):
        sess.run(None, {"x": x}, ro)
    # Terminating runs on other threads: each run either completes or reports termination.
    ro = ort.RunOptions()
    outcomes = []

    def loop():
        for _ in range(50):
            try:
                sess.run(None, {"x": x}, ro)
                outcomes.append("ok")
            except Exception as e:  # noqa: BLE001
                assert "terminate" in str(e).lower(), e
                outcomes.append("terminated")

    threads = [threading.Thread(target=loop) for _ in range(2)]
    for t in threads:
        t.start()
    ro.terminate = True
    for t in threads:
        t.join()
    assert "terminated" in outcomes
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], np.tanh(x @ x), rtol=1e-5)


def test_session_destroyed_while_another_runs():
    # ORT forbids destroying a session during its own Run (Python keeps it alive while a thread is
    # in run()); what the EP must survive is sessions torn down (their partitions' compiled
    # functions freed on the MLX thread) while other sessions run on it.
    data = long_model().SerializeToString()
    x = np.ones((256, 256), np.float32) / 256
    want = np.tanh(x @ x)
    keep = mlx_session(data)
    stop, errors = threading.Event(), []

    def loop():
        while not stop.is_set():
            try:
                np.testing.assert_allclose(keep.run(None, {"x": x})[0], want, rtol=1e-5)
            except Exception as e:  # noqa: BLE001
                errors.append(e)
                return

    t = threading.Thread(target=loop)
    t.start()
    try:
        for _ in range(10):
            other = mlx_session(data)
            runner = threading.Thread(target=lambda s=other: s.run(None, {"x": x}))
            runner.start()
            del other  # the last reference goes when its run returns
            runner.join()
            gc.collect()
    finally:
        stop.set()
        t.join()
    assert not errors, errors


REREGISTER_SCRIPT = textwrap.dedent("""
    import sys
    sys.path[:0] = {paths!r}
    import numpy as np, onnxruntime as ort
    import onnxruntime_ep_mlx as mlx_ep
    from onnx import TensorProto, helper
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])]), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    data = model.SerializeToString()
    lib = mlx_ep.library_path()
    x = np.array([-1, 0, 2], np.float32)
    for i in range(3):
        ort.register_execution_provider_library("MLXExecutionProvider", lib)
        sess = ort.InferenceSession(data, providers=["MLXExecutionProvider", "CPUExecutionProvider"])
        assert "MLXExecutionProvider" in sess.get_providers()
        assert sess.run(None, {{"x": x}})[0].tolist() == [0, 0, 2]
        del sess
        ort.unregister_execution_provider_library("MLXExecutionProvider")
    print("DONE")
""")


def test_plugin_unregistered_and_registered_again():
    script = REREGISTER_SCRIPT.format(paths=[str(ROOT / "tests" / "python"), str(ROOT / "python")])
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "DONE" in p.stdout, f"exit status {p.returncode}\n{p.stdout}\n{p.stderr[-3000:]}"


# ---- (3) fuzzing -------------------------------------------------------------------------------

FUZZ_COUNT = 2000  # 30 s on an idle 2-core machine, ~2 min on a loaded one; tools/fuzz/README.md: long runs


def test_fuzz_mutated_node_tests_against_ort():
    report = ROOT / "build" / "reports" / "fuzz-suite.json"
    p = subprocess.run([sys.executable, str(ROOT / "tools" / "fuzz" / "fuzz_nodes.py"), "--seed", "1",
                        "--count", str(FUZZ_COUNT), "--timeout", "60", "--report", str(report)],
                       capture_output=True, text=True, timeout=900)
    assert report.exists(), p.stdout[-3000:] + p.stderr[-3000:]
    summary = json.loads(report.read_text())["summary"]
    outcomes = summary["outcomes"]
    assert summary["mutants"] == FUZZ_COUNT
    assert outcomes.get("crash", 0) == 0 and outcomes.get("hang", 0) == 0, p.stdout[-5000:]
    assert summary["unexplained"] == 0, p.stdout[-5000:]
    assert outcomes.get("ok_equal", 0) > FUZZ_COUNT // 5, summary  # the mutants do run
