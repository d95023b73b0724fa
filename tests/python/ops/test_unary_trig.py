"""Parity tests of the inverse trigonometric and hyperbolic functions of the unary family: Acos
Asin Atan (schema versions 7, 22) and Acosh Asinh Atanh Cosh Sinh (9, 22).

References: ORT's CPU EP for float32 and float16 (its float16 is float32 computed and rounded, as
ORT inserts Casts around its float-only kernels); for bfloat16 (no ORT kernel) ORT's float32 result
on the same values rounded to bfloat16; for float64 (no ORT kernel) numpy's float64 functions.
Besides parity with ORT, the dense sweeps check MLX against the exact (float64) function at the
same tolerances, over the whole domain and its edges: +-1 and its neighbouring floats, tiny |x|
(where the functions are ~x, or ~pi/2 - x), large |x| up to overflow (Sinh/Cosh), NaN, +-inf and
out-of-domain inputs (NaN). float16 and bfloat16 are checked on all 65536 values."""
import numpy as np
import pytest
from onnx import helper

from harness import (BF16, assert_close, check_parity, float64_on_mlx, ids, make_graph_model, make_model,
                     numpy_outputs, random_array, run_cpu, run_mlx)
from harness_bf16 import check_bf16

F32, F16, F64 = np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.float64)

# op -> (numpy float64 function, schema versions (since_version of each), range of random inputs).
OPS = {
    "Acos": (np.arccos, [7, 22], (-1, 1)),
    "Asin": (np.arcsin, [7, 22], (-1, 1)),
    "Atan": (np.arctan, [7, 22], (-10, 10)),
    "Acosh": (np.arccosh, [9, 22], (1, 20)),
    "Asinh": (np.arcsinh, [9, 22], (-20, 20)),
    "Atanh": (np.arctanh, [9, 22], (-1, 1)),
    "Cosh": (np.cosh, [9, 22], (-10, 10)),
    "Sinh": (np.sinh, [9, 22], (-10, 10)),
}
LATEST = 22

# Values every op sees: NaN, infinities, signed zeros, tiny and subnormal |x|, +-1 and their
# neighbours, out-of-domain values of Acos/Asin/Atanh/Acosh, and the float32 overflow boundary
# of Sinh/Cosh (cosh(x) overflows from x = 89.415...).
_ONE_UP32 = float(np.nextafter(np.float32(1), np.float32(2)))
_ONE_DOWN32 = float(np.nextafter(np.float32(1), np.float32(0)))
EDGE = np.array([np.nan, -np.inf, np.inf, -0.0, 0.0, 1e-40, -1e-40, 1e-30, -1e-30, 1e-6, -1e-6, 1e-3, -1e-3,
                 0.5, -0.5, 1.0, -1.0, _ONE_UP32, -_ONE_UP32, _ONE_DOWN32, -_ONE_DOWN32, 1.5, -1.5, 2.0, -2.0,
                 10.0, -10.0, 88.5, -88.5, 89.4, -89.4, 89.5, -89.5, 100.0, -100.0, 1e4, -1e4, 1e30, -1e30])
# float64 additions: +-1 neighbours in float64 and the float64 overflow boundary (710.475...).
EDGE64 = np.concatenate([EDGE, [1 + 2.0**-52, 1 - 2.0**-53, -1 - 2.0**-52, -1 + 2.0**-53, 709.5, -709.5, 710.4,
                                -710.4, 710.5, -710.5, 1e300, -1e300, 5e-324]])


def unary_model(op, dtype, shape, opset=LATEST):
    return make_model(op, [("x", dtype, list(shape))], [("y", dtype, list(shape))], opset=opset)


def float32_reference(op, x, opset=LATEST):
    """ORT CPU's float32 result on `x`'s values."""
    x32 = x.astype(np.float32)
    return run_cpu(unary_model(op, np.float32, x32.shape, opset), {"x": x32})[0]


def run_parity(op, x, opset=LATEST):
    """check_parity of one `op` node on `x` against the reference of the module docstring
    (float64 is skipped where MLX has no float64)."""
    model = unary_model(op, x.dtype, x.shape, opset)
    if x.dtype == BF16:
        return check_bf16(model, {"x": x}, [float32_reference(op, x, opset)])
    if x.dtype == F64:
        return check_parity(model, {"x": x}, expected=numpy_outputs(lambda: OPS[op][0](x)))
    return check_parity(model, {"x": x})


def assert_accurate(op, x, got):
    """MLX's output `got` for `x` (bfloat16 ones come back as float32) is the exact function value
    rounded to x's dtype, within the dtype tolerance: accuracy in its own right, not only agreement
    with ORT."""
    with np.errstate(all="ignore"):
        exact = OPS[op][0](x.astype(np.float64)).astype(x.dtype)
    assert_close(np.asarray(got).astype(x.dtype), exact, what=f"{op} vs exact")


# ---- every op x dtype ----

@pytest.mark.parametrize("dtype", [F32, F16, BF16, F64], ids=ids)
@pytest.mark.parametrize("op", list(OPS))
def test_float_dtypes(op, dtype):
    lo, hi = OPS[op][2]
    # A little outside the domain as well (NaN there).
    x = random_array((2, 3, 4), dtype, np.random.default_rng(1), lo - 0.2 * (hi - lo), hi + 0.2 * (hi - lo))
    run_parity(op, x)


# ---- shapes: scalar, empty, rank 1..4 ----

@pytest.mark.parametrize("shape", [(), (0,), (7,), (2, 0, 3), (1, 2, 3, 4)], ids=ids)
@pytest.mark.parametrize("op", list(OPS))
def test_shapes(op, shape):
    lo, hi = OPS[op][2]
    run_parity(op, random_array(shape, np.float32, np.random.default_rng(2), lo, hi))


# ---- NaN, infinities, signed zeros, +-1, tiny and huge values ----

@pytest.mark.parametrize("dtype", [F32, F16, BF16, F64], ids=ids)
@pytest.mark.parametrize("op", list(OPS))
def test_edge_values(op, dtype):
    with np.errstate(over="ignore", under="ignore"):
        x = (EDGE64 if dtype == F64 else EDGE).astype(dtype)
    got = run_parity(op, x)
    assert_accurate(op, x, got[0])


# ---- dense sweeps over the domain, also against the exact function ----

def _sweep32():
    """float32 inputs: tiny to huge |x| (log-spaced, both signs), the domain densely, 2000 floats
    on each side of +-1, and the Sinh/Cosh overflow region."""
    tiny = np.logspace(-45, 0, 4000)
    big = np.logspace(0, 38.5, 4000)
    k = np.arange(2000) * 2.0**-24
    near_one = np.concatenate([1 - k, 1 + 2 * k])
    parts = [tiny, -tiny, big, -big, near_one, -near_one, np.linspace(-1, 1, 20001), np.linspace(-100, 100, 20001),
             np.linspace(87, 91, 4001), np.linspace(-91, -87, 4001)]
    return np.concatenate(parts).astype(np.float32)


@pytest.mark.parametrize("op", list(OPS))
def test_dense_float32(op):
    x = _sweep32()
    got = run_parity(op, x)
    assert_accurate(op, x, got[0])


@pytest.mark.parametrize("op", list(OPS))
def test_dense_float64(op):
    rng = np.random.default_rng(3)
    k = np.arange(2000) * 2.0**-53
    near_one = np.concatenate([1 - k, 1 + 2 * k])
    x = np.concatenate([_sweep32().astype(np.float64), -near_one, near_one, np.logspace(-320, 308, 4000),
                        -np.logspace(-320, 308, 4000), rng.uniform(-1, 1, 10000), rng.uniform(-30, 30, 10000),
                        np.linspace(705, 712, 4001), np.linspace(-712, -705, 4001)])
    got = run_parity(op, x)
    assert_accurate(op, x, got[0])


@pytest.mark.parametrize("op", list(OPS))
def test_all_float16(op):
    x = np.arange(65536, dtype=np.uint16).view(np.float16)
    got = run_parity(op, x)
    assert_accurate(op, x, got[0])


@pytest.mark.parametrize("op", list(OPS))
def test_all_bfloat16(op):
    x = np.arange(65536, dtype=np.uint16).view(BF16)
    got = run_parity(op, x)
    assert_accurate(op, x, got[0])


# ---- every registered schema version (through the opsets that resolve to it) ----

@pytest.mark.parametrize("op,opset", [(op, v) for op, spec in OPS.items() for v in spec[1] + [13, 21]], ids=ids)
def test_versions(op, opset):
    lo, hi = OPS[op][2]
    x = random_array((3, 5), np.float32, np.random.default_rng(4), lo, hi)
    run_parity(op, x, opset)


@pytest.mark.parametrize("op", list(OPS))
def test_float16_at_first_version(op):
    since = OPS[op][1][0]
    lo, hi = OPS[op][2]
    run_parity(op, random_array((4, 5), np.float16, np.random.default_rng(5), lo, hi), since)


# ---- fused with each other in one partition ----

def test_chain_fused():
    # Every op at least once in one partition; each one's input stays inside its domain.
    ops = ["Sinh", "Asinh", "Atan", "Asin", "Atan", "Acos", "Cosh", "Acosh", "Atan", "Atan", "Atanh"]
    names = ["x"] + [f"t{i}" for i in range(len(ops) - 1)] + ["y"]
    nodes = [helper.make_node(op, [names[i]], [names[i + 1]]) for i, op in enumerate(ops)]
    model = make_graph_model(nodes, [("x", np.float32, [4, 5])], [("y", np.float32, [4, 5])], opset=LATEST)
    x = random_array((4, 5), np.float32, np.random.default_rng(6), -1.5, 1.5)
    got = check_parity(model, {"x": x})
    assert np.isfinite(got[0]).all()


# ---- float64: claimed on MLX's CPU device only ----

@pytest.mark.parametrize("op", ["Acos", "Sinh"])
def test_float64_only_where_mlx_has_it(op):
    # MLX's CPU float64 functions are libm's double ones (accurate, see test_dense_float64). On
    # GPUs the EP declines float64; ORT's CPU EP has no float64 kernel for these ops either, so
    # the session fails there, as it does without the EP.
    x = random_array((3, 4), np.float64, np.random.default_rng(7), -1, 1)
    model = unary_model(op, np.float64, x.shape)
    if float64_on_mlx():
        got, mlx, total = run_mlx(model, {"x": x})
        assert mlx == total == 1
        assert_accurate(op, x, got[0])
    else:
        with pytest.raises(Exception):
            run_mlx(model, {"x": x})
