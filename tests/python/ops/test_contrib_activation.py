"""Parity of ORT's contrib activations (src/ops/activation_contrib.cc): com.microsoft Gelu, BiasGelu,
FastGelu, QuickGelu against ORT's CPU EP; BiasAdd and BiasSplitGelu (ORT has CUDA kernels only)
against numpy in float64."""
import math

import numpy as np
import pytest

from harness import BF16, assert_close, assert_mlx_error, check_parity, ids, random_array, run_cpu, \
    mlx_device, run_mlx
from harness_bf16 import check_bf16
from test_contrib_normalization import contrib_model, retyped

erf = np.vectorize(math.erf)


def gelu_case(op, shape, bias=False, dtype=np.float32, attrs=None, seed=0):
    """(model, float32 feeds) of one activation node; bfloat16 models are built as float32 (see parity)."""
    t = np.float32 if dtype == BF16 else dtype
    inputs = [("x", t, shape)] + ([("bias", t, (shape[-1],))] if bias else [])
    rng = np.random.default_rng(seed)
    feeds = {"x": random_array(shape, np.float32, rng, -6, 6)}
    if bias:
        feeds["bias"] = random_array((shape[-1],), np.float32, rng, -1, 1)
    return contrib_model(op, inputs, [("y", t)], attrs), feeds


def parity(model, feeds, dtype):
    """check_parity on `feeds` cast to `dtype`; bfloat16 against ORT's float32 result, rounded."""
    if np.dtype(dtype) != BF16:
        return check_parity(model, {k: v.astype(dtype) for k, v in feeds.items()})
    f32 = {k: v.astype(BF16).astype(np.float32) for k, v in feeds.items()}
    return check_bf16(retyped(model, BF16), f32, run_cpu(model, f32))


OPS = [("Gelu", False), ("BiasGelu", True), ("FastGelu", False), ("FastGelu", True), ("QuickGelu", False)]
OP_IDS = ["Gelu", "BiasGelu", "FastGelu", "FastGelu-bias", "QuickGelu"]
SHAPES = [(2, 3, 8), (5, 33), (4097,), (1, 1), (0, 4)]


@pytest.mark.parametrize("shape", SHAPES, ids=ids)
@pytest.mark.parametrize("op,bias", OPS, ids=OP_IDS)
def test_float32(op, bias, shape):
    parity(*gelu_case(op, shape, bias), np.float32)


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=ids)
@pytest.mark.parametrize("op,bias", OPS, ids=OP_IDS)
def test_low_precision(op, bias, dtype):
    """ORT runs float16 in float32 (Casts around the float32 kernel, or the float32 function body);
    MLX computes float16/bfloat16 in float32 and rounds once."""
    parity(*gelu_case(op, (3, 4, 40), bias, dtype), dtype)


def test_gelu_special_values():
    x = np.array([[0.0, -0.0, 1e-30, -1e-30, 1e-8, 30.0, -30.0, np.inf, -np.inf, np.nan]], np.float32)
    for op in ["Gelu", "FastGelu", "QuickGelu"]:
        model, _ = gelu_case(op, x.shape)
        check_parity(model, {"x": x})


@pytest.mark.parametrize("alpha", [1.0, 1.702, -0.5, 0.0])
def test_quick_gelu_alpha(alpha):
    parity(*gelu_case("QuickGelu", (3, 17), attrs={"alpha": alpha}), np.float32)


@pytest.mark.skipif(mlx_device() != "cpu", reason="the sigmoid primitives are MLX's CPU device's")
def test_quick_gelu_primitives():
    """On MLX's CPU device QuickGelu's sigmoid is SigmoidCpu, and with alpha 1 (SiLU) the product
    too (SiluCpu); without the primitives (ONNXRUNTIME_EP_MLX_UNARY_CPU_KERNEL=0) neither."""
    from harness import census_with_and_without
    kernel, composed = census_with_and_without(
        __file__, ["test_quick_gelu_alpha[1.0]", "test_quick_gelu_alpha[1.702]"], "ONNXRUNTIME_EP_MLX_UNARY_CPU_KERNEL")
    assert any("SiluCpu" in line for line in kernel) and any("SigmoidCpu" in line for line in kernel), kernel
    assert not any("SiluCpu" in line or "SigmoidCpu" in line for line in composed), composed


@pytest.mark.parametrize("op", ["FastGelu", "QuickGelu"])
def test_float64_runs_as_function_body(op):
    """ORT's CPU EP has float32 kernels only: float64 FastGelu/QuickGelu are declined, ORT expands
    their function bodies, and MLX runs those nodes (Mul, Tanh, Sigmoid, ...) like ORT's CPU EP."""
    model, feeds = gelu_case(op, (3, 5), dtype=np.float64)
    check_parity(model, {k: v.astype(np.float64) for k, v in feeds.items()})


def test_float64_gelu_declined():
    """float64 Gelu: no ORT kernel and its function body needs a float64 Erf (declined on MLX as well):
    ORT errors with or without MLX."""
    model, feeds = gelu_case("Gelu", (3, 5), dtype=np.float64)
    assert_mlx_error(model, {k: v.astype(np.float64) for k, v in feeds.items()})


def test_bias_shape_mismatch_errors():
    """A bias that is not X's last dim: ORT errors, and so does the MLX translation."""
    model, feeds = gelu_case("BiasGelu", (3, 5), bias=True)
    model.graph.input[1].type.tensor_type.shape.dim[0].dim_value = 4
    feeds["bias"] = np.ones(4, np.float32)
    assert_mlx_error(model, feeds)


# ---- BiasAdd, BiasSplitGelu: CUDA-only in ORT, compared with numpy ------------------------------

def run_and_compare(model, feeds, expected, dtype):
    got, mlx, total = run_mlx(model, feeds)
    assert total > 0 and mlx == total, f"only {mlx}/{total} nodes ran on MLX"
    assert_close(got[0], expected.astype(dtype), what="y")


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=ids)
@pytest.mark.parametrize("shape", [(2, 4, 320), (1, 3, 7)], ids=ids)
def test_bias_add(shape, dtype):
    rng = np.random.default_rng(1)
    x, skip = random_array(shape, dtype, rng), random_array(shape, dtype, rng)
    bias = random_array((shape[-1],), dtype, rng)
    model = contrib_model("BiasAdd", [("x", dtype, shape), ("bias", dtype, (shape[-1],)), ("skip", dtype, shape)],
                          [("y", dtype)])
    expected = x.astype(np.float64) + bias.astype(np.float64) + skip.astype(np.float64)
    run_and_compare(model, {"x": x, "bias": bias, "skip": skip}, expected, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=ids)
@pytest.mark.parametrize("shape", [(2, 4, 640), (1, 3, 10)], ids=ids)
def test_bias_split_gelu(shape, dtype):
    rng = np.random.default_rng(2)
    x, bias = random_array(shape, dtype, rng), random_array((shape[-1],), dtype, rng)
    model = contrib_model("BiasSplitGelu", [("x", dtype, shape), ("bias", dtype, (shape[-1],))], [("y", dtype)])
    v = x.astype(np.float64) + bias.astype(np.float64)
    left, right = np.split(v, 2, axis=-1)
    expected = left * (0.5 * right * (1 + erf(right / np.sqrt(2))))
    run_and_compare(model, {"x": x, "bias": bias}, expected, dtype)


def test_bias_split_gelu_odd_width_errors():
    model = contrib_model("BiasSplitGelu", [("x", np.float32, (1, 2, 5)), ("bias", np.float32, (5,))],
                          [("y", np.float32)])
    with pytest.raises(Exception):
        run_mlx(model, {"x": np.ones((1, 2, 5), np.float32), "bias": np.ones(5, np.float32)})
