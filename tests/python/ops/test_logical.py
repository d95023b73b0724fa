"""Parity tests of the logical family: Equal Less LessOrEqual Greater GreaterOrEqual, And Or Xor
Not, Where, IsNaN, IsInf.

The reference is ORT's CPU EP where it has a kernel; for the types it lacks (bfloat16, narrow
integers for some ops, ...) it is the numpy result (these ops are exact, so numpy is the spec)."""
import numpy as np
import pytest
from onnx import helper

from harness import (BF16, BINARY_SHAPES, assert_declined, check_parity, ids, make_graph_model, make_model,
                     make_multi_model, random_array)
from harness_bf16 import check_parity_or_numpy

FLOATS = [np.float32, np.float16, BF16, np.float64]
INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
NUMERIC = FLOATS + INTS


def parity(model, feeds, fallback=None):
    """check_parity_or_numpy; these ops are exact, so bfloat16 outputs keep float32's tolerance."""
    return check_parity_or_numpy(model, feeds, fallback, bf16_rtol=1e-5, bf16_atol=1e-6)


def small_values(shape, dtype, rng):
    """Few distinct values (so equality happens), negatives for signed types."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    lo = 0 if dtype.kind == "u" else -3
    return np.asarray(rng.integers(lo, 4, size=shape).astype(np.float32).astype(dtype))


# --- comparisons -----------------------------------------------------------------------------

COMPARE = {
    "Equal": np.equal,
    "Less": np.less,
    "LessOrEqual": np.less_equal,
    "Greater": np.greater,
    "GreaterOrEqual": np.greater_equal,
}


def compare_model(ops, dtype, sa, sb, opset=19):
    """One node per comparison in `ops`, all on inputs a and b; outputs y0, y1, ..."""
    return make_multi_model(ops, [("a", dtype, sa), ("b", dtype, sb)], np.bool_, opset=opset)


def np_compare(op, a, b):
    if a.dtype == BF16:
        a, b = a.astype(np.float32), b.astype(np.float32)
    return COMPARE[op](a, b)


# The per-dtype tests use equal shapes: a broadcast makes MLX JIT-compile a fused kernel per
# (op, dtype, pattern), slow on a cold cache; broadcasting has its own tests.
@pytest.mark.parametrize("dtype", NUMERIC, ids=ids)
def test_compare_types(dtype):
    rng = np.random.default_rng(0)
    a, b = small_values((2, 3, 4), dtype, rng), small_values((2, 3, 4), dtype, rng)
    ops = list(COMPARE)
    parity(compare_model(ops, dtype, a.shape, b.shape), {"a": a, "b": b},
           lambda: [np_compare(op, a, b) for op in ops])


def test_equal_bool():
    rng = np.random.default_rng(1)
    a, b = small_values((2, 3, 4), np.bool_, rng), small_values((2, 3, 4), np.bool_, rng)
    parity(compare_model(["Equal"], np.bool_, a.shape, b.shape), {"a": a, "b": b}, lambda: [a == b])


@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=ids)
def test_compare_shapes(shapes):
    rng = np.random.default_rng(2)
    sa, sb = shapes
    a, b = small_values(sa, np.float32, rng), small_values(sb, np.float32, rng)
    parity(compare_model(["Equal", "Less", "GreaterOrEqual"], np.float32, sa, sb), {"a": a, "b": b})


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=ids)
def test_compare_special_values(dtype):
    vals = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0], np.float32)
    a = np.repeat(vals, len(vals)).astype(dtype)
    b = np.tile(vals, len(vals)).astype(dtype)
    ops = list(COMPARE)
    parity(compare_model(ops, dtype, a.shape, b.shape), {"a": a, "b": b},
           lambda: [np_compare(op, a, b) for op in ops])


@pytest.mark.parametrize("dtype", [np.int64, np.uint64, np.int32], ids=ids)
def test_compare_int_extremes(dtype):
    info = np.iinfo(dtype)
    a = np.array([info.max, info.min, info.max - 1, 0, info.max], dtype)
    b = np.array([info.max - 1, info.min, info.max, info.min, info.max], dtype)
    ops = list(COMPARE)
    parity(compare_model(ops, dtype, a.shape, b.shape), {"a": a, "b": b},
           lambda: [np_compare(op, a, b) for op in ops])


@pytest.mark.parametrize("op,opset,dtype", [
    ("Equal", 7, np.int32), ("Equal", 11, np.float32), ("Equal", 13, np.float32), ("Equal", 19, np.int64),
    ("Less", 7, np.float32), ("Less", 9, np.int32), ("Less", 13, np.float32),
    ("Greater", 7, np.float32), ("Greater", 9, np.int64), ("Greater", 13, np.float32),
    ("LessOrEqual", 12, np.float32), ("LessOrEqual", 16, np.int32),
    ("GreaterOrEqual", 12, np.float32), ("GreaterOrEqual", 16, np.int32),
], ids=str)
def test_compare_opsets(op, opset, dtype):
    rng = np.random.default_rng(3)
    a, b = small_values((2, 3), dtype, rng), small_values((2, 3), dtype, rng)
    parity(compare_model([op], dtype, a.shape, b.shape, opset=opset), {"a": a, "b": b})


def test_equal_string_declined():
    S, B = object, np.bool_
    model = make_model("Equal", [("a", S, [3]), ("b", S, [3])], [("y", B, [3])], opset=19)
    assert_declined(model, {"a": np.array(["x", "y", "z"]), "b": np.array(["x", "q", "z"])})


def test_compare_with_constant():
    b = np.array([0.5, -1.0, 2.0], np.float32)
    model = make_model("Less", [("a", np.float32, [2, 3]), ("b", np.float32, [3])], [("y", np.bool_, None)],
                       opset=13, initializers={"b": b})
    check_parity(model, {"a": random_array((2, 3), np.float32)})


# --- And Or Xor Not --------------------------------------------------------------------------

LOGIC = {"And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor}


@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=ids)
def test_logic_binary(shapes):
    rng = np.random.default_rng(4)
    sa, sb = shapes
    a, b = small_values(sa, np.bool_, rng), small_values(sb, np.bool_, rng)
    parity(compare_model(list(LOGIC), np.bool_, sa, sb, opset=7), {"a": a, "b": b},
           lambda: [fn(a, b) for fn in LOGIC.values()])


@pytest.mark.parametrize("shape", [(), (5,), (3, 4), (2, 3, 4), (2, 0, 3), (2, 3, 4, 5)], ids=ids)
def test_not(shape):
    a = small_values(shape, np.bool_, np.random.default_rng(5))
    check_parity(make_model("Not", [("a", np.bool_, list(shape))], [("y", np.bool_, None)], opset=1), {"a": a})


def test_logic_chain():
    # (a < b) & !(a == c) | isnan(a): several nodes of this family in one MLX partition.
    nodes = [
        helper.make_node("Less", ["a", "b"], ["lt"]),
        helper.make_node("Equal", ["a", "c"], ["eq"]),
        helper.make_node("Not", ["eq"], ["ne"]),
        helper.make_node("And", ["lt", "ne"], ["both"]),
        helper.make_node("IsNaN", ["a"], ["nan"]),
        helper.make_node("Or", ["both", "nan"], ["y"]),
    ]
    f = np.float32
    model = make_graph_model(nodes, [("a", f, [2, 3]), ("b", f, [3]), ("c", f, [2, 1])], [("y", np.bool_, [2, 3])])
    rng = np.random.default_rng(6)
    a = small_values((2, 3), np.float32, rng)
    a[0, 1] = np.nan
    check_parity(model, {"a": a, "b": small_values((3,), np.float32, rng), "c": small_values((2, 1), np.float32, rng)})


# --- Where -----------------------------------------------------------------------------------

WHERE_SHAPES = [
    ((3, 4), (3, 4), (3, 4)),
    ((2, 3, 4), (4,), ()),
    ((3, 1), (1, 4), (2, 1, 1)),
    ((), (2, 3), (2, 3)),
    ((0, 3), (1, 3), (3,)),
    ((2, 1, 4, 1), (3, 1, 5), (1,)),
]


@pytest.mark.parametrize("dtype", NUMERIC + [np.bool_], ids=ids)
def test_where_types(dtype):
    rng = np.random.default_rng(7)
    sc, sx, sy = (2, 3, 4), (2, 3, 4), (2, 3, 4)  # (equal shapes: see test_compare_types)
    c = small_values(sc, np.bool_, rng)
    x, y = small_values(sx, dtype, rng), small_values(sy, dtype, rng)
    model = make_model("Where", [("c", np.bool_, list(sc)), ("x", dtype, list(sx)), ("y", dtype, list(sy))],
                       [("out", dtype, None)], opset=16)
    parity(model, {"c": c, "x": x, "y": y}, lambda: np.where(c, x, y))


@pytest.mark.parametrize("shapes", WHERE_SHAPES, ids=lambda s: "_".join(ids(x) for x in s))
@pytest.mark.parametrize("opset", [9, 16])
def test_where_shapes(shapes, opset):
    rng = np.random.default_rng(8)
    sc, sx, sy = shapes
    c = small_values(sc, np.bool_, rng)
    x, y = random_array(sx, np.float32, rng), random_array(sy, np.float32, rng)
    model = make_model("Where", [("c", np.bool_, list(sc)), ("x", np.float32, list(sx)), ("y", np.float32, list(sy))],
                       [("out", np.float32, None)], opset=opset)
    check_parity(model, {"c": c, "x": x, "y": y})


def test_where_string_declined():
    S, B = object, np.bool_
    model = make_model("Where", [("c", B, [3]), ("x", S, [3]), ("y", S, [3])], [("out", S, [3])], opset=16)
    assert_declined(model, {"c": np.array([True, False, True]), "x": np.array(["a", "b", "c"]),
                            "y": np.array(["d", "e", "f"])})


# --- IsNaN IsInf -----------------------------------------------------------------------------

SPECIALS = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.0, 3e38, -3e38, 1e-40], np.float32)


def special_data(dtype, shape=(2, 11)):
    rng = np.random.default_rng(9)
    vals = np.tile(SPECIALS, int(np.prod(shape)) // len(SPECIALS) + 1)[: int(np.prod(shape))]
    with np.errstate(over="ignore"):  # +-3e38 become +-inf in float16
        return rng.permutation(vals).reshape(shape).astype(dtype)


def isinf_ref(x, neg, pos):
    x = x.astype(np.float64)
    return (np.isneginf(x) & bool(neg)) | (np.isposinf(x) & bool(pos))


@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
@pytest.mark.parametrize("opset", [9, 13, 20])
def test_isnan(dtype, opset):
    if opset == 9 and np.dtype(dtype) == BF16:
        pytest.skip("IsNaN-9 has no bfloat16")
    x = special_data(dtype)
    model = make_model("IsNaN", [("x", dtype, [2, 11])], [("y", np.bool_, None)], opset=opset)
    parity(model, {"x": x}, lambda: np.isnan(x.astype(np.float64)))


@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
@pytest.mark.parametrize("neg,pos", [(1, 1), (0, 1), (1, 0), (0, 0)])
def test_isinf(dtype, neg, pos):
    x = special_data(dtype)
    model = make_model("IsInf", [("x", dtype, [2, 11])], [("y", np.bool_, None)],
                       attrs={"detect_negative": neg, "detect_positive": pos}, opset=20)
    parity(model, {"x": x}, lambda: isinf_ref(x, neg, pos))


@pytest.mark.parametrize("op", ["IsNaN", "IsInf"])
@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (2, 3, 4, 5)], ids=ids)
def test_predicate_shapes(op, shape):
    x = random_array(shape, np.float32)
    if x.size:
        x.reshape(-1)[::3] = np.inf if op == "IsInf" else np.nan
    model = make_model(op, [("x", np.float32, list(shape))], [("y", np.bool_, None)], opset=10 if op == "IsInf" else 13)
    check_parity(model, {"x": x})
