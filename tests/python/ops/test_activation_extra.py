"""Parity of the extra activations (src/ops/activation_extra.cc): PRelu, ThresholdedRelu, Celu, Mish,
Shrink, Hardmax, Dropout, against ORT's CPU EP (where ORT has no kernel for a type: its float32
result, rounded, or a numpy reference)."""
import numpy as np
import pytest

from harness import (NO_KERNEL, BF16, assert_close, assert_declined, check_parity, float64_on_mlx, ids, make_model,
                     random_array, run_cpu, run_mlx)
from harness_bf16 import check_bf16, check_parity_via_float32

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)


def unary_model(op, x, opset, **attrs):
    """(model, feeds) of one `op` node on input x (output typed like x)."""
    return make_model(op, [("x", x.dtype, list(x.shape))], [("y", x.dtype, None)], attrs, opset), {"x": x}


def check_via_float32(build, x, dtype):
    """float16/bfloat16 parity with ORT's float32 result on the rounded input (ORT has no kernel)."""
    xr = x.astype(dtype).astype(np.float32)
    if np.dtype(dtype) == F16:
        return check_parity_via_float32(build(xr.astype(F16))[0], {"x": xr.astype(F16)}, np.float16)
    return check_bf16(build(xr.astype(BF16))[0], {"x": xr}, run_cpu(*build(xr)))


def check_numpy(model, feeds, expected):
    """Parity with a numpy result where ORT's CPU EP has no kernel (float64 needs MLX's CPU device)."""
    if any(v.dtype == F64 for v in feeds.values()) and not float64_on_mlx():
        pytest.skip("float64 runs on MLX's CPU device only")
    got, mlx, total = run_mlx(model, feeds)
    assert mlx == total == 1, f"{mlx}/{total} nodes ran on MLX"
    assert_close(got[0], expected)


# Inputs with the edges of the activations: 0, +-tiny, large magnitudes, and an odd size.
def edge_values(dtype=np.float32):
    x = np.concatenate([random_array((37,), np.float32, np.random.default_rng(1), -6, 6),
                        np.array([0.0, -0.0, 1e-6, -1e-6, 1.0, -1.0, 20.0, -20.0, 60.0, -60.0, 1e4, -1e4])])
    return x.astype(dtype).reshape(7, 7)


# ---- PRelu -------------------------------------------------------------------------------------

def prelu_model(x, slope, opset, constant=False):
    inputs = [("x", x.dtype, list(x.shape)), ("slope", slope.dtype, list(slope.shape))]
    inits = {"slope": slope} if constant else None
    model = make_model("PRelu", inputs, [("y", x.dtype, None)], {}, opset, inits)
    return model, ({"x": x} if constant else {"x": x, "slope": slope})


PRELU_SHAPES = [((3, 4, 5), (5,)), ((3, 4, 5), (4, 1)), ((3, 4, 5), (1,)), ((3, 4, 5), ()), ((3, 4, 5), (3, 4, 5)),
                ((2, 3, 4, 5), (3, 1, 1)), ((2, 7), (7,)), ((2, 3, 1, 4, 2), (1, 4, 1)), ((0, 3), (3,))]


@pytest.mark.parametrize("constant", [False, True], ids=["runtime", "constant"])
@pytest.mark.parametrize("opset", [7, 9, 16])
@pytest.mark.parametrize("xs,ss", PRELU_SHAPES, ids=[f"{ids(a)}-{ids(b)}" for a, b in PRELU_SHAPES])
def test_prelu_float32(xs, ss, opset, constant):
    rng = np.random.default_rng(0)
    x, slope = random_array(xs, np.float32, rng), random_array(ss, np.float32, rng, -2, 2)
    check_parity(*prelu_model(x, slope, opset, constant))


@pytest.mark.parametrize("opset", [9, 16])
def test_prelu_float16(opset):
    x, slope = random_array((3, 4, 5), F16), random_array((4, 1), F16, low=-2, high=2)
    check_parity(*prelu_model(x, slope, opset))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32], ids=ids)
def test_prelu_integers(dtype):
    """Opset 16: ORT runs the function body (Less, Mul, Where); products wrap."""
    x = random_array((3, 4), dtype, low=-50, high=50)
    slope = random_array((4,), dtype, low=-3, high=3)
    if np.dtype(dtype) == np.int32:
        x[0, 0], slope[0] = -(2 ** 30), 3  # wraps
    check_parity(*prelu_model(x, slope, 16))


@pytest.mark.parametrize("dtype,opset", [(F64, 9), (np.dtype(np.uint64), 16), (np.dtype(np.int64), 9)],
                         ids=["float64-9", "uint64-16", "int64-9"])
def test_prelu_no_ort_kernel(dtype, opset):
    x = random_array((3, 4), dtype, low=-5, high=5)
    slope = random_array((4,), dtype, low=0, high=3)
    expected = np.where(x < 0, slope * x, x).astype(dtype)
    check_numpy(*prelu_model(x, slope, opset), expected)


def test_prelu_bf16():
    x, slope = random_array((3, 4, 5), np.float32), random_array((5,), np.float32, low=-2, high=2)
    xr, sr = x.astype(BF16).astype(np.float32), slope.astype(BF16).astype(np.float32)
    ref = run_cpu(*prelu_model(xr, sr, 16))
    check_bf16(prelu_model(xr.astype(BF16), sr.astype(BF16), 16)[0], {"x": xr, "slope": sr}, ref)


def test_prelu_multidirectional_declined():
    """ORT's kernel broadcasts X too ((1, 5) with slope (4, 5) gives (4, 5)); the spec's unidirectional
    broadcast does not allow it, so the EP declines."""
    rng = np.random.default_rng(2)
    assert_declined(*prelu_model(random_array((1, 5), np.float32, rng), random_array((4, 5), np.float32, rng), 16))


# ---- ThresholdedRelu, Celu, Mish ---------------------------------------------------------------

@pytest.mark.parametrize("alpha", [1.0, 0.0, -1.5, 2.3])
@pytest.mark.parametrize("opset", [10, 22])
@pytest.mark.parametrize("dtype", [F32, F16], ids=ids)
def test_thresholded_relu(dtype, opset, alpha):
    check_parity(*unary_model("ThresholdedRelu", edge_values(dtype), opset, alpha=alpha))


def test_thresholded_relu_float16_compares_in_float32():
    """alpha 1.0996 lies between float16 neighbours: ORT compares the float-cast input with the float alpha."""
    x = np.array([1.0996094, 1.0986328, 1.1005859, 2.0, -3.0], np.float16)
    got = check_parity(*unary_model("ThresholdedRelu", x, 10, alpha=1.0996))
    assert got[0][0] == x[0]  # a float16 comparison (alpha rounded to 1.0996094) would give 0


def test_thresholded_relu_float64_and_bf16():
    x = edge_values(np.float64)
    check_numpy(*unary_model("ThresholdedRelu", x, 22, alpha=0.5), np.where(x > 0.5, x, 0))
    check_via_float32(lambda v: unary_model("ThresholdedRelu", v, 22, alpha=0.5), edge_values(), BF16)


@pytest.mark.parametrize("alpha", [1.0, 0.5, 2.0, 3.7])
def test_celu(alpha):
    check_parity(*unary_model("Celu", edge_values(), 12, alpha=alpha))


@pytest.mark.parametrize("opset", [18, 22])
@pytest.mark.parametrize("dtype", [F32, F16], ids=ids)
def test_mish(dtype, opset):
    check_parity(*unary_model("Mish", edge_values(dtype), opset))


def test_mish_wide_range():
    """float32 over [-100, 100]: the softplus neither overflows nor loses the tiny values."""
    x = np.linspace(-100, 100, 4001, dtype=np.float32).reshape(1, -1)
    check_parity(*unary_model("Mish", x, 18))


def test_mish_float64_and_bf16():
    check_parity(*unary_model("Mish", edge_values(np.float64), 18))  # ORT: the function body in double
    check_via_float32(lambda v: unary_model("Mish", v, 22), edge_values(), BF16)


# ---- Shrink ------------------------------------------------------------------------------------

SHRINK_ATTRS = [{}, {"lambd": 1.5, "bias": 0.7}, {"lambd": 0.0, "bias": 0.0}, {"lambd": 2.0, "bias": -1.0}]


@pytest.mark.parametrize("attrs", SHRINK_ATTRS, ids=ids)
@pytest.mark.parametrize("dtype", [F32, F16, F64], ids=ids)
def test_shrink_floats(dtype, attrs):
    check_parity(*unary_model("Shrink", edge_values(dtype), 9, **attrs))


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64],
                         ids=ids)
def test_shrink_integers(dtype):
    """ORT computes in float and truncates back; unsigned inputs keep bias below lambd (no negative results)."""
    signed = np.dtype(dtype).kind == "i"
    x = random_array((5, 9), dtype, low=-100 if signed else 0, high=100)
    check_parity(*unary_model("Shrink", x, 9, lambd=1.5, bias=0.7 if signed else 1.2))


def test_shrink_float64_goes_through_float32():
    """ORT's kernel computes double in float32 too (1e300 -> inf, 0.5 + 1e-12 is not above lambd 0.5)."""
    x = np.array([1.0 + 1e-12, -1.0 - 1e-12, 0.5 + 1e-12, 1e300, -1e300, 3.3], np.float64)
    got = check_parity(*unary_model("Shrink", x, 9, lambd=0.5, bias=0.1))
    assert got[0][2] == 0 and np.isinf(got[0][3])


def test_shrink_int32_beyond_float_precision():
    """Values past 2^24 go through float, as in ORT (16777217 - 0.7 gives 16777215)."""
    x = np.array([16777217, -16777219, 2 ** 30 + 1, 3, -3], np.int32)
    check_parity(*unary_model("Shrink", x, 9, lambd=1.5, bias=0.7))


# ---- Hardmax -----------------------------------------------------------------------------------

def hardmax_reference(x, axis, legacy):
    """1 at the first maximum (numpy argmax takes the first)."""
    shape = x.shape
    if x.size == 0:
        return np.zeros_like(x)
    if legacy:
        axis = axis % x.ndim
        x = x.reshape(int(np.prod(shape[:axis])), -1)
        axis = 1
    idx = np.expand_dims(np.argmax(x, axis=axis), axis)
    y = np.zeros_like(x)
    np.put_along_axis(y, idx, 1, axis=axis)
    return y.reshape(shape)


HARDMAX_CASES = [((3, 4, 5), 0), ((3, 4, 5), 1), ((3, 4, 5), 2), ((3, 4, 5), -1), ((2, 3), None), ((7,), 0),
                 ((2, 3, 2, 3, 2), -2), ((0, 3), 1)]


@pytest.mark.parametrize("opset", [1, 11, 13])
@pytest.mark.parametrize("shape,axis", HARDMAX_CASES, ids=[f"{ids(s)}-axis{a}" for s, a in HARDMAX_CASES])
def test_hardmax_float32(shape, axis, opset):
    if opset == 1 and axis is not None and axis < 0:
        pytest.skip("negative axis needs opset 11")
    attrs = {} if axis is None else {"axis": axis}
    x = random_array(shape, np.int8, low=-3, high=3).astype(np.float32)  # many ties: the first one wins
    got = check_parity(*unary_model("Hardmax", x, opset, **attrs))
    legacy = opset < 13
    np.testing.assert_array_equal(got[0], hardmax_reference(x, (1 if legacy else -1) if axis is None else axis, legacy))


def test_hardmax_special_rows():
    x = np.array([[-np.inf] * 4, [np.inf, 1, np.inf, 0], [2, 2, 2, 2], [-1, -1, 5, 5]], np.float32)
    check_parity(*unary_model("Hardmax", x, 13))


@pytest.mark.parametrize("opset", [11, 13])
def test_hardmax_float16(opset):
    check_parity(*unary_model("Hardmax", random_array((3, 4, 5), F16), opset, axis=1))


@pytest.mark.parametrize("dtype,opset", [(F16, 1), (BF16, 13)], ids=["float16-1", "bfloat16-13"])
def test_hardmax_low_precision(dtype, opset):
    check_via_float32(lambda v: unary_model("Hardmax", v, opset), random_array((3, 4, 5), np.float32), dtype)


def test_hardmax_float64():
    x = random_array((3, 4, 5), np.float64)
    check_numpy(*unary_model("Hardmax", x, 13, axis=1), hardmax_reference(x, 1, False))


# ---- Dropout -----------------------------------------------------------------------------------

def dropout_model(x, opset, ratio=None, training=None, constant=True, mask=False, **attrs):
    """Dropout with optional ratio / training_mode inputs (initializers with `constant`)."""
    inputs, feeds, inits = [("x", x.dtype, list(x.shape))], {"x": x}, {}
    for name, value in (("ratio", ratio), ("training_mode", training)):
        if value is None:
            inputs.append(("", None, None))
            continue
        value = np.asarray(value)
        inputs.append((name, value.dtype, list(value.shape)))
        (inits if constant else feeds)[name] = value
    while inputs[-1][0] == "":
        inputs.pop()
    outputs = [("y", x.dtype, None)] + ([("mask", np.bool_ if opset >= 10 else x.dtype, None)] if mask else [])
    return make_model("Dropout", inputs, outputs, attrs, opset, inits), feeds


@pytest.mark.parametrize("dtype", [F32, F16, F64], ids=ids)
@pytest.mark.parametrize("opset", [7, 10])
def test_dropout_legacy(opset, dtype):
    x = random_array((3, 5), dtype)
    got = check_parity(*dropout_model(x, opset))
    np.testing.assert_array_equal(got[0], x)


DROPOUT_INPUTS = [
    # (ratio, training_mode, constant)
    (None, None, True),
    (np.float32(0.3), None, True),
    (np.float32(0.3), None, False),
    (np.float64(0.7), np.bool_(False), True),
    (None, np.bool_(False), True),
    (np.float32(0.0), np.bool_(True), True),  # training with ratio 0 keeps everything
]


@pytest.mark.parametrize("mask", [False, True], ids=["y", "y+mask"])
@pytest.mark.parametrize("opset", [12, 13, 22])
@pytest.mark.parametrize("ratio,training,constant", DROPOUT_INPUTS,
                         ids=["default", "ratio", "runtime_ratio", "ratio64_not_training", "not_training",
                              "training_ratio0"])
def test_dropout(ratio, training, constant, opset, mask):
    x = random_array((2, 3, 5), np.float32)
    got = check_parity(*dropout_model(x, opset, ratio, training, constant, mask))
    np.testing.assert_array_equal(got[0], x)
    if mask:
        assert got[1].dtype == np.bool_ and got[1].all()


@pytest.mark.parametrize("dtype", [F16, F64], ids=ids)
def test_dropout_other_floats(dtype):
    check_parity(*dropout_model(random_array((4, 3), dtype), 13, np.float32(0.5), mask=True))


def test_dropout_bf16():
    x = random_array((4, 3), np.float32).astype(BF16)
    check_parity_via_float32(*dropout_model(x, 13), dtype=BF16)


def test_dropout_opset6_is_test():
    """Opset 6 in test mode is the identity (ORT has no opset-6 kernel)."""
    x = random_array((3, 4), np.float32)
    got, mlx, total = run_mlx(*dropout_model(x, 6, is_test=1))
    assert mlx == total == 1
    np.testing.assert_array_equal(got[0], x)


@pytest.mark.parametrize("opset", [7, 10])
def test_dropout_legacy_mask_declined(opset):
    """ORT writes an all-false mask for opsets 7-11 (the ONNX reference an all-true one): declined."""
    assert_declined(*dropout_model(random_array((3, 4), np.float32), opset, mask=True))


@pytest.mark.parametrize("ratio,training,constant", [
    (np.float32(0.5), np.bool_(False), False),  # training_mode fed at run time
    (np.float32(0.5), np.bool_(True), True),    # random dropout (seeded, so CPU runs agree)
    (None, np.bool_(True), True),
], ids=["runtime_training_mode", "training", "training_default_ratio"])
def test_dropout_training_declined(ratio, training, constant):
    assert_declined(*dropout_model(random_array((3, 4), np.float32), 13, ratio, training, constant, seed=7))


def test_dropout_opset6_training_declined():
    with pytest.raises(Exception, match=NO_KERNEL):
        run_mlx(*dropout_model(random_array((3, 4), np.float32), 6))
