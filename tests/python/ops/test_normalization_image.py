"""Parity of the image normalization family (src/ops/normalization_image.cc): BatchNormalization,
InstanceNormalization, GroupNormalization, LpNormalization, LRN, MeanVarianceNormalization, against
ORT's CPU EP (float16 where ORT lacks it and bfloat16: against ORT's float32 result, rounded)."""
import os
import tempfile

import numpy as np
import onnx
import pytest

from harness import (NO_KERNEL, BF16, assert_close, assert_close_to_scale, assert_declined, check_parity,
                     float64_on_mlx, ids, make_model, mlx_device, random_array, run_cpu, run_mlx)
from harness_bf16 import check_bf16, check_parity_via_float32

import onnxruntime_ep_mlx as mlx_ep

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)


def rounded(feeds, dtype):
    """`feeds` rounded to `dtype` and back to float32 (the float32 reference's inputs)."""
    return {k: v.astype(dtype).astype(np.float32) for k, v in feeds.items()}


def check_low_precision(build, feeds, dtype):
    """Parity of a float16/bfloat16 model (`build(dtype)`) with ORT's float32 result on the same
    (rounded) inputs: ORT's CPU EP has no kernel for these types here."""
    f32 = rounded(feeds, dtype)
    if np.dtype(dtype) == F16:
        return check_parity_via_float32(build(F16), {k: v.astype(F16) for k, v in f32.items()}, np.float16)
    return check_bf16(build(BF16), f32, run_cpu(build(F32), f32))


def one_node(op, inputs, attrs, opset, initializers=None, outputs=("y",)):
    """A one-node model; `inputs` are (name, dtype, shape) triples; outputs have X's type (shape
    inference cannot type some of these function ops)."""
    return make_model(op, inputs, [(o, inputs[0][1], None) for o in outputs], attrs, opset, initializers)


# ---- BatchNormalization ------------------------------------------------------------------------

def bn_case(shape, x_dtype=F32, scale_dtype=None, stat_dtype=None, seed=0):
    """Feeds for X and per-channel scale/B/mean/var (var > 0)."""
    rng = np.random.default_rng(seed)
    c = shape[1]
    scale_dtype, stat_dtype = scale_dtype or x_dtype, stat_dtype or x_dtype
    return {"x": random_array(shape, np.float32, rng).astype(x_dtype),
            "scale": rng.uniform(0.5, 1.5, c).astype(scale_dtype),
            "b": rng.uniform(-1, 1, c).astype(scale_dtype),
            "mean": rng.uniform(-1, 1, c).astype(stat_dtype),
            "var": rng.uniform(0.2, 2.0, c).astype(stat_dtype)}


def bn_model(feeds, opset, constant=False, attrs=None, outputs=("y",)):
    """BatchNormalization over `feeds`; with `constant` the parameters are initializers."""
    names = ["x", "scale", "b", "mean", "var"]
    inputs = [(n, feeds[n].dtype, list(feeds[n].shape)) for n in names]
    inits = {n: feeds[n] for n in names[1:]} if constant else None
    model = one_node("BatchNormalization", inputs, attrs or {}, opset, inits, outputs)
    return model, ({"x": feeds["x"]} if constant else feeds)


BN_SHAPES = [(3, 5), (2, 3, 7), (2, 3, 5, 4), (1, 2, 3, 4, 5), (0, 3, 4)]


@pytest.mark.parametrize("constant", [False, True], ids=["runtime", "constant"])
@pytest.mark.parametrize("opset", [7, 9, 14, 15])
@pytest.mark.parametrize("shape", BN_SHAPES, ids=ids)
def test_batchnorm_float32(shape, opset, constant):
    check_parity(*bn_model(bn_case(shape), opset, constant))


@pytest.mark.parametrize("epsilon", [1e-12, 1e-3, 0.5])
def test_batchnorm_epsilon(epsilon):
    feeds = bn_case((2, 4, 3, 3))
    feeds["var"] = np.array([0.0, 1e-6, 1e-3, 1.0], np.float32)
    check_parity(*bn_model(feeds, 15, attrs={"epsilon": epsilon}))


@pytest.mark.parametrize("dtypes", [(F16, F16, F16), (F16, F32, F32), (F16, F16, F32), (F32, F16, F16),
                                    (F64, F64, F64)], ids=lambda d: "-".join(np.dtype(t).name for t in d))
def test_batchnorm_mixed_types(dtypes):
    """Opset 15 lets X, scale/B and mean/var have three types; ORT computes in float32 (float64)."""
    check_parity(*bn_model(bn_case((2, 3, 4, 5), *dtypes), 15))


@pytest.mark.parametrize("opset", [7, 14])
def test_batchnorm_float16(opset):
    check_parity(*bn_model(bn_case((2, 3, 4, 5), F16), opset))


def test_batchnorm_bf16():
    f32 = rounded(bn_case((2, 3, 4, 5)), BF16)
    ref = run_cpu(*bn_model(f32, 15))
    check_bf16(bn_model({k: v.astype(BF16) for k, v in f32.items()}, 15)[0], f32, ref)


def test_batchnorm_opset6_is_test():
    """Opset 6 in test mode (ORT has no opset-6 kernel): the opset-7 result."""
    feeds = bn_case((2, 3, 4))
    expected = run_cpu(*bn_model(feeds, 7))
    check_parity(*bn_model(feeds, 6, attrs={"is_test": 1}), expected=expected)


def test_batchnorm_not_spatial():
    """spatial=0 (opsets 6-8): one statistic per (C, D1, ...) element."""
    rng = np.random.default_rng(3)
    shape = (2, 3, 4)
    feeds = {"x": random_array(shape, np.float32, rng), "scale": rng.uniform(0.5, 1.5, (3, 4)).astype(np.float32),
             "b": rng.uniform(-1, 1, (3, 4)).astype(np.float32), "mean": rng.uniform(-1, 1, (3, 4)).astype(np.float32),
             "var": rng.uniform(0.2, 2, (3, 4)).astype(np.float32)}
    check_parity(*bn_model(feeds, 7, attrs={"spatial": 0}))


@pytest.mark.parametrize("opset,attrs,outputs", [
    (15, {"training_mode": 1}, ("y", "running_mean", "running_var")),
    (14, {"training_mode": 1}, ("y", "running_mean", "running_var")),
    (9, {}, ("y", "running_mean", "running_var", "saved_mean", "saved_var")),
], ids=["training_mode15", "training_mode14", "opset9_training_outputs"])
def test_batchnorm_training_declined(opset, attrs, outputs):
    assert_declined(*bn_model(bn_case((4, 3, 5)), opset, attrs=attrs, outputs=outputs))


def test_batchnorm_opset6_training_declined():
    """is_test=0 is training mode: declined, and ORT has no opset-6 kernel to fall back to."""
    with pytest.raises(Exception, match=NO_KERNEL):
        run_mlx(*bn_model(bn_case((2, 3, 4)), 6))


# ---- InstanceNormalization ---------------------------------------------------------------------

def in_case(shape, dtype=F32, mean=0.0, seed=0):
    rng = np.random.default_rng(seed)
    c = shape[1]
    return {"x": (random_array(shape, np.float32, rng) + mean).astype(dtype),
            "scale": rng.uniform(0.5, 1.5, c).astype(dtype), "b": rng.uniform(-1, 1, c).astype(dtype)}


def in_model(feeds, opset=22, constant=False, attrs=None):
    inputs = [(n, feeds[n].dtype, list(feeds[n].shape)) for n in ("x", "scale", "b")]
    inits = {n: feeds[n] for n in ("scale", "b")} if constant else None
    model = one_node("InstanceNormalization", inputs, attrs or {}, opset, inits)
    return model, ({"x": feeds["x"]} if constant else feeds)


@pytest.mark.parametrize("constant", [False, True], ids=["runtime", "constant"])
@pytest.mark.parametrize("opset", [6, 22])
@pytest.mark.parametrize("shape", [(2, 3, 7), (1, 4, 5, 3), (2, 2, 3, 4, 5), (3, 5, 1), (2, 3, 33, 40), (0, 3, 4)],
                         ids=ids)
def test_instancenorm_float32(shape, opset, constant):
    check_parity(*in_model(in_case(shape), opset, constant))


@pytest.mark.parametrize("epsilon", [1e-12, 1e-2, 0.5])
def test_instancenorm_epsilon(epsilon):
    check_parity(*in_model(in_case((2, 3, 6)), attrs={"epsilon": epsilon}))


def test_instancenorm_offset():
    """A mean far from 0 against the spread: the variance must not cancel (E[x^2] - E[x]^2 would be
    2.4e-5 of the output's scale off here). On MLX's CPU device the result is ORT's. A GPU sums in
    another order: the mean moved by one ulp of 20 (1.9e-6) on the H200, and y by as much, which
    is 2e-4 of an element near 0: there, y against float64 to the output's scale."""
    feeds = in_case((2, 3, 64), mean=20.0)
    if mlx_device() == "cpu":
        check_parity(*in_model(feeds))
        return
    got, mlx, total = run_mlx(*in_model(feeds))
    assert mlx == total == 1
    x = feeds["x"].astype(np.float64)
    m, v = x.mean(axis=2, keepdims=True), x.var(axis=2, keepdims=True)
    y = (x - m) / np.sqrt(v + 1e-5) * feeds["scale"][None, :, None] + feeds["b"][None, :, None]
    assert_close_to_scale(got[0], y.astype(np.float32))


def test_instancenorm_float16():
    check_parity(*in_model(in_case((2, 3, 5, 4), F16)))


def test_instancenorm_bf16():
    check_low_precision(lambda d: in_model({k: v.astype(d) for k, v in in_case((2, 3, 10)).items()})[0],
                        in_case((2, 3, 10)), BF16)


def test_instancenorm_float64():
    """ORT's CPU EP has no float64 kernel: numpy reference."""
    feeds = in_case((2, 3, 9), F64)
    x = feeds["x"]
    m, v = x.mean(axis=2, keepdims=True), x.var(axis=2, keepdims=True)
    y = (x - m) / np.sqrt(v + 1e-5) * feeds["scale"][None, :, None] + feeds["b"][None, :, None]
    model, feeds = in_model(feeds)
    if not float64_on_mlx():
        pytest.skip("float64 runs on MLX's CPU device only")
    got, mlx, total = run_mlx(model, feeds)
    assert mlx == total == 1
    assert_close(got[0], y)


# ---- GroupNormalization ------------------------------------------------------------------------

def gn_case(shape, groups, opset, dtype=F32, seed=0):
    rng = np.random.default_rng(seed)
    n = shape[1] if opset >= 21 else groups
    return {"x": random_array(shape, np.float32, rng).astype(dtype),
            "scale": rng.uniform(0.5, 1.5, n).astype(dtype), "bias": rng.uniform(-1, 1, n).astype(dtype)}


def gn_model(feeds, groups, opset, constant=False, **attrs):
    inputs = [(n, feeds[n].dtype, list(feeds[n].shape)) for n in ("x", "scale", "bias")]
    inits = {n: feeds[n] for n in ("scale", "bias")} if constant else None
    model = one_node("GroupNormalization", inputs, {"num_groups": groups, **attrs}, opset, inits)
    return model, ({"x": feeds["x"]} if constant else feeds)


# Groups of few values hold nearly equal ones now and then; ORT's function body forms the variance as
# E[x^2] - E[x]^2, whose cancellation there puts ORT itself off by more than the tolerance (the EP
# uses mean((x - mean)^2)), so every group here holds at least 6 values.
GN_CASES = [((2, 6, 5), 3), ((2, 6, 5), 1), ((2, 6, 5), 6), ((1, 4, 3, 5), 2), ((2, 8, 2, 3, 2), 4), ((3, 12), 2)]


@pytest.mark.parametrize("constant", [False, True], ids=["runtime", "constant"])
@pytest.mark.parametrize("opset", [18, 21])
@pytest.mark.parametrize("shape,groups", GN_CASES, ids=[f"{ids(s)}-g{g}" for s, g in GN_CASES])
def test_groupnorm_float32(shape, groups, opset, constant):
    check_parity(*gn_model(gn_case(shape, groups, opset), groups, opset, constant))


@pytest.mark.parametrize("opset", [18, 21])
def test_groupnorm_empty_batch(opset):
    """An empty batch gives an empty result (ORT's function body fails to reshape it)."""
    model, feeds = gn_model(gn_case((0, 4, 3), 2, opset), 2, opset)
    got, mlx, total = run_mlx(model, feeds)
    assert mlx == total == 1 and got[0].shape == (0, 4, 3)


def test_groupnorm_per_group_vs_per_channel():
    """Opset 18 scales per group, 21 per channel: equal when each group's channels share values."""
    feeds18 = gn_case((2, 6, 4), 3, 18)
    feeds21 = dict(feeds18, scale=np.repeat(feeds18["scale"], 2), bias=np.repeat(feeds18["bias"], 2))
    y18 = check_parity(*gn_model(feeds18, 3, 18))[0]
    y21 = check_parity(*gn_model(feeds21, 3, 21))[0]
    np.testing.assert_allclose(y18, y21, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("epsilon", [1e-12, 1e-2, 0.5])
def test_groupnorm_epsilon(epsilon):
    check_parity(*gn_model(gn_case((2, 4, 6), 2, 21), 2, 21, epsilon=epsilon))


@pytest.mark.parametrize("opset", [18, 21])
@pytest.mark.parametrize("dtype", [F16, F64], ids=ids)
def test_groupnorm_other_floats(dtype, opset):
    # Opset 21 (stash_type=1) normalizes in float32 by definition, float64 input included: its
    # result has float32 precision, so float64 is compared at the float32 tolerance there.
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == F64 and opset >= 21 else {}
    check_parity(*gn_model(gn_case((2, 6, 7), 3, opset, dtype), 3, opset), **tol)


@pytest.mark.parametrize("opset", [18, 21])
def test_groupnorm_bf16(opset):
    feeds = gn_case((2, 6, 7), 3, opset)
    check_low_precision(lambda d: gn_model({k: v.astype(d) for k, v in feeds.items()}, 3, opset)[0], feeds, BF16)


def test_groupnorm_stash_type_declined():
    """stash_type=11 (float64 statistics) is declined: ORT expands the function body instead (whose
    nodes MLX may run), so more than the one GroupNormalization node executes."""
    model, feeds = gn_model(gn_case((2, 4, 3), 2, 21, F32), 2, 21, stash_type=11)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "gn.onnx")
        onnx.save(model, path)
        report = mlx_ep.claim_report(path)
    claimed_ops = {n["op_type"] for g in report["graphs"] for p in g["partitions"] for n in p["nodes"]}
    assert "GroupNormalization" not in claimed_ops and claimed_ops, claimed_ops  # the body's nodes
    got, _, _ = run_mlx(model, feeds)
    assert_close(got[0], run_cpu(model, feeds)[0])


# ---- LpNormalization ---------------------------------------------------------------------------

def lp_model(x, p=2, axis=-1, opset=22):
    return one_node("LpNormalization", [("x", x.dtype, list(x.shape))], {"p": p, "axis": axis}, opset), {"x": x}


LP_CASES = [((7,), 0), ((3, 5), -1), ((3, 5), 0), ((2, 3, 4), 1), ((2, 3, 4, 5), 2), ((2, 3, 4, 5, 3), -2),
            ((2, 300), 1), ((0, 3), 1)]


@pytest.mark.parametrize("opset", [1, 22])
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("shape,axis", LP_CASES, ids=[f"{ids(s)}-axis{a}" for s, a in LP_CASES])
def test_lpnorm_float32(shape, axis, p, opset):
    check_parity(*lp_model(random_array(shape, np.float32), p, axis, opset))


@pytest.mark.parametrize("p", [1, 2])
def test_lpnorm_special_rows(p):
    """Zero norm gives 0; infinities and NaN propagate like ORT's x / norm."""
    x = np.array([[0, 0, 0], [1, 2, 2], [np.inf, 1, 0], [np.nan, 0, 0], [-0.0, 0, 0], [1e-30, 1e-30, 0]], np.float32)
    check_parity(*lp_model(x, p))


@pytest.mark.parametrize("p", [1, 2])
def test_lpnorm_other_floats(p):
    check_parity(*lp_model(random_array((3, 6), np.float16), p))
    check_parity(*lp_model(random_array((3, 6), np.float64), p))


@pytest.mark.parametrize("dtype", [F16, BF16], ids=ids)
def test_lpnorm_low_precision_opset1_and_bf16(dtype):
    """float16 at opset 1 (ORT's float16 cast insertion fails there) and bfloat16: float32 reference."""
    x = random_array((4, 9), np.float32)
    opset = 1 if dtype == F16 else 22
    check_low_precision(lambda d: lp_model(x.astype(d), 2, -1, opset)[0], {"x": x}, dtype)


# ---- LRN ---------------------------------------------------------------------------------------

def lrn_model(x, opset=13, **attrs):
    return one_node("LRN", [("x", x.dtype, list(x.shape))], attrs, opset), {"x": x}


def lrn_reference(x, size, alpha=1e-4, beta=0.75, bias=1.0):
    """The spec's formula in float64, for any rank >= 3."""
    x64 = x.astype(np.float64)
    sq = np.zeros_like(x64)
    c = x.shape[1]
    for i in range(c):
        lo, hi = max(0, i - (size - 1) // 2), min(c - 1, i + int(np.ceil((size - 1) / 2)))
        sq[:, i] = (x64[:, lo:hi + 1] ** 2).sum(axis=1)
    return (x64 / (bias + alpha / size * sq) ** beta).astype(x.dtype)


@pytest.mark.parametrize("size", [1, 3, 5, 21])
@pytest.mark.parametrize("shape", [(2, 5, 3, 4), (1, 1, 2, 2), (2, 16, 3, 3)], ids=ids)
def test_lrn_float32(shape, size):
    check_parity(*lrn_model(random_array(shape, np.float32), size=size))


@pytest.mark.parametrize("size", [2, 4, 8])
def test_lrn_even_size(size):
    """ORT's kernel takes odd sizes only; the window is then asymmetric (numpy reference)."""
    x = random_array((2, 6, 3, 2), np.float32)
    got, mlx, total = run_mlx(*lrn_model(x, size=size, alpha=0.1))
    assert mlx == total == 1
    assert_close(got[0], lrn_reference(x, size, alpha=0.1))


@pytest.mark.parametrize("attrs", [{"alpha": 0.5, "beta": 0.3, "bias": 2.0}, {"alpha": 1e-3, "beta": 1.5, "bias": 0.5}],
                         ids=ids)
@pytest.mark.parametrize("opset", [1, 13])
def test_lrn_attributes(opset, attrs):
    check_parity(*lrn_model(random_array((2, 6, 3, 5), np.float32, low=-5, high=5), opset, size=3, **attrs))


@pytest.mark.parametrize("shape", [(2, 5, 7), (1, 4, 2, 3, 2)], ids=ids)
def test_lrn_other_ranks(shape):
    """ORT's kernel is 4-D only; the definition holds for any rank >= 3 (numpy reference)."""
    x = random_array(shape, np.float32)
    got, mlx, total = run_mlx(*lrn_model(x, size=3, alpha=0.1))
    assert mlx == total == 1
    assert_close(got[0], lrn_reference(x, 3, alpha=0.1))


def test_lrn_low_precision():
    x = random_array((2, 5, 3, 4), np.float32)
    check_parity(*lrn_model(x.astype(np.float16), size=3, alpha=0.1))
    check_low_precision(lambda d: lrn_model(x.astype(d), size=3, alpha=0.1)[0], {"x": x}, BF16)


# ---- MeanVarianceNormalization -----------------------------------------------------------------

def mvn_model(x, opset=13, axes=None):
    attrs = {} if axes is None else {"axes": axes}
    return one_node("MeanVarianceNormalization", [("x", x.dtype, list(x.shape))], attrs, opset), {"x": x}


# (Slices of only 3 values, e.g. axes [1] of 2x3x4x5, are often nearly constant: the result then
# carries the input's rounding magnified by mean/std, for ORT as for the EP; channels are 6 here.)
MVN_CASES = [((2, 3, 4, 5), None), ((2, 6, 4, 5), [1]), ((2, 3, 4, 5), [-1, -2]), ((3, 7), [0]), ((3, 7), [0, 1]),
             ((2, 3, 4, 5, 2), [1, 3, 4]), ((4, 3, 40, 50), None), ((2, 3, 4, 5), [2, 2])]


@pytest.mark.parametrize("opset", [9, 13])
@pytest.mark.parametrize("shape,axes", MVN_CASES, ids=[f"{ids(s)}-{a}" for s, a in MVN_CASES])
def test_mvn_float32(shape, axes, opset):
    check_parity(*mvn_model(random_array(shape, np.float32), opset, axes))


def test_mvn_offset():
    x = random_array((2, 3, 8, 8), np.float32) + 30.0
    check_parity(*mvn_model(x))


def test_mvn_constant_slice_nan():
    """A constant slice: 0 / 0 = NaN, as ORT's kernel (no epsilon)."""
    x = random_array((2, 3, 2, 2), np.float32)
    x[:, 1] = 2.0
    check_parity(*mvn_model(x))


@pytest.mark.parametrize("dtype", [F16, BF16], ids=ids)
def test_mvn_low_precision(dtype):
    """ORT's CPU EP cannot run float16/bfloat16 MeanVarianceNormalization: float32 reference."""
    x = random_array((2, 3, 4, 5), np.float32)
    check_low_precision(lambda d: mvn_model(x.astype(d))[0], {"x": x}, dtype)


def test_mvn_float64():
    x = random_array((2, 3, 4, 5), np.float64)
    m = x.mean(axis=(0, 2, 3), keepdims=True)
    y = (x - m) / np.sqrt(((x - m) ** 2).mean(axis=(0, 2, 3), keepdims=True))
    if not float64_on_mlx():
        pytest.skip("float64 runs on MLX's CPU device only")
    got, mlx, total = run_mlx(*mvn_model(x))
    assert mlx == total == 1
    assert_close(got[0], y)


def test_mvn_axis_out_of_range_declined():
    """ORT drops axes beyond the rank; the EP declines them (axes [0, 2, 3] on rank 3)."""
    assert_declined(*mvn_model(random_array((2, 3, 4), np.float32)))
