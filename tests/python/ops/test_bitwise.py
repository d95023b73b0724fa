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



def test_folded_in_shape_arithmetic():
    """Bitwise ops on shapes fold at trace time (HostEval::kFromValues): the Reshape target built
    from Shape(x) with BitwiseAnd/Or/Not keeps the graph in one MLX partition."""
    from onnx import TensorProto, helper
    from test_folding import check_one_partition, const, model_of

    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["shape"]),
        n("BitwiseAnd", ["shape", "all_ones"], ["same"]),    # & -1: unchanged
        n("BitwiseNot", ["same"], ["inverted"]),
        n("BitwiseNot", ["inverted"], ["again"]),
        n("BitwiseOr", ["again", "zero"], ["target"]),       # | 0: unchanged
        n("Reshape", ["x", "target"], ["r"]),
        n("Add", ["r", "x"], ["y"]),
    ]
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", 8])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "S", 8])],
                     [const("all_ones", [-1, -1, -1]), const("zero", [0])], opset=18)
    rng = np.random.default_rng(7)
    feeds = [{"x": rng.standard_normal((2, 5, 8)).astype(np.float32)},
             {"x": rng.standard_normal((3, 1, 8)).astype(np.float32)}]
    check_one_partition(model, feeds, folded_per_trace=5)
