"""Parity tests of the arithmetic family: Add Sub Mul Div Pow Mod Min Max Sum Mean.

The reference is ORT's CPU EP where it has a kernel; for the types it lacks (bfloat16, most
narrow integers, ...) it is a numpy computation of the ONNX semantics.

Several ops usually share one model (one node each, all on the same inputs): MLX's CPU backend
JIT-compiles every new fused kernel (~0.5 s each on a cold cache), so fewer, wider models keep
this file fast while still checking every op on every dtype/shape."""
import numpy as np
import pytest

from harness import (NO_KERNEL, BF16, BINARY_SHAPES, assert_close, check_parity, float64_on_mlx, ids, make_model, make_multi_model,
                     random_array, run_cpu, run_mlx)
from harness_bf16 import check_parity_or_numpy as parity

FLOATS = [np.float32, np.float16, BF16, np.float64]
SIGNED = [np.int8, np.int16, np.int32, np.int64]
UNSIGNED = [np.uint8, np.uint16, np.uint32, np.uint64]
NUMERIC = FLOATS + SIGNED + UNSIGNED


# --- numpy references ------------------------------------------------------------------------

def in_wide(fn, *xs):
    """fn computed in float32 (float64 for float64) and rounded back to the input type."""
    dt = np.dtype(xs[0].dtype)
    wide = np.float64 if dt == np.float64 else np.float32
    return np.asarray(fn(*[x.astype(wide) for x in xs])).astype(dt)


def trunc_div(a, b):
    q = np.abs(a.astype(np.int64)) // np.abs(b.astype(np.int64))
    return np.where((a < 0) != (b < 0), -q, q).astype(a.dtype)


def binary_ref(op, a, b, fmod=0):
    dt = np.dtype(a.dtype)
    if op in ("Add", "Sub", "Mul"):
        fn = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}[op]
        return in_wide(fn, a, b) if dt.kind not in "iu" else fn(a, b)
    if op == "Div":
        if dt.kind == "i":
            return trunc_div(a, b)
        return a // b if dt.kind == "u" else in_wide(np.divide, a, b)
    if op == "Mod":
        if dt.kind in "iu":
            return (np.fmod(a, b) if fmod else np.mod(a, b)).astype(dt)
        return in_wide(np.fmod, a, b)
    raise ValueError(op)


def binary_data(dtype, sa, sb, seed=0, nonzero_b=False):
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    lo = 0 if dtype.kind == "u" else -50
    a, b = random_array(sa, dtype, rng, lo, 50), random_array(sb, dtype, rng, lo, 50)
    if nonzero_b:
        if dtype.kind in "iu":
            b[b == 0] = 7
        else:
            b32 = b.astype(np.float32)
            b = np.where(np.abs(b32) < 0.5, np.float32(1.5), b32).astype(dtype)
    return np.asarray(a), np.asarray(b)


def ab(dtype, sa, sb):
    return [("a", dtype, sa), ("b", dtype, sb)]


# --- Add Sub Mul Div -------------------------------------------------------------------------

BASIC = ["Add", "Sub", "Mul", "Div"]


# The per-dtype tests use equal shapes: a broadcast makes MLX JIT-compile a fused kernel per
# (op, dtype, pattern), slow on a cold cache; broadcasting has its own tests below.
@pytest.mark.parametrize("dtype", NUMERIC, ids=ids)
def test_basic_types(dtype):
    sa, sb = (2, 3, 4), (2, 3, 4)
    a, b = binary_data(dtype, sa, sb, nonzero_b=True)
    parity(make_multi_model(BASIC, ab(dtype, sa, sb), dtype), {"a": a, "b": b},
           lambda: [binary_ref(op, a, b) for op in BASIC])


@pytest.mark.parametrize("shapes,dtype",
                         [(s, np.float32) for s in BINARY_SHAPES] + [(s, np.int32) for s in BINARY_SHAPES[2:6]],
                         ids=ids)
def test_basic_shapes(shapes, dtype):
    sa, sb = shapes
    a, b = binary_data(dtype, sa, sb, seed=1, nonzero_b=True)
    parity(make_multi_model(BASIC, ab(dtype, sa, sb), dtype), {"a": a, "b": b})


@pytest.mark.parametrize("opset", [7, 13, 14])
def test_basic_opsets(opset):
    a, b = binary_data(np.float32, (2, 3), (3,), nonzero_b=True)
    parity(make_multi_model(BASIC, ab(np.float32, (2, 3), (3,)), np.float32, opset=opset), {"a": a, "b": b})


@pytest.mark.parametrize("dtype", SIGNED, ids=ids)
def test_div_int_truncates(dtype):
    info = np.iinfo(dtype)
    a = np.array([7, -7, 7, -7, 0, 1, -1, info.max, info.min, info.min, 6, -6], dtype)
    b = np.array([2, 2, -2, -2, 3, -3, 3, 2, 2, 1, 3, -3], dtype)
    parity(make_model("Div", ab(dtype, a.shape, b.shape), [("y", dtype, None)]), {"a": a, "b": b},
           lambda: trunc_div(a, b))


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint8, np.uint64], ids=ids)
def test_int_overflow_wraps(dtype):
    info = np.iinfo(dtype)
    a = np.array([info.max, info.min, info.max, 3], dtype)
    b = np.array([1, 1, 2, info.max], dtype)
    ops = ["Add", "Sub", "Mul"]
    parity(make_multi_model(ops, ab(dtype, a.shape, b.shape), dtype), {"a": a, "b": b},
           lambda: [binary_ref(op, a, b) for op in ops])


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=ids)
def test_float_special_values(dtype):
    a = np.array([1, -1, 0, np.inf, -np.inf, np.nan, 0, 5, 6e4, -0.0], dtype)
    b = np.array([0, 0, 0, np.inf, 2, 1, -np.inf, np.nan, 4, 3], dtype)
    parity(make_multi_model(BASIC, ab(dtype, a.shape, b.shape), dtype), {"a": a, "b": b})


def test_constant_operand():
    b = np.array([1.5, -2.0, 3.0], np.float32)
    model = make_model("Div", ab(np.float32, [2, 3], [3]), [("y", np.float32, None)], initializers={"b": b})
    check_parity(model, {"a": random_array((2, 3), np.float32)})


# --- Mod -------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", SIGNED + UNSIGNED, ids=ids)
def test_mod_int(dtype):
    info = np.iinfo(dtype)
    if np.dtype(dtype).kind == "i":
        # (info.min % -1 traps in ORT's CPU kernel, like C's. ORT's fmod=1 goes through double,
        # so 64-bit values stay within 2^53 here; see test_mod_int64_beyond_2_53.)
        big = info.max if info.bits < 64 else 2**53 - 1
        a = np.array([5, -5, 5, -5, 0, 7, -7, 6, info.min, info.min, big, 3], dtype)
        b = np.array([3, 3, -3, -3, 4, 7, 2, -4, 3, 2, -2, info.min], dtype)
    else:
        big = info.max if info.bits < 64 else 2**53 - 1
        a = np.array([5, 0, 7, big, 9, 3], dtype)
        b = np.array([3, 4, 7, 2, 10, big], dtype)
    model = make_multi_model(["Mod", "Mod"], ab(dtype, a.shape, b.shape), dtype, attrs=[{"fmod": 0}, {"fmod": 1}])
    parity(model, {"a": a, "b": b}, lambda: [binary_ref("Mod", a, b, 0), binary_ref("Mod", a, b, 1)])


def test_mod_int64_beyond_2_53():
    # ORT computes integer fmod=1 as std::fmod(double, double), which rounds 64-bit values beyond
    # 2^53; MLX computes the exact integer remainder (what ONNX specifies).
    a = np.array([2**63 - 1, -(2**62) - 3, 2**60 + 1], np.int64)
    b = np.array([-2, 10, 3], np.int64)
    model = make_model("Mod", ab(np.int64, a.shape, b.shape), [("y", np.int64, None)], attrs={"fmod": 1})
    got, mlx, total = run_mlx(model, {"a": a, "b": b})
    assert mlx == total == 1
    assert_close(got[0], np.fmod(a, b))


@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
def test_mod_float_fmod(dtype):
    a = np.array([5.5, -5.5, 5.5, -5.5, 0, 7, -7, 1e4 + 0.25, np.inf, 3, 2, -2, np.nan, 1e-3, 40.5], np.float32)
    b = np.array([3, 3, -3, -3, 2, 7, 7, 0.75, 2, np.inf, 0, -np.inf, 1, 3, 1e-2], np.float32)
    a, b = a.astype(dtype), b.astype(dtype)
    model = make_model("Mod", ab(dtype, a.shape, b.shape), [("y", dtype, None)], attrs={"fmod": 1})
    parity(model, {"a": a, "b": b}, lambda: binary_ref("Mod", a, b, 1))


@pytest.mark.parametrize("shapes", BINARY_SHAPES[2:6], ids=ids)
def test_mod_shapes(shapes):
    sa, sb = shapes
    a, b = binary_data(np.int32, sa, sb, seed=2, nonzero_b=True)
    model = make_multi_model(["Mod", "Mod"], ab(np.int32, sa, sb), np.int32, attrs=[{"fmod": 0}, {"fmod": 1}])
    parity(model, {"a": a, "b": b})


@pytest.mark.parametrize("opset", [10, 13])
def test_mod_opsets(opset):
    a, b = binary_data(np.float32, (2, 3), (3,), nonzero_b=True)
    model = make_model("Mod", ab(np.float32, (2, 3), (3,)), [("y", np.float32, None)], attrs={"fmod": 1},
                       opset=opset)
    parity(model, {"a": a, "b": b})


def test_mod_float_fmod0_declined():
    # ORT rejects fmod=0 for floats before opset 28; MLX must not claim it either, so the CPU
    # kernel runs it and fails the way it does alone.
    a, b = binary_data(np.float32, (4,), (4,), nonzero_b=True)
    model = make_model("Mod", ab(np.float32, (4,), (4,)), [("y", np.float32, None)], attrs={"fmod": 0})
    with pytest.raises(Exception, match="fmod attribute must be true"):
        run_mlx(model, {"a": a, "b": b})


# --- Pow -------------------------------------------------------------------------------------

def pow_ref(x, y):
    """static_cast<T>(std::pow(double(x), double(y))), with exact integer powers."""
    if np.dtype(x.dtype).kind in "iu" and np.dtype(y.dtype).kind in "iu":
        xb, yb = np.broadcast_arrays(x.astype(np.int64), y.astype(np.int64))
        out = np.empty(xb.shape, np.int64)
        for i in np.ndindex(xb.shape):
            b, e = int(xb[i]), int(yb[i])
            out[i] = b**e if e >= 0 else (1 if b == 1 else (-1 if e % 2 else 1) if b == -1 else 0)
        return out.astype(x.dtype)
    return np.power(x.astype(np.float64), y.astype(np.float64)).astype(x.dtype)


def pow_data(tx, ty, sx, sy, seed=0):
    rng = np.random.default_rng(seed)
    tx, ty = np.dtype(tx), np.dtype(ty)
    x = random_array(sx, tx, rng, -4, 4) if tx.kind in "iu" else random_array(sx, tx, rng, 0.1, 3.0)
    if ty.kind == "u":
        y = random_array(sy, ty, rng, 0, 5)
    elif ty.kind == "i":
        y = random_array(sy, ty, rng, -2 if tx.kind in "iu" else -3, 5)
    else:
        y = random_array(sy, ty, rng, -2.0, 2.5)
    return np.asarray(x), np.asarray(y)


POW_TYPES = [
    (np.float32, np.float32), (np.float16, np.float16), (BF16, BF16), (np.float64, np.float64),
    (np.float32, np.int32), (np.float32, np.int64), (np.float32, np.float64), (np.float32, np.uint8),
    (np.float16, np.float32), (np.float64, np.int32),
    (np.int32, np.int32), (np.int64, np.int64), (np.int32, np.int64), (np.int64, np.int8),
    (np.int32, np.float32), (np.int64, np.float64),
]


@pytest.mark.parametrize("tx,ty", POW_TYPES, ids=ids)
def test_pow_types(tx, ty):
    x, y = pow_data(tx, ty, (2, 3, 4), (3, 1))
    model = make_model("Pow", [("a", tx, [2, 3, 4]), ("b", ty, [3, 1])], [("y", tx, None)], opset=15)
    if np.dtype(tx).kind in "iu" and np.dtype(ty).kind != "i" and not float64_on_mlx():
        # An integer base with a float exponent is computed in float64: declined on a GPU.
        got, mlx, _ = run_mlx(model, {"a": x, "b": y})
        assert mlx == 0
        assert_close(got[0], run_cpu(model, {"a": x, "b": y})[0])
        return
    parity(model, {"a": x, "b": y}, lambda: pow_ref(x, y))


@pytest.mark.parametrize("shapes", BINARY_SHAPES[2:], ids=ids)
def test_pow_shapes(shapes):
    sa, sb = shapes
    x, y = pow_data(np.float32, np.float32, sa, sb, seed=3)
    parity(make_model("Pow", ab(np.float32, sa, sb), [("y", np.float32, None)]), {"a": x, "b": y})


@pytest.mark.parametrize("opset", [7, 12, 13, 15])
def test_pow_opsets(opset):
    x, y = pow_data(np.float32, np.float32, (2, 3), (3,))
    parity(make_model("Pow", ab(np.float32, (2, 3), (3,)), [("y", np.float32, None)], opset=opset),
           {"a": x, "b": y})


def test_pow_float_special_values():
    x = np.array([-2, -2, -0.5, 0, 0, -1, np.inf, np.nan, 1, 2, -3, 10], np.float32)
    y = np.array([2, 3, -3, 0, 2, 0.5, -1, 0, np.nan, 0.5, 1, 30], np.float32)
    parity(make_model("Pow", ab(np.float32, x.shape, y.shape), [("y", np.float32, None)]), {"a": x, "b": y})


SQUARE_CASES = [(np.float32, np.float32), (np.float32, np.int64), (np.float32, np.float64), (np.float64, np.float64),
                (np.float16, np.float16), (np.float16, np.float32)]


def square_inputs(tx):
    """Squares that round to a tie (1 + k 2^-12 in float32: 25 significant bits), random values,
    the largest that overflow, signed zeros, infinities and NaN."""
    rng = np.random.default_rng(5)
    ties = 1 + np.arange(1, 2049) * 2.0**-12
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.9e19, -1.9e19, 3e38, 1e-30, -1e-30, 6e4, 300.0, 7e12, -7e12]
    with np.errstate(over="ignore"):  # float16: the largest become infinities
        return np.concatenate([ties, rng.standard_normal(4000) * 30, special]).astype(tx)


@pytest.mark.parametrize("power", [2, 3])
@pytest.mark.parametrize("tx,te", SQUARE_CASES, ids=ids)
def test_pow_by_a_constant_two_or_three_is_orts_product(tx, te, power):
    """x ^ 2 and x ^ 3 with the exponent an initializer are x * x and x * x * x (arithmetic.cc), as
    ORT special-cases them: its values bit for bit (MLX's power differed in about a third of the
    cubes; float16, which ORT's CPU EP lacks: the float32 product rounded once).
    test_pow_square_and_cube_are_multiplies checks the graph."""
    if np.float64 in (tx, te) and not float64_on_mlx():
        # A float64 tensor, even the constant exponent, leaves the node to ORT there (partition.cc).
        pytest.skip("float64 runs on MLX's CPU device only")
    x = square_inputs(tx)
    model = make_model("Pow", [("a", tx, list(x.shape)), ("b", te, [])], [("y", tx, None)], opset=15,
                       initializers={"b": np.array(power, te)})
    got, mlx, total = run_mlx(model, {"a": x})
    assert mlx == total == 1
    with np.errstate(over="ignore"):  # the float32 products past float16's range
        wide = x.astype(np.float32)
        want = (wide * wide * (wide if power == 3 else 1)).astype(tx) if tx == np.float16 else run_cpu(model, {"a": x})[0]
    assert got[0].dtype == want.dtype and np.array_equal(got[0], want, equal_nan=True), \
        np.flatnonzero(got[0].view(np.uint8) != want.view(np.uint8))[:10]
    assert np.array_equal(np.signbit(got[0]), np.signbit(want))


def test_pow_square_and_cube_are_multiplies():
    """The square and the cube are MLX's Multiply (fusable, one instruction a value), not Power
    (a call a value: 24% of GPT-2's CPU profile in its tanh Gelu's cubes)."""
    from harness import census_of_tests
    cases = [f"test_pow_by_a_constant_two_or_three_is_orts_product[float32-{e}-{p}]"
             for e in ("float32", "int64") for p in (2, 3)]
    census, _ = census_of_tests(__file__, cases)
    assert len(census) == 4 and all("Multiply" in line and "Power" not in line for line in census), census


@pytest.mark.parametrize("tx", [np.int32, np.int64], ids=ids)
def test_pow_int_negative_exponent(tx):
    x = np.array([2, -2, 1, -1, -1, 3, -3, 0, 5, 1], tx)
    y = np.array([-1, -2, -5, -3, -4, 0, 3, 3, 2, 0], tx)
    parity(make_model("Pow", ab(tx, x.shape, y.shape), [("y", tx, None)]), {"a": x, "b": y},
           lambda: pow_ref(x, y))


def test_pow_int_base_uint64_exponent_declined():
    model = make_model("Pow", [("a", np.int32, [3]), ("b", np.uint64, [3])], [("y", np.int32, None)], opset=15)
    feeds = {"a": np.array([1, 2, 3], np.int32), "b": np.array([1, 2, 3], np.uint64)}
    # Declined, and ORT's CPU EP has no kernel for it either.
    with pytest.raises(Exception, match=NO_KERNEL):
        run_mlx(model, feeds)


# --- Min Max Sum Mean ------------------------------------------------------------------------

def variadic_ref(op, xs):
    dt = np.dtype(xs[0].dtype)
    wide = np.float64 if dt == np.float64 else (np.float32 if dt.kind not in "iu" else dt)
    out = xs[0].astype(wide)
    for x in xs[1:]:
        fn = {"Min": np.minimum, "Max": np.maximum}.get(op, np.add)
        out = fn(out, x.astype(wide))
    if op == "Mean":
        out = out * (1.0 / len(xs) if dt == np.float64 else np.float32(1.0 / len(xs)))
    return np.asarray(out).astype(dt)


def variadic_inputs(dtype, shapes):
    return [(f"x{i}", dtype, list(s)) for i, s in enumerate(shapes)]


def variadic_feeds(dtype, shapes, seed):
    rng = np.random.default_rng(seed)
    lo = 0 if np.dtype(dtype).kind == "u" else -20
    return {f"x{i}": np.asarray(random_array(s, dtype, rng, lo, 20)) for i, s in enumerate(shapes)}


VAR_SHAPES = [
    [(3, 4)],
    [(3, 4), (3, 4)],
    [(2, 3, 4), (4,), (3, 1)],
    [(), (2, 3), (1, 3), (2, 1)],
    [(0, 3), (1, 3)],
]
ALL_VARIADIC = ["Min", "Max", "Sum", "Mean"]


@pytest.mark.parametrize("dtype", NUMERIC, ids=ids)
def test_variadic_types(dtype):
    shapes = [(2, 3, 4), (2, 3, 4)]  # (more inputs and broadcasting: test_variadic_shapes)
    ops = ALL_VARIADIC if np.dtype(dtype).kind not in "iu" else ["Min", "Max"]  # Sum/Mean: floats only
    feeds = variadic_feeds(dtype, shapes, 4)
    xs = list(feeds.values())
    if np.dtype(dtype) == np.float64 and not float64_on_mlx():
        # MLX has no float64 on GPUs, so the EP declines these nodes, and ORT's CPU EP has no
        # float64 Mean kernel: a session with that Mean cannot be created at all. (parity checks
        # that the other three are declined and give the CPU EP's answer.)
        with pytest.raises(Exception, match=NO_KERNEL):
            run_mlx(make_multi_model(["Mean"], variadic_inputs(dtype, shapes), dtype, opset=13), feeds)
        ops = [op for op in ops if op != "Mean"]
    parity(make_multi_model(ops, variadic_inputs(dtype, shapes), dtype, opset=13), feeds,
           lambda: [variadic_ref(op, xs) for op in ops])


@pytest.mark.parametrize("shapes", VAR_SHAPES, ids=lambda s: "_".join(ids(x) for x in s))
def test_variadic_shapes(shapes):
    feeds = variadic_feeds(np.float32, shapes, 6)
    parity(make_multi_model(ALL_VARIADIC, variadic_inputs(np.float32, shapes), np.float32, opset=13), feeds)


@pytest.mark.parametrize("opset", [6, 8, 12, 13])
def test_variadic_opsets(opset):
    shapes = [(2, 3), (2, 3), (2, 3)]  # opset 6 takes no broadcasting
    feeds = variadic_feeds(np.float32, shapes, 7)
    parity(make_multi_model(ALL_VARIADIC, variadic_inputs(np.float32, shapes), np.float32, opset=opset), feeds)


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=ids)
def test_minmax_nan_propagates(dtype):
    a = np.array([np.nan, 1, np.nan, 2, -np.inf, np.inf], dtype)
    b = np.array([1, np.nan, np.nan, 3, 0, 0], dtype)
    inputs = [("x0", dtype, [6]), ("x1", dtype, [6]), ("x2", dtype, [])]
    feeds = {"x0": a, "x1": b, "x2": np.array(0.5, dtype)}
    check_parity(make_multi_model(["Min", "Max"], inputs, dtype, opset=13), feeds)
