"""Parity of CumProd (opset 26, src/ops/tensor_misc.cc) against ORT's CPU EP."""
import itertools

import numpy as np
import pytest

from harness import BF16, assert_mlx_error, check_parity, ids, node_model, random_array, run_cpu
from harness_bf16 import check_bf16

DTYPES = [np.float32, np.float16, np.float64, np.int32, np.int64, np.uint32, np.uint64]


def cumprod_model(x, axis, attrs=None, axis_dtype=np.int64, axis_as_input=False):
    return node_model("CumProd", [("x", x)], attrs or {}, 26, host=[("axis", np.array(axis, axis_dtype))],
                      host_as_input=axis_as_input)


def reference(x, axis, exclusive=0, reverse=0):
    """numpy's CumProd: exclusive shifts in a 1, reverse runs from the end."""
    y = np.flip(x, axis) if reverse else x
    if exclusive:
        pad = [(0, 0)] * x.ndim
        pad[axis] = (1, 0)
        y = np.pad(y, pad, constant_values=1)[tuple(slice(0, -1) if d == axis else slice(None) for d in range(x.ndim))]
    y = np.cumprod(y, axis=axis, dtype=x.dtype)
    return np.flip(y, axis) if reverse else y


def values(shape, dtype, seed=0):
    """Values near 1 for floats (products stay in range), small integers (some negative) for ints."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.uniform(0.5, 1.6, shape).astype(dtype)
    return random_array(shape, dtype, rng, low=-3 if np.dtype(dtype).kind == "i" else 0, high=3)


@pytest.mark.parametrize("dtype", DTYPES, ids=ids)
def test_dtypes(dtype):
    x = values((4, 6), dtype)
    got = check_parity(*cumprod_model(x, 1))
    if np.dtype(dtype).kind != "f":
        np.testing.assert_array_equal(got[0], reference(x, 1))


@pytest.mark.parametrize("exclusive,reverse", list(itertools.product([0, 1], [0, 1])))
@pytest.mark.parametrize("shape,axis", [((7,), 0), ((3, 5), 0), ((3, 5), -1), ((2, 3, 4), 1), ((2, 3, 4), -3)],
                         ids=ids)
def test_attributes_and_axes(shape, axis, exclusive, reverse):
    x = values(shape, np.int64, seed=len(shape))
    got = check_parity(*cumprod_model(x, axis, {"exclusive": exclusive, "reverse": reverse}))
    np.testing.assert_array_equal(got[0], reference(x, axis % len(shape), exclusive, reverse))


@pytest.mark.parametrize("axis_dtype", [np.int32, np.int64], ids=ids)
def test_axis_fed_at_run_time(axis_dtype):
    x = values((3, 4, 5), np.float32)
    check_parity(*cumprod_model(x, 2, {"exclusive": 1}, axis_dtype, axis_as_input=True))


def test_long_float32_scan():
    x = values((2, 300), np.float32, seed=3)
    check_parity(*cumprod_model(x, 1, {"reverse": 1}))


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 1)])
def test_float16_multiplies_in_float32(exclusive, reverse):
    """ORT multiplies float16 in float32 and rounds every output once: long rows show it (products
    rounded to float16 at each step drift by several ulps)."""
    x = values((4, 60), np.float16, seed=1)
    got = check_parity(*cumprod_model(x, 1, {"exclusive": exclusive, "reverse": reverse}))
    expected = reference(x.astype(np.float32), 1, exclusive, reverse).astype(np.float16)
    np.testing.assert_array_equal(got[0], expected)


def test_int_overflow_wraps():
    x = np.full((2, 40), 3, np.int32)
    got = check_parity(*cumprod_model(x, 1))
    np.testing.assert_array_equal(got[0], reference(x, 1))


def test_empty():
    check_parity(*cumprod_model(np.zeros((0, 3), np.float32), 0))
    check_parity(*cumprod_model(np.zeros((2, 0), np.int64), 0))


def test_bfloat16():
    """No bfloat16 CumProd in ORT's CPU EP: the reference is the float32 one of the same values."""
    x = values((3, 9), np.float32).astype(BF16)
    ref = run_cpu(*cumprod_model(x.astype(np.float32), 1))
    check_bf16(cumprod_model(x, 1)[0], {"x": x}, ref)


def test_bad_axis_is_an_error():
    assert_mlx_error(*cumprod_model(values((3, 4), np.float32), 2))
