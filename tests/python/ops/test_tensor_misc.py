"""Parity tests of DepthToSpace, SpaceToDepth, Trilu, CumSum, TopK, CenterCropPad and EyeLike
(src/ops/tensor_misc.cc) against ORT's CPU EP, and against numpy where ORT's kernel lacks a type."""
import numpy as np
import pytest

from harness import (BF16, assert_declined, assert_mlx_error, check_parity, ids, make_model, mlx_device, node_model,
                     onnx_type, random_array, run_mlx)
from harness_bf16 import check_bf16, check_parity_or_numpy, check_parity_via_float32 as parity

ALL_TYPES = [np.float32, np.float16, BF16, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8,
             np.uint16, np.uint32, np.uint64, np.bool_]
INT_TYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


def or_numpy(model, feeds, fallback):
    """ORT's answer where its kernel exists (else `fallback()`), and every node on MLX."""
    return check_parity_or_numpy(model, feeds, fallback)


# ---------------------------------------------------------------------------------------------
# DepthToSpace, SpaceToDepth

def depth_to_space(x, bs, mode):
    b, c, h, w = x.shape
    if mode == "DCR":
        t = x.reshape(b, bs, bs, c // bs ** 2, h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        t = x.reshape(b, c // bs ** 2, bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
    return t.reshape(b, c // bs ** 2, h * bs, w * bs)


def space_to_depth(x, bs):
    b, c, h, w = x.shape
    t = x.reshape(b, c, h // bs, bs, w // bs, bs).transpose(0, 3, 5, 1, 2, 4)
    return t.reshape(b, c * bs * bs, h // bs, w // bs)


@pytest.mark.parametrize("shape,bs", [((1, 8, 2, 3), 2), ((2, 18, 3, 5), 3), ((1, 4, 1, 1), 2), ((0, 4, 2, 2), 2)],
                         ids=ids)
@pytest.mark.parametrize("mode,opset", [("DCR", 1), ("DCR", 11), ("CRD", 11), ("DCR", 13), ("CRD", 13)])
def test_depth_to_space(mode, opset, shape, bs):
    x = random_array(shape, np.float32)
    attrs = {"blocksize": bs} if opset == 1 else {"blocksize": bs, "mode": mode}
    got = parity(*node_model("DepthToSpace", [("x", x)], attrs, opset))
    np.testing.assert_array_equal(got[0], depth_to_space(x, bs, mode))


@pytest.mark.parametrize("dtype", ALL_TYPES, ids=ids)
def test_depth_space_dtypes(dtype):
    x = random_array((2, 8, 3, 2), dtype)
    or_numpy(*node_model("DepthToSpace", [("x", x)], {"blocksize": 2, "mode": "CRD"}, 13),
             lambda: depth_to_space(x, 2, "CRD"))
    y = random_array((2, 3, 4, 6), dtype)
    or_numpy(*node_model("SpaceToDepth", [("x", y)], {"blocksize": 2}, 13), lambda: space_to_depth(y, 2))


@pytest.mark.parametrize("shape,bs", [((1, 2, 4, 6), 2), ((2, 3, 9, 6), 3), ((1, 1, 2, 2), 2), ((1, 3, 5, 5), 1)],
                         ids=ids)
@pytest.mark.parametrize("opset", [1, 13])
def test_space_to_depth(opset, shape, bs):
    x = random_array(shape, np.float32)
    got = parity(*node_model("SpaceToDepth", [("x", x)], {"blocksize": bs}, opset))
    np.testing.assert_array_equal(got[0], space_to_depth(x, bs))


def unshaped(op, x, attrs, opset=13, extra=()):
    """A one-node model whose data input has no static shape (only the kernels can check it)."""
    inputs = [("x", x.dtype, None)] + [(n, v.dtype, list(v.shape)) for n, v in extra]
    model = make_model(op, inputs, [("y", x.dtype, None)], attrs, opset, dict(extra))
    return model, {"x": x}


@pytest.mark.parametrize("op,shape", [("DepthToSpace", (1, 6, 2, 2)), ("SpaceToDepth", (1, 2, 3, 4)),
                                      ("DepthToSpace", (6, 2, 2))], ids=ids)
def test_space_depth_bad_shapes_error(op, shape):
    assert_mlx_error(*unshaped(op, random_array(shape, np.float32), {"blocksize": 2}))


# ---------------------------------------------------------------------------------------------
# Trilu

@pytest.mark.parametrize("shape", [(3, 4), (4, 3), (2, 5, 3), (2, 1, 4, 4), (0, 3), (1, 1)], ids=ids)
@pytest.mark.parametrize("k", [None, -2, -1, 0, 1, 3, 100, -100])
@pytest.mark.parametrize("upper", [0, 1])
def test_trilu(upper, k, shape):
    x = random_array(shape, np.float32)
    host = None if k is None else [("k", np.array(k, np.int64))]
    kk = 0 if k is None else k
    got = parity(*node_model("Trilu", [("x", x)], {"upper": upper}, 14, host=host))
    np.testing.assert_array_equal(got[0], np.triu(x, kk) if upper else np.tril(x, kk))


@pytest.mark.parametrize("dtype", ALL_TYPES, ids=ids)
def test_trilu_dtypes(dtype):
    x = random_array((3, 4, 5), dtype)
    model, feeds = node_model("Trilu", [("x", x)], {"upper": 0}, 14, host=[("k", np.array(1, np.int64))])
    or_numpy(model, feeds, lambda: np.tril(x, 1))


def test_trilu_runtime_k():
    x = random_array((4, 5), np.int32)
    model, feeds = node_model("Trilu", [("x", x)], {}, 14, host=[("k", np.array(-1, np.int64))], host_as_input=True)
    for k in (-1, 2):
        feeds["k"] = np.array(k, np.int64)
        check_parity(model, feeds)


# ---------------------------------------------------------------------------------------------
# CumSum

def numpy_cumsum(x, axis, exclusive, reverse):
    if x.size == 0:
        return x.copy()
    y = np.flip(x, axis) if reverse else x
    out = np.cumsum(y, axis=axis, dtype=x.dtype)
    if exclusive:
        out = np.concatenate([np.zeros_like(np.take(out, [0], axis)), np.take(out, range(out.shape[axis] - 1), axis)],
                             axis)
    return np.flip(out, axis) if reverse else out


@pytest.mark.parametrize("shape,axis", [((7,), 0), ((3, 5), 1), ((3, 5), -2), ((2, 3, 4), 1), ((2, 0, 3), 1)],
                         ids=ids)
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum(exclusive, reverse, shape, axis):
    x = random_array(shape, np.float32)
    model, feeds = node_model("CumSum", [("x", x)], {"exclusive": exclusive, "reverse": reverse}, 14,
                              host=[("axis", np.array(axis, np.int64))])
    got = check_parity(model, feeds)
    np.testing.assert_allclose(got[0], numpy_cumsum(x, axis, exclusive, reverse), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint32, np.uint64, np.float16, BF16],
                         ids=ids)
@pytest.mark.parametrize("opset", [11, 14])
def test_cumsum_dtypes(opset, dtype):
    if opset == 11 and dtype in (np.float16, BF16):
        pytest.skip("float16/bfloat16 CumSum needs opset 14")
    x = random_array((4, 6), dtype, low=0, high=9)
    model, feeds = node_model("CumSum", [("x", x)], {"exclusive": 1}, opset, host=[("axis", np.array([1], np.int32))])
    or_numpy(model, feeds, lambda: numpy_cumsum(x, 1, 1, 0))


def test_cumsum_integers_wrap_and_long_rows():
    """Integer sums wrap exactly like ORT's; a long float32 row adds in the same order as ORT's loop."""
    x = np.array([[2**31 - 5, 3, 7, -2**31, -9]], np.int32)
    check_parity(*node_model("CumSum", [("x", x)], {}, 14, host=[("axis", np.array(1, np.int64))]))
    y = random_array((3, 4000), np.float32)
    model, feeds = node_model("CumSum", [("x", y)], {"reverse": 1}, 14, host=[("axis", np.array(-1, np.int64))])
    if mlx_device() == "cpu":
        check_parity(model, feeds)
        return
    # A GPU scans in blocks, not in ORT's order (7.5e-5 off ORT at 1.57 on the H200): there, the
    # sums against float64 within 1e-5 of the running sum of magnitudes, the fp32 tolerance against
    # the sum's own condition (a blocked scan rounds by ~log2(n) ulps of it, a sequential one by
    # up to n).
    got, mlx, total = run_mlx(model, feeds)
    assert mlx == total == 1
    exact = np.cumsum(y.astype(np.float64)[:, ::-1], axis=1)[:, ::-1]
    magnitude = np.cumsum(np.abs(y.astype(np.float64))[:, ::-1], axis=1)[:, ::-1]
    assert np.all(np.abs(got[0] - exact) <= 1e-5 * magnitude)


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 1)])
def test_cumsum_float16_adds_in_float32(exclusive, reverse):
    """ORT adds float16 in float32 and rounds every output once: long rows show it (sums rounded to
    float16 at each step drift by several ulps)."""
    x = random_array((4, 200), np.float16, low=0.5, high=1.6)
    model, feeds = node_model("CumSum", [("x", x)], {"exclusive": exclusive, "reverse": reverse}, 14,
                              host=[("axis", np.array(1, np.int64))])
    got = check_parity(model, feeds)
    np.testing.assert_array_equal(got[0], numpy_cumsum(x.astype(np.float32), 1, exclusive, reverse).astype(np.float16))


def test_cumsum_runtime_axis():
    x = random_array((3, 4), np.int64)
    model, feeds = node_model("CumSum", [("x", x)], {}, 14, host=[("axis", np.array(0, np.int64))],
                              host_as_input=True)
    for axis in (0, 1, -1):
        feeds["axis"] = np.array(axis, np.int64)
        check_parity(model, feeds)


def test_cumsum_int8_is_declined():
    """int8 is not a CumSum type."""
    x = random_array((3, 4), np.int8)
    model, feeds = node_model("CumSum", [("x", x)], {}, 14, host=[("axis", np.array(0, np.int64))],
                              out_dtype=np.int8)
    with pytest.raises(Exception):  # no kernel anywhere
        run_mlx(model, feeds)


# ---------------------------------------------------------------------------------------------
# TopK

def topk_model(x, k, opset=11, **attrs):
    if opset < 10:
        return node_model("TopK", [("x", x)], dict(attrs, k=k), opset, outputs=2)
    return node_model("TopK", [("x", x)], attrs, opset, host=[("k", np.array([k], np.int64))], outputs=2)


def reference_topk(x, k, axis=-1, largest=True):
    """ORT's order: by value (largest or smallest first), ties by the lower index."""
    xs = np.moveaxis(x, axis, -1)
    idx = np.empty(xs.shape[:-1] + (k,), np.int64)
    for pos in np.ndindex(*xs.shape[:-1]):
        row = xs[pos]
        order = sorted(range(row.shape[0]), key=lambda i: (-int(row[i]) if largest else int(row[i]), i))
        idx[pos] = order[:k]
    vals = np.take_along_axis(xs, idx, -1)
    return [np.moveaxis(vals, -1, axis), np.moveaxis(idx, -1, axis)]


@pytest.mark.parametrize("dtype", INT_TYPES, ids=ids)
@pytest.mark.parametrize("largest", [1, 0])
def test_topk_integer_types(largest, dtype):
    x = random_array((4, 9), dtype, low=0 if np.dtype(dtype).kind == "u" else -4, high=4)  # many ties
    model, feeds = topk_model(x, 5, largest=largest)
    got = or_numpy(model, feeds, lambda: reference_topk(x, 5, largest=bool(largest)))
    for g, r in zip(got, reference_topk(x, 5, largest=bool(largest))):
        np.testing.assert_array_equal(g, r)


@pytest.mark.parametrize("shape,axis,k", [((3, 7), 1, 3), ((3, 7), 0, 2), ((2, 5, 4), 1, 5), ((2, 5, 4), -1, 1),
                                          ((6,), 0, 0), ((2, 3, 0), 1, 2), ((1, 200), 1, 17)], ids=ids)
@pytest.mark.parametrize("largest", [1, 0])
def test_topk_shapes(largest, shape, axis, k):
    x = random_array(shape, np.int32, low=-6, high=6)
    check_parity(*topk_model(x, k, axis=axis, largest=largest))


def test_topk_extreme_integers():
    """~x reverses the order of every integer, the extremes included."""
    for dtype in (np.int64, np.uint64, np.int8):
        info = np.iinfo(dtype)
        x = np.array([[info.max, info.min, 0, info.max, info.min, 1]], dtype)
        for largest in (1, 0):
            got, mlx, total = run_mlx(*topk_model(x, 4, largest=largest))
            assert mlx == total == 1
            for g, r in zip(got, reference_topk(x, 4, largest=bool(largest))):
                np.testing.assert_array_equal(g, r)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64], ids=ids)
@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("opset", [1, 10, 11])
def test_topk_float_k1(opset, largest, dtype):
    """k = 1 over floats, with ORT's NaN rule: a NaN is kept only when it comes first."""
    if opset < 11 and not largest:
        pytest.skip("largest needs opset 11")
    if opset == 1 and dtype == np.float16:
        pytest.skip("ORT cannot load float16 TopK-1 (its inserted Cast is invalid at opset 1)")
    nan, inf = np.nan, np.inf
    x = np.array([[nan, 1, 2, 2], [1, nan, 2, -inf], [2, 1, nan, 2], [nan, nan, 1, 0], [-inf, nan, -inf, 3],
                  [inf, 1, inf, nan], [-0.0, 0.0, -1, 1]], dtype)
    attrs = {} if opset < 11 else {"largest": largest}
    check_parity(*topk_model(x, 1, opset, **attrs))
    check_parity(*topk_model(random_array((3, 5, 4), dtype), 1, opset, axis=1, **attrs))


def test_topk_sorted0_k1():
    check_parity(*topk_model(random_array((3, 8), np.float32), 1, sorted=0))
    check_parity(*topk_model(random_array((3, 8), np.int32), 1, sorted=0))


def test_topk_runtime_k():
    x = random_array((3, 9), np.int64, low=-3, high=3)
    model, feeds = node_model("TopK", [("x", x)], {}, 11, host=[("k", np.array([2], np.int64))], outputs=2,
                              host_as_input=True)
    for k in (2, 9, 0):
        feeds["k"] = np.array([k], np.int64)
        check_parity(model, feeds)


@pytest.mark.parametrize("x,k,attrs", [
    (random_array((3, 8), np.float32), 3, {}),              # float k > 1: ORT's NaN order is its algorithm's
    (random_array((3, 8), np.float16), 2, {"largest": 0}),
    (random_array((3, 8), np.int32), 3, {"sorted": 0}),     # unsorted: ORT's internal order
], ids=["float32-k3", "float16-k2", "int32-unsorted"])
def test_topk_declined(x, k, attrs):
    assert_declined(*topk_model(x, k, **attrs))


def test_topk_float_runtime_k_is_declined():
    """For floats k must be known to be 1 when claiming; a runtime K is not."""
    x = random_array((3, 8), np.float32)
    assert_declined(*node_model("TopK", [("x", x)], {}, 11, host=[("k", np.array([1], np.int64))], outputs=2,
                                host_as_input=True))


def test_topk_k_too_large_errors():
    x = random_array((3, 4), np.int32)
    assert_mlx_error(*node_model("TopK", [("x", x)], {}, 11, host=[("k", np.array([5], np.int64))], outputs=2,
                                 host_as_input=True, out_dtype=np.int32))


# ---------------------------------------------------------------------------------------------
# CenterCropPad

def center_crop_pad(x, shape, axes=None):
    axes = list(range(x.ndim)) if axes is None else [a % x.ndim for a in axes]
    for a, want in zip(axes, shape):
        dim = x.shape[a]
        if want < dim:
            start = (dim - want) // 2
            x = np.take(x, range(start, start + want), axis=a)
        elif want > dim:
            lo = (want - dim) // 2
            width = [(0, 0)] * x.ndim
            width[a] = (lo, want - dim - lo)
            x = np.pad(x, width)
    return x


@pytest.mark.parametrize("shape,target,axes", [
    ((5, 7, 3), [3, 4], [0, 1]),       # crop, odd and even excess
    ((5, 7, 3), [8, 10], [0, 1]),      # pad
    ((5, 7, 3), [2, 9, 3], None),      # crop one axis, pad another, keep one
    ((3, 5, 7), [4, 4], [-2, -1]),     # negative axes
    ((3, 5, 7), [6, 2], [2, 0]),
    ((2, 0, 4), [3, 2], [1, 2]),       # pad an empty axis
], ids=ids)
def test_center_crop_pad(shape, target, axes):
    x = random_array(shape, np.float32)
    attrs = {} if axes is None else {"axes": axes}
    got = check_parity(*node_model("CenterCropPad", [("x", x)], attrs, 18,
                                   host=[("shape", np.array(target, np.int64))]))
    np.testing.assert_array_equal(got[0], center_crop_pad(x, target, axes))


@pytest.mark.parametrize("dtype", ALL_TYPES, ids=ids)
def test_center_crop_pad_dtypes(dtype):
    x = random_array((4, 5), dtype)
    model, feeds = node_model("CenterCropPad", [("x", x)], {}, 18, host=[("shape", np.array([3, 8], np.int64))])
    or_numpy(model, feeds, lambda: center_crop_pad(x, [3, 8]))


def test_center_crop_pad_int32_shape():
    """ORT's expansion of the function body fails for an int32 shape; the MLX translation takes it."""
    x = random_array((4, 5, 2), np.float32)
    got, mlx, total = run_mlx(*node_model("CenterCropPad", [("x", x)], {"axes": [0, 1]}, 18,
                                          host=[("shape", np.array([3, 8], np.int32))]))
    assert mlx == total == 1
    np.testing.assert_array_equal(got[0], center_crop_pad(x, [3, 8], [0, 1]))


# ---------------------------------------------------------------------------------------------
# EyeLike

@pytest.mark.parametrize("shape", [(3, 4), (4, 3), (5, 5), (0, 3), (1, 1)], ids=ids)
@pytest.mark.parametrize("k", [0, 1, -2, 3, -4, 9, -9])
def test_eyelike(k, shape):
    x = random_array(shape, np.float32)
    got = check_parity(*node_model("EyeLike", [("x", x)], {"k": k}, 9))
    np.testing.assert_array_equal(got[0], np.eye(*shape, k=k, dtype=np.float32))


@pytest.mark.parametrize("out_dtype", [np.float32, np.float16, BF16, np.float64, np.int8, np.int32, np.int64,
                                       np.uint16, np.uint64, np.bool_], ids=ids)
@pytest.mark.parametrize("opset", [9, 22])
def test_eyelike_dtype_attribute(opset, out_dtype):
    x = random_array((3, 4), np.int32)
    model, feeds = node_model("EyeLike", [("x", x)], {"k": 1, "dtype": onnx_type(out_dtype)}, opset)
    if out_dtype == BF16 and opset < 22:
        pytest.skip("bfloat16 is an EyeLike type from opset 22")
    if out_dtype == BF16:  # ORT's Python API cannot fetch bfloat16: compare through a Cast
        check_bf16(model, feeds, [np.eye(3, 4, k=1, dtype=np.float32)])
        return
    or_numpy(model, feeds, lambda: np.eye(3, 4, k=1).astype(out_dtype))


@pytest.mark.parametrize("dtype", [np.float16, np.int64, np.uint8, np.bool_], ids=ids)
def test_eyelike_input_types(dtype):
    x = random_array((4, 2), dtype)
    model, feeds = node_model("EyeLike", [("x", x)], {"k": -1}, 22)
    or_numpy(model, feeds, lambda: np.eye(4, 2, k=-1).astype(dtype))
