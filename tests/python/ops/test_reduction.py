"""Parity of the reduction family (Reduce*, ArgMax, ArgMin) against ORT's CPU EP."""
import numpy as np
import pytest

from harness import BF16, assert_close, check_parity, make_model, random_array, run_cpu, run_mlx
from harness_bf16 import check_bf16

REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp", "ReduceLogSum"]
FLOAT_ONLY = {"ReduceL2", "ReduceLogSumExp", "ReduceLogSum"}

# (shape, axes or None for "all", keepdims)
CASES = [
    ((3, 4, 5), [1], 1),
    ((3, 4, 5), [0, 2], 0),
    ((3, 4, 5), None, 0),
    ((3, 4, 5), None, 1),
    ((2, 3, 4, 5), [-1, -3], 1),
    ((7,), [0], 0),
    ((), None, 1),
    ((2, 0, 3), [1], 1),    # reduce over an empty dim: the op's identity value
    ((2, 0, 3), None, 0),
    ((0, 3), [1], 0),       # empty output
]


def axes_input_since(op):
    return 13 if op == "ReduceSum" else 18


def reduce_model(op, dtype, shape, axes, keepdims, opset, axes_as="const", noop=None):
    """A Reduce* model; axes as attribute below the op's input-axes opset, else as an input
    ("const": initializer, "input": runtime graph input)."""
    attrs = {"keepdims": keepdims}
    if noop is not None:
        attrs["noop_with_empty_axes"] = noop
    inputs = [("x", dtype, list(shape))]
    inits = {}
    if opset < axes_input_since(op):
        if axes is not None:
            attrs["axes"] = axes
    elif axes is not None:
        inputs.append(("axes", np.int64, [len(axes)]))
        if axes_as == "const":
            inits["axes"] = np.array(axes, dtype=np.int64)
    return make_model(op, inputs, [("y", None, None)], attrs, opset=opset, initializers=inits)


def reduce_data(op, shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        lo = 0 if np.dtype(dtype).kind == "u" else -4
        return random_array(shape, dtype, rng, low=lo, high=4)
    if np.dtype(dtype) == np.bool_:
        return random_array(shape, dtype, rng)
    lo, hi = (0.5, 2.0) if op in ("ReduceLogSum", "ReduceProd") else (-2.0, 2.0)
    return random_array(shape, np.float32, rng, low=lo, high=hi).astype(dtype)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-k{c[2]}")
@pytest.mark.parametrize("opset", [11, 18])
@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_float32(op, opset, case):
    shape, axes, keepdims = case
    model = reduce_model(op, np.float32, shape, axes, keepdims, opset)
    check_parity(model, {"x": reduce_data(op, shape, np.float32)})


@pytest.mark.parametrize("dtype", [np.float16, np.float64, BF16], ids=["f16", "f64", "bf16"])
@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_other_floats(op, dtype):
    shape, axes = (4, 6, 5), [0, 2]
    x = reduce_data(op, shape, dtype, seed=1)
    model = reduce_model(op, dtype, shape, axes, 1, 18)
    if np.dtype(dtype) == BF16:
        # ORT's CPU EP has no bfloat16 reductions: reference = float32 result rounded once.
        x32 = x.astype(np.float32)
        ref32 = run_cpu(reduce_model(op, np.float32, shape, axes, 1, 18), {"x": x32})
        check_bf16(model, {"x": x32}, ref32)
    else:
        check_parity(model, {"x": x})


INT_CASES = [
    ("ReduceSum", np.int32), ("ReduceSum", np.int64), ("ReduceMean", np.int32), ("ReduceMean", np.int64),
    ("ReduceMax", np.int32), ("ReduceMax", np.int64), ("ReduceMax", np.int8), ("ReduceMax", np.uint8),
    ("ReduceMin", np.int32), ("ReduceMin", np.int64), ("ReduceMin", np.int8), ("ReduceMin", np.uint8),
    ("ReduceProd", np.int32), ("ReduceProd", np.int64), ("ReduceL1", np.int32), ("ReduceL1", np.int64),
    ("ReduceSumSquare", np.int32), ("ReduceSumSquare", np.int64),
]


@pytest.mark.parametrize("case", [((3, 4, 5), [1], 0), ((3, 4, 5), None, 1), ((2, 0, 3), [1], 0)],
                         ids=["axis1", "all", "empty"])
@pytest.mark.parametrize("op,dtype", INT_CASES, ids=[f"{o}-{np.dtype(t).name}" for o, t in INT_CASES])
def test_reduce_int(op, dtype, case):
    shape, axes, keepdims = case
    model = reduce_model(op, dtype, shape, axes, keepdims, 18)
    check_parity(model, {"x": reduce_data(op, shape, dtype, seed=2)})


def test_reduce_mean_int_truncates_toward_zero():
    x = np.array([[-7, 7, -1], [-8, 1, 0], [5, 0, 0], [-5, 0, 0]], dtype=np.int32)
    model = reduce_model("ReduceMean", np.int32, x.shape, [1], 0, 18)
    check_parity(model, {"x": x})


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceProd", "ReduceSumSquare", "ReduceL1"])
def test_reduce_int32_saturates_like_ort(op):
    """ORT accumulates integer reductions in double and clamps to the type's range."""
    m = 2**31 - 1
    x = np.array([[m, 1, 0, 1], [m, m, m, -m], [-m, -5, 1, 1], [70000, 70000, 70000, 70000],
                  [-70000, 70000, 70000, 70000], [70000, 0, 70000, 70000], [-3, 7, 1, 2]], dtype=np.int32)
    check_parity(reduce_model(op, np.int32, x.shape, [1], 0, 18), {"x": x})
    check_parity(reduce_model(op, np.int32, x.shape, [0], 1, 18), {"x": x})


def test_reduce_sum_square_int32_noop():
    x = np.array([[70000, -3], [46341, 2]], dtype=np.int32)
    check_parity(reduce_model("ReduceSumSquare", np.int32, x.shape, None, 1, 18, noop=1), {"x": x})


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_reduce_bool(op):
    x = np.array([[True, False, True], [False, False, False], [True, True, True]])
    for axes in ([1], [0], None):
        check_parity(reduce_model(op, np.bool_, x.shape, axes, 1, 20), {"x": x})


@pytest.mark.parametrize("axes", [None, []], ids=["absent", "empty"])
@pytest.mark.parametrize("noop", [0, 1])
@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_noop_with_empty_axes(op, noop, axes):
    shape = (3, 4)
    x = reduce_data(op, shape, np.float32, seed=3)
    if op == "ReduceLogSum" and noop:
        x = np.abs(x) + 0.5
    model = reduce_model(op, np.float32, shape, axes, 1, 18, noop=noop)
    check_parity(model, {"x": x})


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMean"])
def test_reduce_runtime_axes(op):
    """Axes from a graph input: read on the host, the node still runs on MLX."""
    shape = (3, 4, 5)
    model = reduce_model(op, np.float32, shape, [0, -1], 0, 18, axes_as="input")
    x = reduce_data(op, shape, np.float32)
    for axes in ([0, -1], [1, 2]):
        check_parity(model, {"x": x, "axes": np.array(axes, dtype=np.int64)})


def test_reduce_duplicate_axes():
    model = reduce_model("ReduceSum", np.float32, (3, 4), [1, -1], 1, 18)
    check_parity(model, {"x": reduce_data("ReduceSum", (3, 4), np.float32)})


def test_reduce_logsumexp_infinities():
    inf = np.inf
    x = np.array([[-inf, -inf], [inf, 1.0], [inf, -inf], [inf, inf], [80.0, 80.0], [-100.0, -101.0]],
                 dtype=np.float32)
    check_parity(reduce_model("ReduceLogSumExp", np.float32, x.shape, [1], 0, 18), {"x": x})


def test_reduce_sum_nan_propagates():
    x = np.array([[1.0, np.nan, 2.0], [1.0, 2.0, 3.0]], dtype=np.float32)
    for op in ("ReduceSum", "ReduceMean", "ReduceL2", "ReduceLogSumExp"):
        check_parity(reduce_model(op, np.float32, x.shape, [1], 0, 18), {"x": x})


@pytest.mark.parametrize("shape,axes", [((16, 65536), [1]), ((65536, 16), [0]), ((64, 64, 64), [0, 2]),
                                        ((1 << 20,), None)], ids=["rows", "cols", "mixed", "all"])
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp"])
def test_reduce_large_float32(op, shape, axes):
    """Long reductions stay within 1e-5 of ORT (positive data: no cancellation)."""
    x = random_array(shape, np.float32, np.random.default_rng(7), low=0.5, high=1.5)
    check_parity(reduce_model(op, np.float32, shape, axes, 0, 18), {"x": x})


# Float32 sums over consecutive axes run as one primitive on MLX's CPU device (reduction_cpu.cc):
# rows (inner 1), columns (inner > 1, in chunks of 256), short chains (n < 256: MLX's order),
# every reduced-axis position; and the normalizations and pooling that sum through it.
SUM_CPU_CASES = [((2, 512, 508), [2]), ((2, 512, 300), [1]), ((3, 255, 7), [1]), ((2, 257, 3, 5), [1, 2]),
                 ((300, 2, 4), [0]), ((5, 1000), [1]), ((1, 1, 70000), [2]), ((4, 3, 9, 9), [2, 3])]


@pytest.mark.parametrize("shape,axes", SUM_CPU_CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL1"])
def test_sums_in_place(op, shape, axes):
    x = random_array(shape, np.float32, np.random.default_rng(11), low=-2.0, high=3.0)
    check_parity(reduce_model(op, np.float32, shape, axes, 0, 18), {"x": x})
    check_parity(reduce_model(op, np.float32, shape, axes, 1, 18), {"x": x})


def test_sums_of_a_transposed_input():
    """A sum over a view (the Transpose's output): the primitive reads it row-major first."""
    from onnx import helper
    from harness import make_graph_model
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3]),
             helper.make_node("ReduceSum", ["t", "axes"], ["y"], keepdims=0)]
    model = make_graph_model(nodes, [("x", np.float32, [2, 300, 5, 1]), ("axes", np.int64, [1])], [("y", np.float32, None)],
                             initializers={"axes": np.array([2], np.int64)}, opset=18)
    x = random_array((2, 300, 5, 1), np.float32, np.random.default_rng(12))
    check_parity(model, {"x": x})


def test_sum_primitive_takes_the_sums():
    """The cases above sum through SumCpu, not MLX's Sum (nor the composed form's Transpose, Pad
    and two Sums); ONNXRUNTIME_EP_MLX_REDUCE_CPU_KERNEL=0 composes them again."""
    from harness import census_with_and_without, mlx_device
    if mlx_device() != "cpu":
        pytest.skip("the sum primitive is MLX's CPU device's")
    cases = [f"test_sums_in_place[ReduceSum-{s}-{a}]" for s, a in SUM_CPU_CASES[:3]] + ["test_sums_of_a_transposed_input"]
    on, off = census_with_and_without(__file__, cases, "ONNXRUNTIME_EP_MLX_REDUCE_CPU_KERNEL")
    assert len(on) == len(off) == 7, (on, off)
    assert all("SumCpu" in line and "Sum " not in line.replace("SumCpu", "") for line in on), on
    assert not any("SumCpu" in line for line in off) and all("Sum " in line for line in off), off


def test_reduce_max_min_nan_propagates():
    """NaN wins in ReduceMax/ReduceMin (numpy and the ONNX reference). ORT's CPU result depends on
    where the NaN sits and on the tensor layout (it skips NaNs unless one comes first), so the
    reference here is numpy, not ORT."""
    x = np.array([[1, np.nan, 3], [np.nan, -1, -2], [1, 2, 3]], dtype=np.float32)
    for op, fn in (("ReduceMax", np.max), ("ReduceMin", np.min)):
        for axes in ([1], [0]):
            check_parity(reduce_model(op, np.float32, x.shape, axes, 0, 18), {"x": x},
                         expected=[fn(x, axis=tuple(axes))])


@pytest.mark.parametrize("op,dtype", [("ReduceL2", np.int32), ("ReduceLogSumExp", np.int64),
                                      ("ReduceLogSum", np.int32)])
def test_reduce_declined_int_types(op, dtype):
    """Integer L2/LogSum/LogSumExp round through float math in ORT: declined, run on CPU."""
    shape = (3, 4)
    x = reduce_data(op, shape, dtype)
    x = np.abs(x) + 1
    model = reduce_model(op, dtype, shape, [1], 0, 18)
    got, mlx, total = run_mlx(model, {"x": x})
    assert mlx == 0 and total == 1
    assert_close(got[0], run_cpu(model, {"x": x})[0])


# ---- ArgMax / ArgMin ---------------------------------------------------------------------------

def arg_model(op, dtype, shape, axis, keepdims, last=None, opset=13):
    attrs = {"axis": axis, "keepdims": keepdims}
    if last is not None:
        attrs["select_last_index"] = last
    return make_model(op, [("x", dtype, list(shape))], [("y", np.int64, None)], attrs, opset=opset)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int32, np.int64, np.int8, np.uint8],
                         ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_reduce_dtypes(op, dtype):
    rng = np.random.default_rng(4)
    # Few distinct values: plenty of ties.
    x = rng.integers(0, 4, size=(3, 5, 4)).astype(dtype)
    for axis, keepdims, last in ((1, 1, 0), (-1, 0, 1), (0, 0, 0), (2, 1, 1)):
        check_parity(arg_model(op, dtype, x.shape, axis, keepdims, last), {"x": x})


@pytest.mark.parametrize("opset", [1, 11, 12, 13])
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_reduce_opsets(op, opset):
    x = np.round(random_array((4, 6), np.float32, np.random.default_rng(5)))
    last = 1 if opset >= 12 else None
    axis = -1 if opset >= 11 else 1
    check_parity(arg_model(op, np.float32, x.shape, axis, 1, last, opset=opset), {"x": x})


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_reduce_bf16(op):
    x = np.round(random_array((3, 7), np.float32, np.random.default_rng(6)))
    ref = run_cpu(arg_model(op, np.float32, x.shape, 1, 1, 1), {"x": x})
    check_bf16(arg_model(op, BF16, x.shape, 1, 1, 1), {"x": x}, ref)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_reduce_nan_first_index(op):
    """The first NaN wins (numpy and the ONNX reference); ORT's CPU answer depends on the layout."""
    x = np.array([[1, np.nan, 3], [np.nan, 5, 5], [2, 2, 1], [3, np.nan, np.nan]], dtype=np.float32)
    fn = np.argmax if op == "ArgMax" else np.argmin
    check_parity(arg_model(op, np.float32, x.shape, 1, 0), {"x": x}, expected=[fn(x, axis=1)])


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_reduce_rank1_and_empty(op):
    x = np.array([3.0, 1.0, 3.0, -2.0, -2.0], dtype=np.float32)
    for keepdims in (0, 1):
        for last in (0, 1):
            check_parity(arg_model(op, np.float32, x.shape, 0, keepdims, last), {"x": x})
    e = np.zeros((0, 3), dtype=np.float32)
    check_parity(arg_model(op, np.float32, e.shape, 1, 1), {"x": e})
