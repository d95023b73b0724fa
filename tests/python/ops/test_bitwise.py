"""Parity of BitwiseAnd/Or/Xor/Not (opset 18, src/ops/logical.cc) against ORT's CPU EP."""
import numpy as np
import pytest

from harness import BINARY_SHAPES, check_parity, ids, node_model

INT_TYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
NUMPY = {"BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or, "BitwiseXor": np.bitwise_xor}


def full_range(shape, dtype, seed):
    """Integers over the whole range of `dtype` (sign bits and top bits set too)."""
    info = np.iinfo(dtype)
    return np.random.default_rng(seed).integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("dtype", INT_TYPES, ids=ids)
@pytest.mark.parametrize("op", list(NUMPY))
def test_binary_dtypes(op, dtype):
    a, b = full_range((3, 5), dtype, 0), full_range((3, 5), dtype, 1)
    got = check_parity(*node_model(op, [("a", a), ("b", b)], opset=18))
    np.testing.assert_array_equal(got[0], NUMPY[op](a, b))


@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=ids)
@pytest.mark.parametrize("op", list(NUMPY))
def test_binary_broadcasting(op, shapes):
    a, b = full_range(shapes[0], np.int32, 2), full_range(shapes[1], np.int32, 3)
    check_parity(*node_model(op, [("a", a), ("b", b)], opset=18))


@pytest.mark.parametrize("dtype", INT_TYPES, ids=ids)
def test_not_dtypes(dtype):
    x = full_range((2, 3, 7), dtype, 4)
    got = check_parity(*node_model("BitwiseNot", [("x", x)], opset=18))
    np.testing.assert_array_equal(got[0], np.invert(x))


@pytest.mark.parametrize("shape", [(), (0, 3), (5,), (2, 3, 4, 5)], ids=ids)
def test_not_shapes(shape):
    check_parity(*node_model("BitwiseNot", [("x", full_range(shape, np.uint16, 5))], opset=18))


def test_constant_operand():
    """A constant mask (folded at trace time when both operands are constants)."""
    a = full_range((4, 6), np.int64, 6)
    mask = np.array([0xFF, -1, 0, 0x7F00, 1, -256], np.int64)
    check_parity(*node_model("BitwiseAnd", [("a", a)], opset=18, host=[("m", mask)]))

