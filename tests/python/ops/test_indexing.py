"""Parity tests of the indexing family (src/ops/scatter_gather_nd.cc, one_hot.cc): GatherND,
ScatterND, ScatterElements, Scatter and OneHot against ORT's CPU EP. Where ORT's CPU EP has no
kernel (bfloat16 data, float16/bfloat16 add/mul, bool max/min, ...) the ONNX reference
implementation (sequential updates in the data type) is the expected result."""
import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto
from onnx.reference.ops.op_scatter_elements import scatter_elements as scatter_elements_reference
from onnx.reference.ops.op_scatternd import _scatter_nd_impl as scatter_nd_reference

from harness import (NO_KERNEL, BF16, assert_close, assert_declined, check_parity, float64_on_mlx, ids, make_model,
                     mlx_device, node_model, random_array, run_cpu, run_mlx)
from harness_bf16 import bf16_wrapped, check_bf16, feeds_as_float32
from harness_bf16 import check_parity_via_float32 as parity

DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.float64, np.int8, np.int16, np.int32, np.int64,
          np.uint8, np.uint16, np.uint32, np.uint64, np.bool_]
REDUCTIONS = ["none", "add", "mul", "max", "min"]


def data_of(shape, dtype, seed=0):
    """Small values (products of a few stay exact and in range for every type)."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) < 0.5
    lo = 0 if np.dtype(dtype).kind in "ub" else -3
    return rng.integers(lo, 4, size=shape).astype(np.float32).astype(dtype)


def unique_positions(dims, count, seed=0):
    """`count` distinct index tuples into `dims`, negative (from the end) at random: [count, len(dims)]."""
    rng = np.random.default_rng(seed)
    flat = rng.permutation(int(np.prod(dims)))[:count]
    pos = np.stack(np.unravel_index(flat, dims), axis=-1).astype(np.int64) if dims else np.zeros((count, 0), np.int64)
    negate = rng.random(pos.shape) < 0.5
    return np.where(negate, pos - np.array(dims, np.int64), pos)


def float_max_min_scatter(model):
    """True for a ScatterElements/ScatterND max or min on floating data: declined on GPUs, where
    MLX's scatter keeps NaN data and drops NaN updates (ClaimScatter's reason)."""
    node = next((n for n in model.graph.node if n.op_type in ("ScatterElements", "ScatterND")), None)
    if node is None:  # a legacy Scatter or a gather: no reduction
        return False
    reduction = next((a.s.decode() for a in node.attribute if a.name == "reduction"), "none")
    data_type = model.graph.input[0].type.tensor_type.elem_type
    floats = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE)
    return reduction in ("max", "min") and data_type in floats


def check_against(model, feeds, expected, compare_ort=True):
    """MLX must match `expected` (the ONNX reference) exactly and, where ORT's CPU EP has a kernel,
    ORT too. bfloat16 crosses the API through check_bf16's casts."""
    bf16 = any(v.dtype == BF16 for v in feeds.values())
    if mlx_device() != "cpu" and float_max_min_scatter(model):
        # Declined on GPUs: ORT's CPU EP runs it, or, where it has no kernel (bfloat16, ScatterND
        # float16), refuses it at load or at run ("not supported"), which only a declined node meets.
        if bf16 or not compare_ort:
            with pytest.raises(Exception, match=NO_KERNEL + "|not supported"):
                run_mlx(bf16_wrapped(model) if bf16 else model, feeds_as_float32(feeds) if bf16 else feeds)
            return None
        assert_declined(model, feeds)
        return run_cpu(model, feeds)
    if bf16:
        return check_bf16(model, feeds, [expected], rtol=0, atol=0)
    if mlx_device() != "cpu" and np.asarray(expected).dtype in (np.int64, np.uint64):
        # MLX's GPU scatter has no 8-byte types: declined there (ClaimScatter's reason), and run by
        # ORT's CPU EP where it has a kernel; where it has none, no session can run the model.
        if not compare_ort:
            with pytest.raises(Exception, match=NO_KERNEL):
                run_mlx(model, feeds)
            return None
        assert_declined(model, feeds)
        got, _, _ = run_mlx(model, feeds)
        assert_close(got[0], expected, rtol=0, atol=0)
        return got
    if compare_ort:
        got = check_parity(model, feeds)
    else:
        got, mlx, total = run_mlx(model, feeds)
        assert mlx == total == 1
    assert_close(got[0], expected, rtol=0, atol=0)
    return got


def ort_has_kernel(op, dtype, reduction):
    """ORT's CPU EP lacks float16/bfloat16 add/mul, bool max/min and (ScatterND) float16 max/min."""
    dtype = np.dtype(dtype)
    if dtype == BF16:
        return False
    if dtype == np.float16:
        return reduction == "none" or (op == "ScatterElements" and reduction in ("max", "min"))
    return not (dtype == np.bool_ and reduction in ("max", "min"))


# ---------------------------------------------------------------------------------------------
# GatherND

def gathernd_model(x, idx, batch_dims=0, opset=13, constant=False):
    attrs = {"batch_dims": batch_dims} if opset >= 12 else {}
    if constant:
        return node_model("GatherND", [("x", x)], attrs, opset, host=[("i", idx)])
    return node_model("GatherND", [("x", x), ("i", idx)], attrs, opset)


def gathernd_indices(x_shape, prefix, k, batch_dims, seed=0):
    """Indices [*prefix, k] in [-n, n-1] of the dims after the batch dims."""
    rng = np.random.default_rng(seed)
    dims = np.array(x_shape[batch_dims:batch_dims + k], np.int64)
    return (rng.integers(0, 1 << 20, size=(*prefix, k)) % np.maximum(dims, 1) - rng.integers(0, 2, size=(*prefix, k))
            * dims).astype(np.int64)


@pytest.mark.parametrize("dtype", DTYPES, ids=ids)
def test_gathernd_dtypes(dtype):
    x = data_of((3, 4, 2), dtype)
    idx = np.array([[0, -1], [2, 1], [-3, 0]], np.int64)
    parity(*gathernd_model(x, idx), dtype)


# (data shape, indices shape without k, k, batch_dims): ranks 1-4, every k, batch_dims 0-2.
GATHERND_CASES = [
    ((5,), (3,), 1, 0),
    ((4, 5), (2,), 1, 0),
    ((4, 5), (3,), 2, 0),
    ((4, 5), (2, 3), 2, 0),
    ((4, 5), (), 2, 0),             # indices [k]: one element
    ((2, 3, 4), (2, 2), 1, 0),
    ((2, 3, 4), (5,), 3, 0),
    ((2, 3, 4, 5), (3,), 2, 0),
    ((3, 4), (2,), 0, 0),           # k = 0: whole data per index row
    ((2, 3, 4), (2,), 1, 1),        # batch_dims 1, indices [2, 1]
    ((2, 3, 4), (2, 5), 2, 1),
    ((2, 3, 4), (2, 3), 0, 1),      # batch_dims 1, k = 0
    ((2, 3, 4, 5), (2, 3, 2), 1, 2),
    ((2, 3, 4, 5), (2, 3), 2, 2),
    ((3, 2, 4, 5), (3, 4, 2), 2, 1),
]


@pytest.mark.parametrize("x_shape,prefix,k,batch_dims", GATHERND_CASES,
                         ids=[f"{ids(x)}-i{ids(p)}x{k}-b{b}" for x, p, k, b in GATHERND_CASES])
def test_gathernd_shapes(x_shape, prefix, k, batch_dims):
    x = random_array(x_shape, np.float32)
    idx = gathernd_indices(x_shape, x_shape[:batch_dims] + prefix[batch_dims:] if batch_dims else prefix,
                           k, batch_dims, seed=len(x_shape) + k)
    for opset in ([11, 13] if batch_dims == 0 else [12, 13]):
        parity(*gathernd_model(x, idx, batch_dims, opset))


@pytest.mark.parametrize("x_shape,idx_shape", [((3, 4), (0, 2)), ((3, 4), (2, 0, 1)), ((0, 4), (2, 1)),
                                               ((3, 0), (2, 1))], ids=ids)
def test_gathernd_empty(x_shape, idx_shape):
    """Empty output: no index rows, or an empty slice (data empty on a dim past k; ORT errors when an
    index points into an empty dim, so that case has no rows here)."""
    x = random_array(x_shape, np.float16)
    idx = np.zeros(idx_shape, np.int64)
    if x_shape[0] == 0:
        idx = np.zeros((0, 1), np.int64)
    parity(*gathernd_model(x, idx), np.float16)


def test_gathernd_constant_indices_and_repeated_runs():
    x = random_array((4, 5, 3), np.int32, low=-50, high=50)
    parity(*gathernd_model(x, np.array([[1, -1], [3, 0]], np.int64), constant=True))
    for seed in range(3):  # runtime indices are data: one compiled graph serves every run
        parity(*gathernd_model(x, gathernd_indices(x.shape, (4,), 2, 0, seed=seed)))


def test_gathernd_out_of_range_is_an_error():
    """ORT errors on indices outside [-n, n-1]; MLX clamps them into [0, n-1] (never out of bounds)
    and a runtime check of the compiled graph fails the run, as for Gather."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    m, feeds = gathernd_model(x, np.array([[3, 0], [-4, 9], [1, -7]], np.int64))
    with pytest.raises(Exception):
        run_cpu(m, feeds)
    with pytest.raises(Exception, match=r"\[MlxEp\]\[GatherND\].*out of data bounds"):
        run_mlx(m, feeds)


def unshaped(op, inputs, attrs, opset, out_dtype):
    """(model, feeds) whose inputs have no static shapes, so that only the kernels can check them."""
    m = make_model(op, [(n, v.dtype, None) for n, v in inputs], [("y0", out_dtype, None)], attrs, opset=opset)
    return m, dict(inputs)


@pytest.mark.parametrize("x_shape,idx_shape,batch_dims", [
    ((3, 4), (2, 3), 0),         # k > rank
    ((2, 3, 4), (3, 1), 1),      # batch dims differ
    ((2, 3), (2, 1), 2),         # batch_dims >= rank
], ids=ids)
def test_gathernd_invalid_shapes_error(x_shape, idx_shape, batch_dims):
    m, feeds = unshaped("GatherND", [("x", random_array(x_shape, np.float32)), ("i", np.zeros(idx_shape, np.int64))],
                        {"batch_dims": batch_dims}, 13, np.float32)
    with pytest.raises(Exception):
        run_cpu(m, feeds)
    with pytest.raises(Exception, match=r"\[MlxEp\]\[GatherND\]"):
        run_mlx(m, feeds)


def test_gathernd_string_data_is_declined():
    x = np.array([["a", "bb"], ["c", "d"]], dtype=object)
    assert_declined(*gathernd_model(x, np.array([[1, 0], [0, -1]], np.int64)))


# ---------------------------------------------------------------------------------------------
# ScatterND

def scatternd_model(x, idx, upd, reduction="none", opset=18):
    attrs = {"reduction": reduction} if opset >= 16 else {}
    return node_model("ScatterND", [("x", x), ("i", idx), ("u", upd)], attrs, opset)


def scatternd_case(x_shape, prefix, k, dtype, unique, seed=0):
    """(data, indices, updates): indices [*prefix, k], distinct rows when `unique`."""
    x = data_of(x_shape, dtype, seed)
    count = int(np.prod(prefix))
    if unique:
        idx = unique_positions(x_shape[:k], count, seed).reshape(*prefix, k)
    else:
        rng = np.random.default_rng(seed)
        dims = np.array(x_shape[:k], np.int64)
        idx = (rng.integers(0, 1 << 20, size=(*prefix, k)) % np.maximum(dims, 1)).astype(np.int64)
        idx = np.where(rng.random(idx.shape) < 0.3, idx - dims, idx)
    upd = data_of((*prefix, *x_shape[k:]), dtype, seed + 1)
    return x, idx, upd


@pytest.mark.parametrize("dtype", DTYPES, ids=ids)
def test_scatternd_dtypes(dtype):
    x, idx, upd = scatternd_case((4, 3, 2), (3,), 2, dtype, unique=True)
    check_against(*scatternd_model(x, idx, upd, opset=13), scatter_nd_reference(x, idx, upd))


# (data shape, indices shape without k, k): ranks 1-4, k from 1 to rank, indices ranks 1-3.
SCATTERND_CASES = [
    ((5,), (3,), 1),
    ((4, 5), (2,), 1),
    ((4, 5), (3,), 2),
    ((4, 5), (2, 2), 2),
    ((4, 5), (), 2),                # indices [k]: one update
    ((2, 3, 4), (2,), 1),
    ((2, 3, 4), (1, 3), 2),
    ((2, 3, 4), (5,), 3),
    ((2, 3, 2, 3), (2, 2), 2),
    ((2, 3, 2, 3), (3,), 4),
]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("x_shape,prefix,k", SCATTERND_CASES,
                         ids=[f"{ids(x)}-i{ids(p)}x{k}" for x, p, k in SCATTERND_CASES])
def test_scatternd_shapes(x_shape, prefix, k, reduction):
    """Distinct indices for "none" (duplicates are undefined there), duplicates for reductions."""
    x, idx, upd = scatternd_case(x_shape, prefix, k, np.float32, unique=reduction == "none", seed=k)
    check_against(*scatternd_model(x, idx, upd, reduction), scatter_nd_reference(x, idx, upd, reduction))


@pytest.mark.parametrize("reduction", REDUCTIONS[1:])
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float64, np.int8, np.int32, np.int64,
                                   np.uint8, np.bool_], ids=ids)
def test_scatternd_reductions_with_duplicates(dtype, reduction):
    x, idx, upd = scatternd_case((3, 4), (4, 3), 1, dtype, unique=False, seed=5)
    assert len({tuple(r) for r in (idx.reshape(-1, 1) % 3)}) < idx.size  # there are duplicates
    check_against(*scatternd_model(x, idx, upd, reduction), scatter_nd_reference(x, idx, upd, reduction),
                  compare_ort=ort_has_kernel("ScatterND", dtype, reduction))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_scatternd_k0_updates_whole_data(reduction):
    """k = 0: every update row covers all of data (ORT applies them in order)."""
    if reduction == "none" and mlx_device() != "cpu":
        pytest.skip("duplicates with reduction none: MLX's GPU scatter does not promise an order")
    x = data_of((3, 4), np.float32)
    idx = np.zeros((3, 0), np.int64)
    upd = data_of((3, 3, 4), np.float32, seed=2)
    check_against(*scatternd_model(x, idx, upd, reduction), scatter_nd_reference(x, idx, upd, reduction))


@pytest.mark.parametrize("opset", [11, 13, 16, 18])
def test_scatternd_opsets(opset):
    x, idx, upd = scatternd_case((4, 5), (3,), 2, np.float32, unique=True)
    check_against(*scatternd_model(x, idx, upd, opset=opset), scatter_nd_reference(x, idx, upd))


def test_scatternd_empty_updates_and_constant_indices():
    x = random_array((3, 4), np.float32)
    check_parity(*scatternd_model(x, np.zeros((0, 2), np.int64), np.zeros((0,), np.float32)))
    idx = np.array([[2], [-3]], np.int64)
    upd = random_array((2, 4), np.float32)
    m = make_model("ScatterND", [("x", x.dtype, [3, 4]), ("i", idx.dtype, [2, 1]), ("u", upd.dtype, [2, 4])],
                   [("y0", None, None)], opset=13, initializers={"i": idx})
    check_parity(m, {"x": x, "u": upd})


def test_scatternd_duplicates_none_last_wins_on_cpu():
    """ONNX leaves the order undefined; ORT and MLX's CPU scatter apply updates in order."""
    if mlx_device() != "cpu":
        pytest.skip("MLX's GPU scatter does not promise an order")
    x = np.zeros((3, 2), np.float32)
    idx = np.array([[1], [0], [1], [-2]], np.int64)
    upd = np.arange(8, dtype=np.float32).reshape(4, 2)
    check_against(*scatternd_model(x, idx, upd), scatter_nd_reference(x, idx, upd))


def test_scatternd_out_of_range_is_an_error():
    x = np.zeros((3, 4), np.float32)
    m, feeds = scatternd_model(x, np.array([[5, 0], [0, -9]], np.int64), np.array([1, 2], np.float32))
    with pytest.raises(Exception):
        run_cpu(m, feeds)
    with pytest.raises(Exception, match=r"\[MlxEp\]\[ScatterND\].*out of data bounds"):
        run_mlx(m, feeds)


@pytest.mark.parametrize("reduction,opset", [("max", 16), ("min", 17), ("add", 13), ("foo", 18)])
def test_scatternd_reduction_outside_its_opset_is_declined(reduction, opset):
    """Not defined there: left to ORT (which applies max/min at 16 anyway, and 'none' for unknown names)."""
    x, idx, upd = scatternd_case((4, 5), (3,), 2, np.float32, unique=True)
    m, feeds = node_model("ScatterND", [("x", x), ("i", idx), ("u", upd)], {"reduction": reduction}, opset)
    if opset < 16:
        with pytest.raises(Exception):  # the attribute is not in the schema: ORT rejects the model
            run_cpu(m, feeds)
        return
    assert_declined(m, feeds)


@pytest.mark.parametrize("x_shape,idx_shape,upd_shape", [
    ((3, 4), (2, 3), (2,)),       # k > rank
    ((3, 4), (2, 1), (2, 5)),     # updates of the wrong shape
], ids=ids)
def test_scatternd_invalid_shapes_error(x_shape, idx_shape, upd_shape):
    m, feeds = unshaped("ScatterND", [("x", random_array(x_shape, np.float32)), ("i", np.zeros(idx_shape, np.int64)),
                                      ("u", random_array(upd_shape, np.float32))], {}, 13, np.float32)
    with pytest.raises(Exception):
        run_cpu(m, feeds)
    with pytest.raises(Exception, match=r"\[MlxEp\]\[ScatterND\]"):
        run_mlx(m, feeds)


# ---------------------------------------------------------------------------------------------
# ScatterElements and Scatter

def scatter_elements_model(x, idx, upd, axis, reduction="none", opset=18, op="ScatterElements"):
    attrs = {"axis": axis}
    if opset >= 16:
        attrs["reduction"] = reduction
    return node_model(op, [("x", x), ("i", idx), ("u", upd)], attrs, opset)


def scatter_elements_case(x_shape, axis, dtype, unique, smaller, index_dtype=np.int64, seed=0):
    """(data, indices, updates): indices as long as data along the axis (distinct per line when
    `unique`) and, when `smaller`, one shorter on every other dim."""
    rng = np.random.default_rng(seed)
    a = axis % len(x_shape)
    idx_shape = [d - 1 if smaller and i != a and d > 1 else d for i, d in enumerate(x_shape)]
    n = x_shape[a]
    if unique:
        idx = np.argsort(rng.random(idx_shape), axis=a)
    else:
        idx = rng.integers(0, n, size=idx_shape)
    idx = np.where(rng.random(idx_shape) < 0.4, idx - n, idx).astype(index_dtype)
    return data_of(x_shape, dtype, seed), idx, data_of(idx_shape, dtype, seed + 1)


@pytest.mark.parametrize("dtype", DTYPES, ids=ids)
def test_scatter_elements_dtypes(dtype):
    x, idx, upd = scatter_elements_case((3, 4), 1, dtype, unique=True, smaller=True)
    check_against(*scatter_elements_model(x, idx, upd, 1, opset=13), scatter_elements_reference(x, idx, upd, 1))


CASES = [(shape, axis) for shape in [(5,), (3, 4), (2, 3, 4), (2, 3, 2, 3)] for axis in range(-len(shape), len(shape))]


@pytest.mark.parametrize("smaller", [False, True], ids=["full", "smaller"])
@pytest.mark.parametrize("shape,axis", CASES, ids=[f"{ids(s)}-axis{a}" for s, a in CASES])
def test_scatter_elements_shapes(shape, axis, smaller):
    """"none" with distinct indices and "add" with duplicates: indices spanning data on the other dims
    (MLX's axis scatter) or smaller (the general scatter)."""
    seed = len(shape) * 10 + axis
    index_dtype = np.int32 if seed % 2 else np.int64
    for reduction in ["none", "add"]:
        x, idx, upd = scatter_elements_case(shape, axis, np.float32, reduction == "none", smaller, index_dtype, seed)
        check_against(*scatter_elements_model(x, idx, upd, axis, reduction),
                      scatter_elements_reference(x, idx, upd, axis, reduction))


@pytest.mark.parametrize("smaller", [False, True], ids=["full", "smaller"])
@pytest.mark.parametrize("reduction", REDUCTIONS[1:])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.float64, np.int8, np.int32,
                                   np.int64, np.uint16, np.bool_], ids=ids)
def test_scatter_elements_reductions_with_duplicates(dtype, reduction, smaller):
    x, idx, upd = scatter_elements_case((3, 4, 2), -2, dtype, unique=False, smaller=smaller, seed=7)
    check_against(*scatter_elements_model(x, idx, upd, -2, reduction),
                  scatter_elements_reference(x, idx, upd, -2, reduction),
                  compare_ort=ort_has_kernel("ScatterElements", dtype, reduction))


@pytest.mark.parametrize("reduction", ["add", "mul"])
@pytest.mark.parametrize("rows", [1, 3])
def test_scatter_elements_indices_longer_than_data_on_the_axis(rows, reduction):
    """One row of data: the indices span it (MLX's axis scatter for add); three: the general scatter."""
    x = data_of((rows, 4), np.float32)
    idx = np.array([[1, -3, 1, 2, 0, -1]], np.int64)
    upd = data_of((1, 6), np.float32, seed=1)
    check_against(*scatter_elements_model(x, idx, upd, 1, reduction),
                  scatter_elements_reference(x, idx, upd, 1, reduction))


@pytest.mark.parametrize("opset,axis", [(9, 0), (10, 1), (10, -1)])
def test_scatter_legacy(opset, axis):
    """Scatter-9 (deprecated in 11) is ScatterElements without reduction."""
    x, idx, upd = scatter_elements_case((3, 4), axis, np.float32, unique=True, smaller=True, index_dtype=np.int32)
    check_against(*scatter_elements_model(x, idx, upd, axis, opset=opset, op="Scatter"),
                  scatter_elements_reference(x, idx, upd, axis))


def test_scatter_elements_empty_and_out_of_range():
    x = random_array((3, 4), np.float32)
    check_parity(*scatter_elements_model(x, np.zeros((0, 4), np.int64), np.zeros((0, 4), np.float32), 0))
    m, feeds = scatter_elements_model(np.zeros((2, 3), np.float32), np.array([[4, -7, 1]], np.int64),
                                      np.array([[1, 2, 3]], np.float32), 1, "add")
    with pytest.raises(Exception):
        run_cpu(m, feeds)
    with pytest.raises(Exception, match=r"\[MlxEp\]\[ScatterElements\].*out of data bounds"):
        run_mlx(m, feeds)


@pytest.mark.parametrize("x_shape,idx_shape,upd_shape", [
    ((3, 4), (3,), (3,)),         # ranks differ
    ((3, 4), (2, 2), (2, 3)),     # updates and indices differ
    ((3, 4), (4, 1), (4, 1)),     # indices longer than data on a non-axis dim
], ids=ids)
def test_scatter_elements_invalid_shapes_error(x_shape, idx_shape, upd_shape):
    m, feeds = unshaped("ScatterElements", [("x", random_array(x_shape, np.float32)),
                                            ("i", np.zeros(idx_shape, np.int64)),
                                            ("u", random_array(upd_shape, np.float32))], {"axis": 1}, 13, np.float32)
    with pytest.raises(Exception):
        run_cpu(m, feeds)
    with pytest.raises(Exception, match=r"\[MlxEp\]\[ScatterElements\]"):
        run_mlx(m, feeds)


@pytest.mark.parametrize("reduction", ["max", "min"])
def test_scatter_max_min_nan_like_ort(reduction):
    """out = out > u ? out : u (min: <), as ORT: a NaN update wins, NaN data is replaced."""
    x = np.array([np.nan, 1, 2, np.nan], np.float32)
    u = np.array([5, np.nan, np.nan, 1], np.float32)
    idx = np.arange(4, dtype=np.int64)
    # MLX's GPU scatter keeps NaN data and drops NaN updates: float max/min are declined there.
    check = check_parity if mlx_device() == "cpu" else assert_declined
    check(*scatter_elements_model(x, idx, u, 0, reduction))
    check(*scatternd_model(x, idx.reshape(4, 1), u, reduction))


def test_scatter_string_data_and_undefined_reduction_are_declined():
    x = np.array([["a", "bb", "c"], ["d", "e", "ff"]], dtype=object)
    idx = np.array([[1, 0, -1]], np.int64)
    assert_declined(*scatter_elements_model(x, idx, np.array([["x", "y", "z"]], dtype=object), 0, opset=13))
    xf, idx, upd = scatter_elements_case((3, 4), 1, np.float32, unique=True, smaller=False)
    assert_declined(*scatter_elements_model(xf, idx, upd, 1, "max", opset=16))


# ---------------------------------------------------------------------------------------------
# OneHot

def onehot_model(idx, depth, values, axis=None, opset=11, depth_as_input=False):
    """(model, feeds) of one OneHot node; depth is a constant initializer or a graph input."""
    depth = np.asarray(depth)
    inputs = [("i", idx.dtype, list(idx.shape)), ("d", depth.dtype, list(depth.shape)),
              ("v", values.dtype, list(values.shape))]
    feeds, inits = {"i": idx, "v": values}, {}
    (feeds if depth_as_input else inits)["d"] = depth
    attrs = {} if axis is None else {"axis": axis}
    return make_model("OneHot", inputs, [("y0", values.dtype, None)], attrs, opset, inits), feeds


def onehot_reference(idx, depth, values, axis=-1):
    """ORT's rule: depth truncated, negatives + depth, an index equal to none of 0..depth-1 is off."""
    depth = int(depth)
    i = np.where(idx < 0, idx + depth, idx).astype(np.float64)
    axis = axis % (idx.ndim + 1)
    hot = np.expand_dims(i, axis) == np.arange(depth).reshape([-1 if d == axis else 1 for d in range(idx.ndim + 1)])
    return np.where(hot, values[1], values[0])


# (indices, values, depth) type combinations ORT's CPU EP has kernels for.
ORT_ONEHOT_TYPES = [(np.int64, np.int64, np.int64), (np.float32, np.int64, np.int64), (np.int64, np.float32, np.int64),
                    (np.int32, np.float32, np.int32), (np.int32, np.float32, np.float32),
                    (np.float32, np.float32, np.float32), (np.int64, np.int32, np.float32),
                    (np.int64, np.float32, np.float32), (np.int64, np.float32, np.int32)]


@pytest.mark.parametrize("types", ORT_ONEHOT_TYPES, ids=lambda t: "-".join(np.dtype(x).name for x in t))
def test_onehot_ort_types(types):
    it, vt, dt = types
    idx = np.array([[0, -1, 4], [2, -5, 7]], it)  # 7: out of range, a row of off values
    values = np.array([2, 5], vt)
    m, feeds = onehot_model(idx, np.array(5, dt), values)
    got = check_parity(m, feeds)
    assert_close(got[0], onehot_reference(idx, 5, values))


@pytest.mark.parametrize("types", [(np.int8, np.float16, np.int64), (np.uint8, np.bool_, np.int32),
                                   (np.int16, np.uint8, np.int16), (np.float16, np.int8, np.float32),
                                   (np.float64, np.float64, np.int64), (np.uint64, np.int64, np.uint8)],
                         ids=lambda t: "-".join(np.dtype(x).name for x in t))
def test_onehot_other_types(types):
    """Types ORT's CPU EP has no kernel for follow the same rule (the numpy reference)."""
    it, vt, dt = types
    idx = np.array([[0, 3, 1], [2, 6, 0]], np.float32).astype(it)
    if np.dtype(it).kind != "u":
        idx[0, 1] = -2
    values = np.array([1, 0], np.float32).astype(vt)
    m, feeds = onehot_model(idx, np.array(4, dt), values)
    expected = onehot_reference(idx.astype(np.float64), 4, values)
    if np.dtype(vt) == np.float64 and not float64_on_mlx():
        # No float64 on MLX here, so declined, and ORT's CPU EP has no kernel for it either.
        with pytest.raises(Exception, match=NO_KERNEL):
            run_mlx(m, feeds)
        return
    got, mlx, total = run_mlx(m, feeds)
    assert mlx == total == 1
    assert_close(got[0], expected)


ONEHOT_AXES = [(shape, axis) for shape in [(5,), (2, 3), (2, 3, 2)] for axis in range(-len(shape) - 1, len(shape) + 1)]


@pytest.mark.parametrize("shape,axis", ONEHOT_AXES, ids=[f"{ids(s)}-axis{a}" for s, a in ONEHOT_AXES])
def test_onehot_axes(shape, axis):
    rng = np.random.default_rng(len(shape) * 10 + axis + 5)
    idx = rng.integers(-4, 5, size=shape).astype(np.int64)
    values = np.array([0.5, -2.0], np.float32)
    m, feeds = onehot_model(idx, np.array(4, np.int64), values, axis)
    got = check_parity(m, feeds)
    assert_close(got[0], onehot_reference(idx, 4, values, axis))


@pytest.mark.parametrize("opset", [9, 10, 11])
def test_onehot_opsets_and_runtime_depth(opset):
    """Depth as a runtime input (read on the host at every run) and as a float (truncated)."""
    idx = np.array([[1, -1], [3, 0]], np.int64)
    values = np.array([0, 1], np.float32)
    for depth in [np.array(3.9, np.float32), np.array(2.0, np.float32)]:
        check_parity(*onehot_model(idx, depth, values, opset=opset, depth_as_input=True))


def test_onehot_fractional_float_indices_are_off():
    idx = np.array([1.5, -1.0, 2.0, -3.5, 0.0], np.float32)
    check_parity(*onehot_model(idx, np.array(4, np.int64), np.array([0, 1], np.int64)))


def test_onehot_empty_indices_and_bad_depth():
    check_parity(*onehot_model(np.zeros((0, 3), np.int64), np.array(4, np.int64), np.array([0, 1], np.int64), 1))
    m, feeds = onehot_model(np.array([1, 2], np.int64), np.array(0, np.int64), np.array([0, 1], np.int64),
                            depth_as_input=True)
    with pytest.raises(Exception):
        run_cpu(m, feeds)
    with pytest.raises(Exception, match=r"\[MlxEp\]\[OneHot\]"):
        run_mlx(m, feeds)


def test_onehot_string_values_are_declined():
    assert_declined(*onehot_model(np.array([1, 0], np.int64), np.array(3, np.int64), np.array(["off", "on"], object)))
