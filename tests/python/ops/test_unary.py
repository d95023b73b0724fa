"""Parity tests of the unary family: Abs Neg Exp Log Sqrt Reciprocal Sin Cos Tan Tanh Sigmoid
Erf Floor Ceil Round Sign, the activations Relu LeakyRelu Elu Selu HardSigmoid HardSwish
Softplus Softsign Gelu, and Clip (attribute and input forms).

The reference is ORT's CPU EP where it has a kernel (float16 there is computed in float32 and
rounded, as ORT inserts Casts around float-only kernels). For bfloat16 (which ORT mostly lacks)
it is ORT's float32 result on the same values rounded to bfloat16; for other types ORT lacks
(float64 Tan/Elu/..., int16 Relu, ...) it is a numpy float64 computation of the ONNX formula."""
import math

import numpy as np
import pytest
from onnx import helper

from harness import (BF16, assert_close, check_parity, cpu_or_none, float64_on_mlx, ids, make_graph_model, make_model,
                     mlx_device, random_array, run_cpu, run_mlx)
from harness_bf16 import check_bf16, cpu_bf16_or_none

F32, F16, F64 = np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.float64)
SIGNED = [np.int8, np.int16, np.int32, np.int64]
UNSIGNED = [np.uint8, np.uint16, np.uint32, np.uint64]

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _f(v):
    """A float attribute's value (attributes are float32)."""
    return float(np.float32(v))


def _hardsigmoid(x, alpha=_f(0.2), beta=0.5):
    return np.clip(alpha * x + beta, 0, 1)


# numpy float64 references of the ONNX formulas (default attributes).
NUMPY_REF = {
    "Abs": np.abs, "Neg": np.negative, "Exp": np.exp, "Log": np.log, "Sqrt": np.sqrt,
    "Reciprocal": np.reciprocal, "Sin": np.sin, "Cos": np.cos, "Tan": np.tan, "Tanh": np.tanh,
    "Sigmoid": lambda x: 1 / (1 + np.exp(-x)), "Erf": _erf, "Floor": np.floor, "Ceil": np.ceil,
    "Round": np.round, "Sign": np.sign, "Relu": lambda x: np.maximum(x, 0),
    "LeakyRelu": lambda x: np.where(x >= 0, x, _f(0.01) * x),
    "Elu": lambda x: np.where(x >= 0, x, np.expm1(x)),
    "Selu": lambda x: _f(1.0507010) * np.where(x > 0, x, _f(1.6732632) * np.expm1(x)),
    "HardSigmoid": _hardsigmoid,
    "HardSwish": lambda x: x * _hardsigmoid(x, 1 / 6, 0.5),
    "Softplus": lambda x: np.logaddexp(0, x),
    "Softsign": lambda x: x / (1 + np.abs(x)),
    "Gelu": lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2))),
}

# op -> (opset of the default test, float64 claimed on an MLX CPU device, input range).
FLOAT_OPS = {
    "Abs": (13, True, (-3, 3)), "Neg": (13, True, (-3, 3)), "Exp": (13, True, (-5, 5)),
    "Log": (13, True, (0.01, 10)), "Sqrt": (13, True, (0, 10)), "Reciprocal": (13, True, (0.1, 5)),
    "Sin": (22, False, (-10, 10)), "Cos": (22, False, (-10, 10)), "Tan": (22, True, (-1.4, 1.4)),
    "Tanh": (13, True, (-4, 4)), "Sigmoid": (13, True, (-8, 8)), "Erf": (13, False, (-3, 3)),
    "Floor": (13, True, (-5, 5)), "Ceil": (13, True, (-5, 5)), "Round": (22, True, (-5, 5)),
    "Sign": (13, True, (-3, 3)), "Relu": (14, True, (-3, 3)), "LeakyRelu": (16, True, (-3, 3)),
    "Elu": (22, True, (-4, 4)), "Selu": (22, True, (-4, 4)), "HardSigmoid": (22, True, (-4, 4)),
    "HardSwish": (22, True, (-5, 5)), "Softplus": (22, True, (-10, 10)),
    "Softsign": (22, True, (-5, 5)), "Gelu": (20, False, (-4, 4)),
}

# Every schema version registered, per op (the since_version of each).
VERSIONS = {
    "Abs": [6, 13], "Neg": [6, 13], "Exp": [6, 13], "Log": [6, 13], "Sqrt": [6, 13],
    "Reciprocal": [6, 13], "Sin": [7, 22], "Cos": [7, 22], "Tan": [7, 22], "Tanh": [6, 13],
    "Sigmoid": [6, 13], "Erf": [9, 13], "Floor": [6, 13], "Ceil": [6, 13], "Round": [11, 22],
    "Sign": [9, 13], "Relu": [6, 13, 14], "LeakyRelu": [6, 16], "Elu": [6, 22], "Selu": [6, 22],
    "HardSigmoid": [6, 22], "HardSwish": [14, 22], "Softplus": [1, 22], "Softsign": [1, 22],
    "Gelu": [20],
}

EDGE = np.array([np.nan, -np.inf, np.inf, -0.0, 0.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.0, -3.0,
                 1e-30, -1e-30, 1e-6, -1e-6, 20.0, -20.0, 88.5, -88.5, 100.0, -100.0, 1e4, -1e4])


def unary_model(op, dtype, shape, opset, attrs=None):
    return make_model(op, [("x", dtype, list(shape))], [("y", dtype, list(shape))], attrs=attrs, opset=opset)


def parity(model, feeds, expected=None):
    """check_parity, or check_bf16 when a feed is bfloat16."""
    if any(v.dtype == BF16 for v in feeds.values()):
        return check_bf16(model, feeds, expected)
    return check_parity(model, feeds, expected=expected)


def reference(op, x, opset, attrs=None):
    """The expected output for input `x` (see module docstring)."""
    dtype = x.dtype
    model = unary_model(op, dtype, x.shape, opset, attrs)
    if dtype == BF16:
        ref = cpu_bf16_or_none(model, {"x": x})
        if ref is None:
            r = cpu_or_none(unary_model(op, np.float32, x.shape, opset, attrs), {"x": x.astype(np.float32)})
            ref = None if r is None else [r[0].astype(BF16)]
    else:
        ref = cpu_or_none(model, {"x": x})
    if ref is not None:
        return ref
    assert not attrs, "numpy references use the default attributes"
    with np.errstate(all="ignore"):
        return [np.asarray(NUMPY_REF[op](x.astype(np.float64))).astype(dtype)]


def run_unary(op, x, opset, attrs=None):
    model = unary_model(op, x.dtype, x.shape, opset, attrs)
    parity(model, {"x": x}, reference(op, x, opset, attrs))


# ---- floats: every op x dtype ----

@pytest.mark.parametrize("dtype", [F32, F16, BF16, F64], ids=ids)
@pytest.mark.parametrize("op", list(FLOAT_OPS))
def test_float_dtypes(op, dtype):
    opset, f64_ok, (lo, hi) = FLOAT_OPS[op]
    if dtype == F64 and not f64_ok:  # (where MLX has no float64 at all, check_parity skips)
        pytest.skip("float64 not claimed for this op")
    x = random_array((2, 3, 4), dtype, np.random.default_rng(1), lo, hi)
    run_unary(op, x, opset)


# ---- shapes: scalar, empty, rank 1..4 ----

@pytest.mark.parametrize("shape", [(), (0,), (7,), (2, 0, 3), (1, 2, 3, 4)], ids=ids)
@pytest.mark.parametrize("op", list(FLOAT_OPS))
def test_shapes(op, shape):
    opset, _, (lo, hi) = FLOAT_OPS[op]
    x = random_array(shape, np.float32, np.random.default_rng(2), lo, hi)
    run_unary(op, x, opset)


# ---- NaN, infinities, signed zeros, overflow ranges ----

@pytest.mark.parametrize("dtype", [F32, F16], ids=ids)
@pytest.mark.parametrize("op", list(FLOAT_OPS))
def test_edge_values(op, dtype):
    opset = FLOAT_OPS[op][0]
    with np.errstate(over="ignore"):
        x = EDGE.astype(dtype)
    run_unary(op, x, opset)


def test_exp_near_float_max():
    # MLX's own float32 exp overflows from 88.0; exp(88.72) is still finite.
    x = np.linspace(87.5, 89.0, 301, dtype=np.float32)
    run_unary("Exp", x, 13)


def test_exp_whole_range_against_float64():
    # On MLX's CPU backend Exp is powf(e_f, x) * (1 + delta x) (1.7e-7 relative; MLX's own
    # exp: 3.9e-6 near |x| = 88), subnormal results included, like ORT's.
    import onnxruntime_ep_mlx as mlx_ep
    if mlx_ep.get_ep_devices()[0].ep_metadata["mlx_device"] != "cpu":
        pytest.skip("the powf form is used on MLX's CPU backend only")
    x = np.concatenate([np.linspace(-103, 88.7, 40001), [-87.5, -100.0, 88.72]]).astype(np.float32)
    model = unary_model("Exp", np.float32, x.shape, 13)
    got = run_mlx(model, {"x": x})[0][0]
    tiny = float(np.finfo(np.float32).smallest_subnormal)  # subnormal results: within 2 of their ulps
    np.testing.assert_allclose(got.astype(np.float64), np.exp(x.astype(np.float64)), rtol=1e-6, atol=2 * tiny)
    check_parity(model, {"x": x})


def _ulps_from_float64(got, exact):
    """|got - exact| in units of the float32 spacing at exact (exact: float64 values whose float32
    rounding is finite and nonzero)."""
    spacing = np.spacing(np.abs(exact.astype(np.float32))).astype(np.float64)
    return np.abs(got.astype(np.float64) - exact) / spacing


@pytest.mark.parametrize("op", ["Exp", "Sigmoid", "Tanh"])
def test_unary_primitive_rounded_once(op):
    """On MLX's CPU device float32 Exp, Sigmoid and Tanh are the EP's primitive (src/ops/unary_cpu.cc:
    double precision, rounded once): within 0.501 ulp of the float64 function over float32's whole
    range (enough values to split over threads; tanh's small arguments, where its two forms meet,
    too), and the exact values at the edges (overflow, subnormal results, underflow to 0,
    infinities, NaN, signed zeros). The composed forms elsewhere (ONNXRUNTIME_EP_MLX_UNARY_CPU_KERNEL=0,
    GPUs) are held to their own tolerances by the tests above."""
    import os
    if mlx_device() != "cpu" or os.environ.get("ONNXRUNTIME_EP_MLX_UNARY_CPU_KERNEL") == "0":
        pytest.skip("the primitive is MLX's CPU device's, and on")
    rng = np.random.default_rng(17)
    edges = [0.0, -0.0, 1e-30, -1e-30, 88.72, 88.7228, 88.73, 89.0, -87.33, -103.9, -104.0, -149.0, -150.0,
             1e30, -1e30, np.inf, -np.inf, np.nan, 1e-45, -16.6, 16.6, 17.0, -88.0]
    small = np.concatenate([np.logspace(-40, 0, 4000), -np.logspace(-40, 0, 4000), [0.0625, -0.0625, 0.06249999]])
    x = np.concatenate([rng.uniform(-120, 100, 150000), rng.standard_normal(50000) * 4, small, edges])
    x = x.astype(np.float32)
    model = unary_model(op, np.float32, x.shape, 13)
    got = run_mlx(model, {"x": x})[0][0]
    xd = x.astype(np.float64)
    with np.errstate(over="ignore"):
        exact = {"Exp": np.exp, "Sigmoid": lambda v: 1 / (1 + np.exp(-v)), "Tanh": np.tanh}[op](xd)
        rounded = exact.astype(np.float32)
    normal = np.isfinite(rounded) & (rounded != 0)
    assert _ulps_from_float64(got[normal], exact[normal]).max() < 0.501
    np.testing.assert_array_equal(got[~normal], rounded[~normal])  # inf, 0 and NaN exactly
    assert np.array_equal(np.signbit(got[~np.isnan(got)]), np.signbit(rounded[~np.isnan(rounded)]))
    check_parity(model, {"x": x})


@pytest.mark.parametrize("sigmoid_first", [False, True])
def test_silu_pair(sigmoid_first):
    """SiLU as torch exports it, Mul(x, Sigmoid(x)) (either operand order), the sigmoid also an
    output of its own: on MLX's CPU device the pair is one SiluCpu pass (test_unary_primitive's
    census), which must give exactly x times the sigmoid the EP outputs, rounded in float32."""
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.standard_normal(70000) * 6, [0.0, -0.0, 88.8, -104.0, np.inf, -np.inf, np.nan]])
    x = x.astype(np.float32).reshape(7, -1)
    pair = ["s", "x"] if sigmoid_first else ["x", "s"]
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", pair, ["y"])]
    model = make_graph_model(nodes, [("x", F32, list(x.shape))], [("y", F32, None), ("s", F32, None)])
    (y, s), on_mlx, total = run_mlx(model, {"x": x})
    assert on_mlx == total  # one fused node, on MLX
    with np.errstate(invalid="ignore"):
        if mlx_device() == "cpu":  # SiluCpu's promise; GPUs run MLX's fused kernel
            np.testing.assert_array_equal(y, x * s)
        else:
            assert_close(y, x * s)
    # ORT's CPU sigmoid (MLAS) loses relative accuracy below x = -8 (the sigmoid tests' range too).
    check_parity(model, {"x": np.clip(x, -8, 8)})


@pytest.mark.skipif(mlx_device() != "cpu", reason="the exp/sigmoid primitive is MLX's CPU device's")
def test_unary_primitive():
    """The tests above run through ExpCpu / SigmoidCpu / TanhCpu / ErfCpu on MLX's CPU device (also
    inside the tanh form of Gelu; Gelu's erf form as GeluErfCpu, the composed form's float32 steps
    around the same erf: the same values), and without them (ONNXRUNTIME_EP_MLX_UNARY_CPU_KERNEL=0)
    through the composed forms, which pass them too."""
    from harness import census_with_and_without
    cases = ["test_exp_whole_range_against_float64", "test_float_dtypes[Sigmoid-float32]",
             "test_edge_values[Exp-float32]", "test_edge_values[Sigmoid-float16]",
             "test_edge_values[Tanh-float32]", "test_gelu_wide_range[tanh]",
             "test_erf_whole_range_against_float64", "test_erf_small_arguments", "test_gelu_wide_range[none]",
             "test_silu_pair[False]", "test_silu_pair[True]"]
    names = ("ExpCpu", "SigmoidCpu", "TanhCpu", "ErfCpu", "GeluErfCpu", "SiluCpu")
    kernel, composed = census_with_and_without(__file__, cases, "ONNXRUNTIME_EP_MLX_UNARY_CPU_KERNEL")
    assert sum(any(n in line for n in names) for line in kernel) >= len(cases), kernel
    assert sum("TanhCpu" in line for line in kernel) >= 2, kernel
    assert sum(" ErfCpu" in line for line in kernel) >= 2 and any("GeluErfCpu" in line for line in kernel), kernel
    assert sum("SiluCpu" in line for line in kernel) >= 2, kernel
    assert not any(any(n in line for n in names) for line in composed), composed


def test_erf_small_arguments():
    # Relative accuracy for tiny |x| (MLX's erf only has ~1e-7 absolute accuracy).
    x = np.concatenate([np.logspace(-12, 0.6, 500), -np.logspace(-12, 0.6, 500)]).astype(np.float32)
    model = unary_model("Erf", np.float32, x.shape, 13)
    got = run_mlx(model, {"x": x})[0][0]
    exact = _erf(x.astype(np.float64))
    np.testing.assert_allclose(got.astype(np.float64), exact, rtol=1e-6, atol=0)
    check_parity(model, {"x": x})


def test_erf_whole_range_against_float64():
    # The rational approximation on x clamped to [-4, 4] (1.2e-7 relative where MLX evaluates it
    # in float64, 3.6e-7 in float32), the clamp's edges and arguments far beyond it.
    edges = [3.999, 4.0, 4.001, 10.0, 1e30, np.finfo(np.float32).max]
    x = np.concatenate([np.linspace(-6, 6, 24001), edges, np.negative(edges)]).astype(np.float32)
    model = unary_model("Erf", np.float32, x.shape, 13)
    got = run_mlx(model, {"x": x})[0][0]
    np.testing.assert_allclose(got.astype(np.float64), _erf(x.astype(np.float64)), rtol=1e-6, atol=0)
    check_parity(model, {"x": x})


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_wide_range(approximate):
    x = np.linspace(-12, 12, 2001, dtype=np.float32)
    run_unary("Gelu", x, 20, {"approximate": approximate})


def test_round_half_to_even():
    x = np.array([-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 0.49999997, 4.5000005, 1e7 + 0.5], np.float32)
    run_unary("Round", x, 11)


def test_sign_nan_float16_bfloat16():
    # ORT's float16 (and bfloat16) Sign kernels give 0 for NaN, its float kernel NaN.
    x = np.array([np.nan, 1, -1, 0], np.float16)
    run_unary("Sign", x, 13)
    check_bf16(unary_model("Sign", BF16, (4,), 13), {"x": x.astype(BF16)}, [np.array([0, 1, -1, 0], BF16)])
    run_unary("Sign", x.astype(BF16), 13)


# ---- every registered schema version ----

@pytest.mark.parametrize("op,opset", [(op, v) for op, vs in VERSIONS.items() for v in vs], ids=ids)
def test_versions(op, opset):
    x = random_array((3, 5), np.float32, np.random.default_rng(3), -3, 3)
    if op in ("Log", "Sqrt"):
        x = np.abs(x) + 0.1
    run_unary(op, x, opset)


# ---- attributes ----

@pytest.mark.parametrize("op,attrs,opset", [
    ("LeakyRelu", {"alpha": 0.2}, 16), ("LeakyRelu", {"alpha": -1.5}, 6),
    ("Elu", {"alpha": 0.5}, 22), ("Elu", {"alpha": 2.0}, 6),
    ("Selu", {"alpha": 2.0, "gamma": 3.0}, 22), ("Selu", {"alpha": 1.0}, 6),
    ("HardSigmoid", {"alpha": 0.5, "beta": 0.6}, 22), ("HardSigmoid", {"beta": 0.1}, 6),
    ("Gelu", {"approximate": "tanh"}, 20), ("Gelu", {"approximate": "none"}, 20),
], ids=ids)
@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=ids)
def test_attributes(op, attrs, opset, dtype):
    if dtype == BF16 and opset < 13:
        pytest.skip("bfloat16 is not in this schema version's types")
    x = random_array((4, 6), dtype, np.random.default_rng(4), -4, 4)
    run_unary(op, x, opset, attrs)


# ---- integers ----

def _int_input(dtype, n=40):
    info = np.iinfo(dtype)
    x = random_array((n,), dtype, np.random.default_rng(5), max(info.min, -100), min(info.max, 100))
    x[:3] = [info.min, info.max, 0]
    return x


@pytest.mark.parametrize("dtype", SIGNED + UNSIGNED, ids=ids)
@pytest.mark.parametrize("op", ["Abs", "Sign"])
def test_int_abs_sign(op, dtype):
    x = _int_input(dtype)
    ref = run_cpu(unary_model(op, dtype, x.shape, 13), {"x": x})
    check_parity(unary_model(op, dtype, x.shape, 13), {"x": x}, expected=ref)


@pytest.mark.parametrize("dtype", SIGNED, ids=ids)
def test_int_neg(dtype):
    x = _int_input(dtype)  # includes INT_MIN, which wraps like ORT's
    check_parity(unary_model("Neg", dtype, x.shape, 13), {"x": x})


@pytest.mark.parametrize("dtype", SIGNED, ids=ids)
def test_int_relu(dtype):
    x = _int_input(dtype)
    model = unary_model("Relu", dtype, x.shape, 14)
    ref = cpu_or_none(model, {"x": x}) or [np.maximum(x, 0)]
    check_parity(model, {"x": x}, expected=ref)


# ---- Clip ----

def clip_model(dtype, shape, opset, lo=None, hi=None, as_inputs=False, attrs=None):
    """Clip with min/max as initializers (opset >= 11), graph inputs (as_inputs) or absent."""
    inputs = [("x", dtype, list(shape))]
    inits, feeds_extra = {}, {}
    for name, v in (("min", lo), ("max", hi)):
        if v is None:
            inputs.append(("", dtype, None))
            continue
        inputs.append((name, dtype, []))
        if as_inputs:
            feeds_extra[name] = np.array(v, dtype)
        else:
            inits[name] = np.array(v, dtype)
    while inputs and inputs[-1][0] == "":
        inputs.pop()
    model = make_model("Clip", inputs, [("y", dtype, list(shape))], attrs=attrs, opset=opset,
                       initializers=inits)
    return model, feeds_extra


def clip_expected(x, lo, hi):
    y = x
    if lo is not None:
        y = np.where(np.isnan(y), y, np.maximum(y, np.array(lo, x.dtype)))
    if hi is not None:
        y = np.where(np.isnan(y), y, np.minimum(y, np.array(hi, x.dtype)))
    return y.astype(x.dtype)


CLIP_BOUNDS = [(-1.0, 1.0), (-1.0, None), (None, 0.5), (None, None), (1.0, -1.0)]


@pytest.mark.parametrize("as_inputs", [False, True], ids=["const", "runtime"])
@pytest.mark.parametrize("bounds", CLIP_BOUNDS, ids=lambda b: f"{b[0]}_{b[1]}")
@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=ids)
def test_clip_inputs(dtype, bounds, as_inputs):
    lo, hi = bounds
    x = random_array((3, 4), dtype, np.random.default_rng(6), -2, 2)
    x.flat[0] = np.nan
    model, extra = clip_model(dtype, x.shape, 13, lo, hi, as_inputs)
    feeds = {"x": x, **extra}
    expected = (cpu_bf16_or_none if dtype == BF16 else cpu_or_none)(model, feeds)
    parity(model, feeds, expected or [clip_expected(x, lo, hi)])


@pytest.mark.parametrize("opset", [11, 12, 13])
@pytest.mark.parametrize("shape", [(), (0, 2), (2, 3, 4)], ids=ids)
def test_clip_versions(opset, shape):
    x = random_array(shape, np.float32, np.random.default_rng(7), -2, 2)
    model, _ = clip_model(np.float32, shape, opset, -0.5, 1.0)
    check_parity(model, {"x": x})


@pytest.mark.parametrize("as_inputs", [False, True], ids=["const", "runtime"])
@pytest.mark.parametrize("dtype", SIGNED + UNSIGNED, ids=ids)
def test_clip_int(dtype, as_inputs):
    x = _int_input(dtype)
    lo, hi = (-20, 30) if np.dtype(dtype).kind == "i" else (5, 60)
    model, extra = clip_model(dtype, x.shape, 13, lo, hi, as_inputs)
    feeds = {"x": x, **extra}
    expected = cpu_or_none(model, feeds) or [clip_expected(x, lo, hi)]
    check_parity(model, feeds, expected=expected)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint64], ids=ids)
def test_clip_int_opset12(dtype):
    x = _int_input(dtype)
    model, _ = clip_model(dtype, x.shape, 12, 3, 50)
    check_parity(model, {"x": x})


@pytest.mark.parametrize("attrs", [{}, {"min": -1.0}, {"max": 0.5}, {"min": -0.5, "max": 0.5}], ids=ids)
@pytest.mark.parametrize("dtype", [F32, F16, F64], ids=ids)
def test_clip_attributes_opset6(dtype, attrs):
    x = np.concatenate([EDGE, random_array((20,), np.float64, np.random.default_rng(8), -2, 2)])
    with np.errstate(over="ignore"):
        x = x.astype(dtype)
    model = make_model("Clip", [("x", dtype, [len(x)])], [("y", dtype, [len(x)])], attrs=attrs, opset=6)
    expected = cpu_or_none(model, {"x": x})
    if expected is None:
        lo = np.float32(attrs.get("min", np.finfo(np.float32).min))
        hi = np.float32(attrs.get("max", np.finfo(np.float32).max))
        expected = [clip_expected(x, lo.astype(dtype), hi.astype(dtype))]
    check_parity(model, {"x": x}, expected=expected)


CLIP_BOUNDS = [(0.0, 6.0), (-0.0, 0.0), (0.0, -0.0), (-1.0, np.nan), (np.nan, 1.0), (-np.inf, 0.5), (3.0, -3.0)]


# Clip-6's attributes: ORT rejects min > max and NaN bounds at session creation.
@pytest.mark.parametrize("opset,bounds", [(13, b) for b in CLIP_BOUNDS] + [(6, b) for b in CLIP_BOUNDS if b[0] <= b[1]],
                         ids=ids)
def test_clip_constant_bounds_bit_for_bit(opset, bounds):
    """Constant bounds clamp with MLX's maximum / minimum (unary.cc, where the bound is not NaN):
    ORT's values bit for bit, signed zeros included (-0 stays -0 against a bound of +0), a NaN x
    stays NaN, a NaN bound clamps nothing, min > max gives max."""
    lo, hi = bounds
    x = np.concatenate([EDGE, [-0.0, 0.0, 6.0, -6.0, 7.0]]).astype(np.float32)
    if opset == 6:
        attrs = {"min": lo, "max": hi}
        model = make_model("Clip", [("x", np.float32, [len(x)])], [("y", np.float32, [len(x)])], attrs=attrs, opset=6)
    else:
        model, _ = clip_model(np.float32, x.shape, 13, lo, hi)
    got = check_parity(model, {"x": x})[0]
    want = run_cpu(model, {"x": x})[0]
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (x, got, want)


def test_clip_constant_bounds_are_one_primitive_each():
    """Constant bounds take one Maximum and one Minimum, no Less + Select pairs: a hard-swish
    chain (PP-OCRv4's, x * clip(x + 3, 0, 6) / 6 after an affine block) then stays within MLX's
    fusion depth and runs as one contiguous kernel (22.1 -> 17.7 ms for the recognizer here)."""
    import sys
    if sys.platform == "darwin":
        pytest.skip("Apple's vectorized CPU max keeps the Select there (unary.cc)")
    from harness import census_of_tests
    census, _ = census_of_tests(__file__, ["test_clip_constant_bounds_bit_for_bit[13-0.0x6.0]"])
    assert len(census) == 1 and "Maximum" in census[0] and "Minimum" in census[0], census
    assert "Select" not in census[0] and "Less" not in census[0], census


def test_clip_bounds_computed_in_partition():
    # min/max produced by other MLX nodes (traced values, not host values); min has shape [1].
    nodes = [helper.make_node("Neg", ["b"], ["lo"]), helper.make_node("Abs", ["b"], ["hi"]),
             helper.make_node("Clip", ["x", "lo", "hi"], ["y"])]
    model = make_graph_model(nodes, [("x", np.float32, [2, 5]), ("b", np.float32, [1])], [("y", np.float32, [2, 5])],
                             opset=13)
    x = random_array((2, 5), np.float32, np.random.default_rng(11))
    for b in (0.5, -2.0):
        check_parity(model, {"x": x, "b": np.array([b], np.float32)})


# ---- a chain of unary ops fused into one partition ----

def test_chain_fused():
    ops = [("Abs", {}), ("Sqrt", {}), ("Exp", {}), ("Log", {}), ("Tanh", {}), ("Gelu", {}),
           ("Clip", {}), ("HardSwish", {}), ("Softplus", {}), ("Erf", {}), ("Neg", {}), ("Sign", {})]
    nodes, prev = [], "x"
    for i, (op, attrs) in enumerate(ops):
        out = "y" if i == len(ops) - 1 else f"t{i}"
        inputs = [prev, "lo", "hi"] if op == "Clip" else [prev]
        nodes.append(helper.make_node(op, inputs, [out], **attrs))
        prev = out
    model = make_graph_model(nodes, [("x", np.float32, [4, 5])], [("y", np.float32, [4, 5])],
                             {"lo": np.array(0.2, np.float32), "hi": np.array(1.5, np.float32)}, opset=20)
    x = random_array((4, 5), np.float32, np.random.default_rng(9))
    check_parity(model, {"x": x})


# ---- declined nodes fall back to the CPU EP ----

@pytest.mark.parametrize("op", ["Sin", "Cos"])
def test_float64_sin_cos_declined(op):
    # MLX's CPU sin/cos are float32 approximations: float64 is left to ORT.
    x = random_array((3, 4), np.float64, np.random.default_rng(10), -5, 5)
    model = unary_model(op, np.float64, x.shape, 7)
    got, mlx, total = run_mlx(model, {"x": x})
    assert mlx == 0 and total == 1
    assert_close(got[0], run_cpu(model, {"x": x})[0])


def test_float64_declined_in_chain():
    # Exp(float64) on MLX (when the device has float64), Sin(float64) on CPU: still correct.
    nodes = [helper.make_node("Exp", ["x"], ["t"]), helper.make_node("Sin", ["t"], ["y"])]
    model = make_graph_model(nodes, [("x", np.float64, [6])], [("y", np.float64, [6])], opset=13)
    x = np.linspace(-2, 2, 6)
    got, mlx, total = run_mlx(model, {"x": x})
    assert total == 2 and mlx == (1 if float64_on_mlx() else 0)
    assert_close(got[0], np.sin(np.exp(x)))
