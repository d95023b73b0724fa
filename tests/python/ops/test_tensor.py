"""Parity tests of the tensor op family: Concat, Split, Slice, Gather, Identity, Constant,
ConstantOfShape, Range, Cast, CastLike (src/ops/tensor.cc, src/ops/tensor_const.cc)."""
import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from harness import (assert_declined, assert_mlx_error, check_parity, make_graph_model, make_model, node_model,
                     onnx_type, random_array, run_cpu, run_mlx)
from harness_bf16 import check_parity_via_float32 as parity

DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.float64, np.int8, np.int16, np.int32, np.int64,
          np.uint8, np.uint16, np.uint32, np.uint64, np.bool_]
INT64_MAX, INT64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min
INT32_MAX = np.iinfo(np.int32).max


# ---------------------------------------------------------------------------------------------
# Identity

@pytest.mark.parametrize("dtype", DTYPES)
def test_identity_dtypes(dtype):
    parity(*node_model("Identity", [("x", random_array((2, 3), dtype))]), dtype)


@pytest.mark.parametrize("opset", [1, 13, 14, 16, 19, 21])
@pytest.mark.parametrize("shape", [(), (0, 3), (2, 3, 4)])
def test_identity_opsets(opset, shape):
    parity(*node_model("Identity", [("x", random_array(shape, np.int32))], opset=opset))


# ---------------------------------------------------------------------------------------------
# Concat

@pytest.mark.parametrize("dtype", DTYPES)
def test_concat_dtypes(dtype):
    a, b = random_array((2, 3), dtype), random_array((2, 4), dtype, np.random.default_rng(1))
    parity(*node_model("Concat", [("a", a), ("b", b)], {"axis": 1}), dtype)


@pytest.mark.parametrize("opset", [4, 11, 13])
@pytest.mark.parametrize("shapes,axis", [
    ([(2, 3), (4, 3)], 0), ([(2, 3), (2, 1), (2, 5)], -1), ([(3,), (2,)], 0), ([(2, 0), (2, 3)], 1),
    ([(2, 3, 4)], 2), ([(2, 3, 4), (2, 1, 4)], -2), ([(0, 3), (0, 3)], 0), ([(1, 2, 3, 4), (1, 2, 3, 4)], 3),
])
def test_concat_cases(opset, shapes, axis):
    if opset < 11 and axis < 0:
        pytest.skip("negative axis needs opset 11")
    rng = np.random.default_rng(0)
    data = [(f"x{i}", random_array(s, np.float32, rng)) for i, s in enumerate(shapes)]
    parity(*node_model("Concat", data, {"axis": axis}, opset))


def test_concat_mismatch_errors():
    a, b = random_array((2, 3), np.float32), random_array((3, 3), np.float32)
    m = make_model("Concat", [("a", np.float32, ["n", 3]), ("b", np.float32, ["m", 3])], [("y", np.float32, None)],
                   {"axis": 1})
    assert_mlx_error(m, {"a": a, "b": b})


# ---------------------------------------------------------------------------------------------
# Split

@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.int64, np.uint8, np.bool_])
def test_split_dtypes(dtype):
    x = random_array((4, 6), dtype)
    parity(*node_model("Split", [("x", x)], {"axis": 1}, 13, host=[("split", np.array([2, 4], np.int64))],
                       outputs=2), dtype)


@pytest.mark.parametrize("opset,attrs,split,shape,outputs", [
    (2, {"axis": 1, "split": [1, 5]}, None, (3, 6), 2),
    (2, {"axis": 0}, None, (6, 2), 3),
    (11, {"axis": -1, "split": [2, 0, 2]}, None, (3, 4), 3),
    (11, {}, None, (4,), 2),
    (13, {"axis": 1}, [3, 3], (2, 6, 2), 2),
    (13, {"axis": -1}, None, (2, 6), 3),
    (13, {}, [0, 4], (4, 2), 2),
    (18, {"axis": 0, "num_outputs": 3}, None, (7, 2), 3),   # uneven: 3, 3, 1
    (18, {"axis": 1, "num_outputs": 2}, None, (2, 6), 2),
    (18, {"axis": 0}, [1, 2, 3], (6,), 3),
    (18, {"axis": 0, "num_outputs": 4}, None, (6,), 4),     # uneven: 2, 2, 2, 0
])
def test_split_cases(opset, attrs, split, shape, outputs):
    x = random_array(shape, np.float32)
    host = [("split", np.array(split, np.int64))] if split is not None else []
    model, feeds = node_model("Split", [("x", x)], attrs, opset, host=host, outputs=outputs)
    try:
        run_cpu(model, feeds)
    except Exception:
        assert_mlx_error(model, feeds)
        return
    parity(model, feeds)


def test_split_runtime_sizes():
    x = random_array((2, 7), np.int32)
    parity(*node_model("Split", [("x", x)], {"axis": 1}, 13, host=[("split", np.array([3, 4], np.int64))],
                       host_as_input=True, outputs=2))


def test_split_empty_split_input_is_equal_split():
    x = random_array((2, 6), np.float32)
    parity(*node_model("Split", [("x", x)], {"axis": 1}, 13, host=[("split", np.zeros((0,), np.int64))],
                       host_as_input=True, outputs=3))


def test_split_uneven_errors():
    x = random_array((5,), np.float32)
    assert_mlx_error(*node_model("Split", [("x", x)], {"axis": 0}, 13, outputs=2, out_dtype=np.float32))


# ---------------------------------------------------------------------------------------------
# Slice

SLICE_CASES = [
    # (shape, starts, ends, axes, steps)
    ((20, 10, 5), [0, 0], [3, 10], [0, 1], [1, 1]),
    ((20, 10, 5), [0, 0, 3], [20, 10, 4], None, None),
    ((20, 10, 5), [1], [1000], [1], [1]),
    ((20, 10, 5), [1000], [1000], [1], [1]),
    ((20, 10, 5), [-1000], [1000], [0], [3]),
    ((20, 10, 5), [0, -2], [-1, -1], [1, 2], None),
    ((20, 10, 5), [0, 0, 3], [20, 10, 4], [0, -2, -1], None),
    ((20, 10, 5), [20, 10, 4], [0, 0, 1], [0, 1, 2], [-1, -3, -2]),
    ((20, 10, 5), [-1], [INT64_MIN], [0], [-1]),
    ((20, 10, 5), [-1], [INT64_MAX], [0], [-1]),     # ORT: INT_MAX means "to the front" here
    ((20, 10, 5), [5], [INT64_MAX], [0], [2]),
    ((20, 10, 5), [5], [INT32_MAX], [0], [-2]),
    ((20, 10, 5), [5], [-21], [0], [-4]),
    ((20, 10, 5), [5], [2], [0], [1]),                # start > end: empty
    ((20, 10, 5), [2], [5], [0], [-1]),               # empty with a negative step
    ((20, 10, 5), [1000], [-1000], [1], [-1]),
    ((20, 10, 5), [3], [4], [0], [-1]),
    ((20, 10, 5), [19], [0], [0], [-100]),
    ((20, 10, 5), [0], [20], [0], [INT64_MAX]),
    ((20, 10, 5), [7], [8], [0], [INT64_MIN]),
    ((0, 5), [0, 1], [10, 4], [0, 1], [1, 1]),
    ((0, 5), [-1, 4], [-10, 0], [0, 1], [-1, -2]),
    ((7,), [-3], [INT64_MAX], None, None),
]


@pytest.mark.parametrize("case", SLICE_CASES, ids=[str(i) for i in range(len(SLICE_CASES))])
@pytest.mark.parametrize("host_as_input", [False, True])
def test_slice(case, host_as_input):
    shape, starts, ends, axes, steps = case
    x = random_array(shape, np.float32)
    host = [("starts", np.array(starts, np.int64)), ("ends", np.array(ends, np.int64))]
    if axes is not None or steps is not None:
        host.append(("axes", np.array(axes, np.int64) if axes is not None else None))
    if steps is not None:
        host.append(("steps", np.array(steps, np.int64)))
    model, feeds = node_model("Slice", [("x", x)], opset=13, host=host, host_as_input=host_as_input)
    if not host_as_input and steps and steps[0] < 0 and ends[0] in (INT64_MAX, INT32_MAX):
        # ORT's kernel reads this end as "through index 0", ONNX shape inference (static output
        # shape) as dim-1: the claim declines it and ORT's kernel runs it.
        assert_declined(model, feeds)
        return
    parity(model, feeds)


@pytest.mark.parametrize("dtype", DTYPES)
def test_slice_dtypes(dtype):
    x = random_array((6, 5), dtype)
    host = [("starts", np.array([1, 4], np.int32)), ("ends", np.array([6, 0], np.int32)),
            ("axes", np.array([0, 1], np.int32)), ("steps", np.array([2, -2], np.int32))]
    parity(*node_model("Slice", [("x", x)], opset=13, host=host), dtype)


@pytest.mark.parametrize("opset", [10, 11, 13])
def test_slice_opsets(opset):
    x = random_array((4, 5, 6), np.int64)
    host = [("starts", np.array([-1, 1], np.int64)), ("ends", np.array([-5, 100], np.int64)),
            ("axes", np.array([2, 0], np.int64)), ("steps", np.array([-2, 2], np.int64))]
    parity(*node_model("Slice", [("x", x)], opset=opset, host=host))


@pytest.mark.parametrize("attrs", [
    {"starts": [0, 1], "ends": [2, 1000]},
    {"starts": [-3], "ends": [-1], "axes": [1]},
    {"starts": [2, -100], "ends": [1, 100], "axes": [0, 1]},
    {"starts": [1], "ends": [INT64_MAX], "axes": [0]},
])
def test_slice_opset1(attrs):
    x = random_array((4, 5), np.float32)
    parity(*node_model("Slice", [("x", x)], attrs, opset=1, out_dtype=np.float32))


def test_slice_duplicate_axes_errors():
    x = random_array((4, 5), np.float32)
    host = [("starts", np.array([0, 1], np.int64)), ("ends", np.array([2, 3], np.int64)),
            ("axes", np.array([0, 0], np.int64))]
    assert_mlx_error(*node_model("Slice", [("x", x)], opset=13, host=host, host_as_input=True))


# ---------------------------------------------------------------------------------------------
# Gather

@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_dtypes(dtype):
    x = random_array((5, 4), dtype)
    idx = np.array([[0, -1], [3, -5]], np.int64)
    parity(*node_model("Gather", [("x", x), ("i", idx)], {"axis": 0}), dtype)


@pytest.mark.parametrize("opset", [1, 11, 13])
@pytest.mark.parametrize("shape,indices,axis", [
    ((5, 4), [1, -2, 3], 1),
    ((5, 4), [-1], -1),
    ((5, 4, 3), [[2, -3], [0, 1]], 1),
    ((5, 4, 3), 2, 0),                     # scalar index: the axis disappears
    ((5, 4, 3), -1, 2),
    ((5,), [4, -5, 0, 0], 0),
    ((5, 4), np.zeros((0,), np.int64), 0),
    ((5, 0), [1, 2], 0),
    ((3, 4), np.zeros((2, 0), np.int64), 1),
])
def test_gather_cases(opset, shape, indices, axis):
    if opset < 11 and (np.min(indices, initial=0) < 0 or axis < 0):
        pytest.skip("negative indices/axis need opset 11")
    x = random_array(shape, np.float32)
    idx = np.asarray(indices, np.int64)
    parity(*node_model("Gather", [("x", x), ("i", idx)], {"axis": axis}, opset))


def test_gather_int32_indices():
    x = random_array((6, 3), np.float16)
    idx = np.array([5, -6, 2], np.int32)
    parity(*node_model("Gather", [("x", x), ("i", idx)], {"axis": 0}), np.float16)


def test_gather_constant_indices():
    x = random_array((6, 3), np.int32)
    model, feeds = node_model("Gather", [("x", x)], {"axis": 1}, host=[("i", np.array([-1, 0], np.int64))])
    parity(model, feeds)


def test_gather_out_of_range_is_an_error():
    """ORT's CPU kernel errors on out-of-range indices; a compiled MLX graph cannot raise on data,
    so MLX clamps them into [0, n-1] (never reads out of bounds) and a runtime check of the
    compiled graph fails the run after evaluation (documented in tensor.cc)."""
    x = random_array((5, 3), np.float32)
    idx = np.array([7, -9, 2], np.int64)
    model, feeds = node_model("Gather", [("x", x), ("i", idx)], {"axis": 0})
    with pytest.raises(Exception):
        run_cpu(model, feeds)
    with pytest.raises(Exception, match=r"\[MlxEp\]\[Gather\].*out of data bounds"):
        run_mlx(model, feeds)


# ---------------------------------------------------------------------------------------------
# Constant (ORT turns Constant nodes into initializers when it loads a graph, so no Constant
# node ever reaches an EP; this only checks that such graphs still run).

def test_constant_graph_runs():
    value = helper.make_tensor("v", TensorProto.FLOAT, [2], [1.5, -2.0])
    model = make_model("Constant", [], [("y", np.float32, None)], {"value": value})
    got, _, _ = run_mlx(model, {})
    np.testing.assert_array_equal(got[0], np.array([1.5, -2.0], np.float32))


# ---------------------------------------------------------------------------------------------
# ConstantOfShape (a constant shape would be folded by ORT, so the shape is fed at run time)

@pytest.mark.parametrize("value", [
    None,
    np.array([2.5], np.float32), np.array([-3], np.int32), np.array([7], np.int64), np.array([True]),
    np.array([1.25], np.float16), np.array([0.1], np.float64), np.array([200], np.uint8),
])
@pytest.mark.parametrize("shape", [[2, 3], [], [0, 4], [1, 1, 5]])
def test_constant_of_shape(value, shape):
    attrs = {"value": onnx.numpy_helper.from_array(value, "value")} if value is not None else None
    model, feeds = node_model("ConstantOfShape", [("s", np.array(shape, np.int64))], attrs, opset=20)
    parity(model, feeds)


@pytest.mark.parametrize("opset", [9, 20, 21])
def test_constant_of_shape_opsets(opset):
    value = onnx.numpy_helper.from_array(np.array([4], np.int16), "value")
    parity(*node_model("ConstantOfShape", [("s", np.array([3, 2], np.int64))], {"value": value}, opset=opset))


# ---------------------------------------------------------------------------------------------
# Range (inputs fed at run time: ORT folds constant ones)

@pytest.mark.parametrize("dtype,start,limit,delta", [
    (np.float32, 0.1, 100.0, 0.1),        # 999 accumulated float steps: must match ORT bit for bit
    (np.float32, 10.0, -3.0, -0.7),
    (np.float32, 1.0, 1.0, 0.5),          # empty
    (np.float32, 1.0, 5.0, -1.0),         # empty
    (np.float64, -2.0, 7.3, 0.37),
    (np.int16, -5, 300, 7),
    (np.int32, 10, -20, -3),
    (np.int64, 0, 5, 10),
    (np.int64, -(2 ** 40), 2 ** 40, 2 ** 37),
])
def test_range(dtype, start, limit, delta):
    feeds = [(n, np.array(v, dtype)) for n, v in (("start", start), ("limit", limit), ("delta", delta))]
    got = parity(*node_model("Range", feeds, opset=11))
    ref = run_cpu(*node_model("Range", feeds, opset=11))
    np.testing.assert_array_equal(got[0], ref[0])  # bitwise, not only within tolerance


# ---------------------------------------------------------------------------------------------
# Cast / CastLike

CAST_TYPES = [np.float32, np.float16, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
              np.uint32, np.uint64, np.bool_]


def cast_source(dtype):
    """Values of `dtype` whose conversion to every other type is defined by ONNX: integers
    (incl. ones that wrap when narrowed), fractions (truncation toward zero), and for floats also
    the signed zeros and values that round or overflow when narrowed to float16."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.array([True, False, True])
    if dtype.kind == "f":
        v = [0.0, -0.0, 1.0, -1.0, 0.4, -0.6, 1.5, -2.5, 2.7, -3.9, 100.25, -100.75, 127.0, -128.0, 12.9]
        if dtype != np.float16:
            v += [1e-8, 70000.0, -70000.0, 1e30, 3.0000002, 1.0 / 3.0]
        return np.array(v, dtype)
    info = np.iinfo(dtype)
    v = [0, 1, 2, 100, info.max, info.max - 1, 2 ** 24 + 1 if info.max > 2 ** 25 else info.max // 3]
    if info.min < 0:
        v += [-1, -100, info.min, info.min + 1]
    return np.array(v, dtype)


@pytest.mark.parametrize("src", CAST_TYPES)
@pytest.mark.parametrize("dst", CAST_TYPES)
def test_cast_pairs(src, dst):
    x = cast_source(src)
    if np.dtype(dst).kind in "iu" and np.dtype(src).kind == "f":
        # float -> int is undefined in ONNX outside dst's range: keep in-range values only
        info = np.iinfo(dst)
        x = x[(x.astype(np.float64) > info.min - 1) & (x.astype(np.float64) < info.max + 1)]
    parity(*node_model("Cast", [("x", x)], {"to": onnx_type(dst)}, opset=13))


@pytest.mark.parametrize("src", [np.float32, np.float64, np.float16])
def test_cast_special_floats(src):
    """NaN and infinities: to float types they stay NaN/inf, to bool NaN and inf are true."""
    x = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-7], src)
    for dst in [np.float32, np.float16, np.float64, np.bool_]:
        parity(*node_model("Cast", [("x", x)], {"to": onnx_type(dst)}))


@pytest.mark.parametrize("src,dst", [(np.float32, np.float16), (np.float64, np.float32), (np.float64, np.float16)])
def test_cast_rounding(src, dst):
    """Random values over a wide range of magnitudes (incl. float16 subnormals and overflow):
    round-to-nearest-even must match ORT bit for bit."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(4096) * np.exp(rng.uniform(-30, 30, 4096))).astype(src)
    got = parity(*node_model("Cast", [("x", x)], {"to": onnx_type(dst)}))
    ref = run_cpu(*node_model("Cast", [("x", x)], {"to": onnx_type(dst)}))
    np.testing.assert_array_equal(got[0].view(np.uint8), ref[0].view(np.uint8))


def bf16_cast_chain(n, dst):
    """float32[n] -> Cast(bfloat16) -> Cast(dst)."""
    nodes = [helper.make_node("Cast", ["x"], ["b"], to=TensorProto.BFLOAT16),
             helper.make_node("Cast", ["b"], ["y"], to=onnx_type(dst))]
    return make_graph_model(nodes, [("x", np.float32, [n])], [("y", dst, None)])


def test_cast_to_and_from_bfloat16():
    """float32 -> bfloat16 -> float32 (rounding) and bfloat16 -> each type, as a chain of Casts:
    all on MLX, compared with ORT's CPU Casts bit for bit."""
    rng = np.random.default_rng(4)
    x = np.concatenate([(rng.standard_normal(2048) * np.exp(rng.uniform(-40, 40, 2048))),
                        [0.0, -0.0, 1.0, -1.5, 2.5, 100.0, -100.0, 3.0e38, np.inf, -np.inf, np.nan]]).astype(np.float32)
    for dst in [np.float32, np.float16, np.float64, np.bool_]:
        model = bf16_cast_chain(len(x), dst)
        got, ref = check_parity(model, {"x": x})[0], run_cpu(model, {"x": x})[0]
        if got.dtype.kind == "f":  # bit for bit, except NaN payloads
            nan = np.isnan(got)
            np.testing.assert_array_equal(nan, np.isnan(ref))
            got, ref = got[~nan], ref[~nan]
        np.testing.assert_array_equal(got.view(np.uint8), ref.view(np.uint8))
    small = np.array([0, 1, -1, 2.5, -3.75, 100, -128, 127], np.float32)  # exact in bfloat16, in range
    for dst in [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]:
        xs = small[small >= 0] if np.dtype(dst).kind == "u" else small
        model = bf16_cast_chain(len(xs), dst)
        check_parity(model, {"x": xs})


@pytest.mark.parametrize("opset", [6, 9, 13, 19, 21])
def test_cast_opsets(opset):
    x = np.array([1.5, -2.25, 3.0, 0.0], np.float32)
    parity(*node_model("Cast", [("x", x)], {"to": TensorProto.INT32}, opset=opset))
    parity(*node_model("Cast", [("x", x)], {"to": TensorProto.DOUBLE}, opset=opset))


def test_cast_to_string_is_declined():
    x = np.array([1.5, -2.0], np.float32)
    assert_declined(*node_model("Cast", [("x", x)], {"to": TensorProto.STRING}, out_dtype=None))


@pytest.mark.parametrize("opset", [15, 19, 21])
@pytest.mark.parametrize("src,dst", [(np.float32, np.int64), (np.int32, np.float16), (np.float64, np.float32),
                                     (np.uint8, np.bool_), (np.bool_, np.float32)])
def test_castlike(opset, src, dst):
    x = cast_source(src)
    if np.dtype(src).kind == "f" and np.dtype(dst).kind in "iu":
        x = x[np.abs(x) < 1000]
    like = np.zeros((1,), dst)
    parity(*node_model("CastLike", [("x", x), ("like", like)], opset=opset))


# ---------------------------------------------------------------------------------------------
# A typical shape-computation chain: Shape -> Gather -> Unsqueeze -> Concat -> Reshape, with the
# computed shape crossing a partition boundary into Reshape's host input.

def test_shape_chain():
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["d0"], axis=0),
        helper.make_node("Unsqueeze", ["d0", "ax"], ["d0u"]),
        helper.make_node("Concat", ["d0u", "minus1"], ["new_shape"], axis=0),
        helper.make_node("Reshape", ["x", "new_shape"], ["r"]),
        helper.make_node("Slice", ["r", "st", "en", "ax", "stp"], ["sl"]),
        helper.make_node("Cast", ["sl"], ["y"], to=TensorProto.INT64),
    ]
    inits = {"i0": np.array(0, np.int64), "ax": np.array([0], np.int64), "minus1": np.array([-1], np.int64),
             "st": np.array([-1], np.int64), "en": np.array([INT64_MIN], np.int64), "stp": np.array([-2], np.int64)}
    model = make_graph_model(nodes, [("x", np.float32, ["n", 3, 4])], [("y", np.int64, None)], inits)
    x = random_array((5, 3, 4), np.float32, low=-50, high=50)
    check_parity(model, {"x": x})
