"""Parity tests of GatherElements (src/ops/gather_elements.cc, part of the tensor op family)."""
import ml_dtypes
import numpy as np
import pytest

from harness import assert_declined, ids, make_model, node_model, random_array, run_cpu, run_mlx
from harness_bf16 import check_parity_via_float32 as parity

DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.float64, np.int8, np.int16, np.int32, np.int64,
          np.uint8, np.uint16, np.uint32, np.uint64, np.bool_]


def random_indices(shape, n, dtype=np.int64, seed=0):
    """Indices in [-n, n-1] (negative ones count from the end)."""
    return np.random.default_rng(seed).integers(-n, n, size=shape).astype(dtype)


def reference(x, idx, axis):
    """numpy's GatherElements: take_along_axis of the data cut to the indices' extent on the other dims."""
    axis = axis % x.ndim
    cut = tuple(slice(None) if d == axis else slice(0, idx.shape[d]) for d in range(x.ndim))
    n = x.shape[axis]
    return np.take_along_axis(x[cut], np.where(idx < 0, idx + n, idx).astype(np.int64), axis)


def model(x, idx, axis, opset=13, constant=False):
    """(model, feeds) of one GatherElements node; indices are a graph input or a constant initializer."""
    if constant:
        return node_model("GatherElements", [("x", x)], {"axis": axis}, opset, host=[("i", idx)])
    return node_model("GatherElements", [("x", x), ("i", idx)], {"axis": axis}, opset)


@pytest.mark.parametrize("dtype", DTYPES, ids=ids)
def test_dtypes(dtype):
    x = random_array((3, 4), dtype)
    idx = np.array([[0, -1, 2], [3, -4, 1], [-2, 0, 0]], np.int64)
    parity(*model(x, idx, 1), dtype)


# Every axis (negative too) of ranks 1-4; the indices are longer or shorter than data along the axis
# and, on ranks >= 2, one other dim of the indices is smaller than data's.
CASES = [(shape, axis) for shape in [(5,), (3, 4), (2, 3, 4), (2, 3, 2, 3)]
         for axis in range(-len(shape), len(shape))]


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64], ids=ids)
@pytest.mark.parametrize("shape,axis", CASES, ids=[f"{ids(s)}-axis{a}" for s, a in CASES])
def test_ranks_and_axes(shape, axis, index_dtype, opset):
    x = random_array(shape, np.float32)
    a = axis % len(shape)
    idx_shape = list(shape)
    idx_shape[a] = shape[a] + 2 if opset == 13 else 2
    if len(shape) > 1:
        other = (a + 1) % len(shape)
        idx_shape[other] = shape[other] - 1
    idx = random_indices(idx_shape, shape[a], index_dtype, seed=len(shape) * 10 + a)
    got = parity(*model(x, idx, axis, opset))
    np.testing.assert_array_equal(got[0], reference(x, idx, axis))


@pytest.mark.parametrize("shape,idx_shape,axis", [
    ((4, 5), (1, 2), 0),         # smaller on every dim
    ((4, 5), (4, 1), 0),         # 1 along a non-axis dim: no broadcasting over data
    ((4, 5), (1, 5), 1),
    ((3, 4, 5), (1, 1, 7), -1),
    ((3, 4, 5), (2, 9, 3), 1),
], ids=ids)
def test_indices_smaller_than_data(shape, idx_shape, axis):
    x = random_array(shape, np.int32, low=-100, high=100)
    idx = random_indices(idx_shape, shape[axis], seed=3)
    got = parity(*model(x, idx, axis))
    np.testing.assert_array_equal(got[0], reference(x, idx, axis))


@pytest.mark.parametrize("shape,idx_shape,axis", [
    ((3, 4), (0, 4), 0),
    ((3, 4), (3, 0), 1),
    ((3, 4), (0, 4), 1),         # empty on a non-axis dim
    ((3, 0), (2, 0), 0),         # data empty on a non-axis dim
    ((0, 4), (0, 4), 0),         # data empty along the axis, no indices
    ((2, 3, 4), (2, 0, 4), -2),
], ids=ids)
def test_empty_indices(shape, idx_shape, axis):
    x = random_array(shape, np.float16)
    idx = np.zeros(idx_shape, np.int64)
    parity(*model(x, idx, axis), np.float16)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, ml_dtypes.bfloat16], ids=ids)
def test_constant_indices(dtype):
    x = random_array((4, 3), dtype)
    idx = np.array([[-1, 0, 2], [3, -4, 1]], np.int32)
    parity(*model(x, idx, 0, constant=True), dtype)


def test_repeated_runs_with_new_indices():
    """Runtime indices are data: one compiled graph serves every run."""
    x = random_array((4, 6), np.float32)
    for seed in range(3):
        idx = random_indices((4, 5), 6, seed=seed)
        parity(*model(x, idx, 1))


def test_out_of_range_is_an_error():
    """ORT's CPU kernel errors on indices outside [-n, n-1]; MLX clamps them (never reads out of
    bounds) and a runtime check of the compiled graph fails the run, as for Gather."""
    x = random_array((4, 3), np.float32)
    idx = np.array([[7, -9, 2], [4, -5, -1]], np.int64)
    m, feeds = model(x, idx, 0)
    with pytest.raises(Exception):
        run_cpu(m, feeds)
    with pytest.raises(Exception, match=r"\[MlxEp\]\[GatherElements\].*out of data bounds"):
        run_mlx(m, feeds)


def unshaped_model(x, idx, axis):
    """(model, feeds) whose inputs have no static shapes, so that only the kernels can check them."""
    m = make_model("GatherElements", [("x", x.dtype, None), ("i", idx.dtype, None)], [("y0", x.dtype, None)],
                   {"axis": axis}, opset=13)
    return m, {"x": x, "i": idx}


@pytest.mark.parametrize("x_shape,idx_shape,axis", [
    ((3, 4), (4, 2), 1),         # indices longer than data on a non-axis dim
    ((3, 4), (3,), 0),           # ranks differ
    ((), (), 0),                 # scalars
    ((3, 0), (3, 1), 1),         # an index into an empty axis
    ((3, 4), (3, 4), 2),         # axis out of range
], ids=ids)
def test_invalid_shapes_error(x_shape, idx_shape, axis):
    """ORT's kernel rejects these; the MLX run must fail too rather than make up an output."""
    m, feeds = unshaped_model(random_array(x_shape, np.float32), np.zeros(idx_shape, np.int64), axis)
    with pytest.raises(Exception):
        run_cpu(m, feeds)
    with pytest.raises(Exception, match=r"\[MlxEp\]\[GatherElements\]"):  # the MLX translation refuses it
        run_mlx(m, feeds)


def test_string_data_is_declined():
    x = np.array([["a", "bb", "c"], ["d", "e", "ff"]], dtype=object)
    idx = np.array([[1, 0, -1]], np.int64)
    assert_declined(*model(x, idx, 1))
