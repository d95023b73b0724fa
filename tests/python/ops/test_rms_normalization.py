"""Parity of RMSNormalization (opset 23, src/ops/normalization.cc) against ORT's CPU EP."""
import numpy as np
import pytest
from onnx.reference.ops.op_rms_normalization import _rms_normalization

from harness import BF16, assert_declined, assert_mlx_error, check_parity, ids, node_model, random_array, run_cpu
from harness_bf16 import check_bf16


def rms_model(x, scale, attrs=None, constant_scale=False):
    """(model, feeds) of one RMSNormalization node; Scale is a graph input or an initializer."""
    if constant_scale:
        return node_model("RMSNormalization", [("x", x)], attrs or {}, 23, host=[("scale", scale)])
    return node_model("RMSNormalization", [("x", x), ("scale", scale)], attrs or {}, 23)


# (X shape, axis, Scale shape): X.shape[axis:], broadcast ones ([C], [1, C], [..., 1]), a Scale
# over all of X, odd sizes, rank 1, an empty batch.
CASES = [
    ((2, 3, 4, 5), -1, (5,)),
    ((2, 3, 4, 5), 1, (3, 4, 5)),
    ((2, 3, 4, 5), 0, (2, 3, 4, 5)),
    ((2, 3, 4, 5), 2, (5,)),
    ((2, 3, 4, 5), -2, (1, 5)),
    ((2, 3, 4, 5), 1, (3, 1, 1)),
    ((3, 7), 0, (1,)),
    ((3, 7), -1, (3, 7)),
    ((11,), 0, (11,)),
    ((5, 1031), -1, (1031,)),
    ((0, 4), -1, (4,)),
]


@pytest.mark.parametrize("constant_scale", [False, True])
@pytest.mark.parametrize("xshape,axis,sshape", CASES, ids=ids)
def test_float32(xshape, axis, sshape, constant_scale):
    rng = np.random.default_rng(len(xshape) * 10 + axis)
    x, scale = random_array(xshape, np.float32, rng), random_array(sshape, np.float32, rng)
    check_parity(*rms_model(x, scale, {"axis": axis}, constant_scale))


@pytest.mark.parametrize("epsilon", [1e-1, 1e-6])
def test_epsilon_and_default_axis(epsilon):
    rng = np.random.default_rng(1)
    # Small values: epsilon dominates the mean square.
    x = random_array((3, 4, 6), np.float32, rng, low=-0.05, high=0.05)
    scale = random_array((6,), np.float32, rng)
    got = check_parity(*rms_model(x, scale, {"epsilon": epsilon}))
    np.testing.assert_allclose(got[0], _rms_normalization(x, scale, epsilon=epsilon), rtol=1e-5, atol=1e-6)


def test_large_mean():
    """Rows with a large offset: the mean square must be summed accurately."""
    rng = np.random.default_rng(2)
    x = (random_array((4, 4096), np.float32, rng) + 1000).astype(np.float32)
    check_parity(*rms_model(x, random_array((4096,), np.float32, rng)))


def test_float64():
    rng = np.random.default_rng(3)
    x, scale = random_array((3, 4, 5), np.float64, rng), random_array((4, 5), np.float64, rng)
    check_parity(*rms_model(x, scale, {"axis": 1}))


@pytest.mark.parametrize("xshape,axis,sshape", [((2, 3, 4, 5), -1, (5,)), ((4, 9), 0, (4, 9)),
                                                ((3, 257), -1, (257,))], ids=ids)
def test_float16(xshape, axis, sshape):
    rng = np.random.default_rng(4)
    x, scale = random_array(xshape, np.float16, rng), random_array(sshape, np.float16, rng)
    got = check_parity(*rms_model(x, scale, {"axis": axis}))
    # ORT computes in float32 and rounds once, so must MLX: (nearly) every value is the float32
    # result rounded (rounding after each step would differ far more often).
    f32 = {"x": x.astype(np.float32), "scale": scale.astype(np.float32)}
    ref32 = run_cpu(rms_model(f32["x"], f32["scale"], {"axis": axis})[0], f32)[0].astype(np.float16)
    assert np.mean(got[0] == ref32) >= 0.99


@pytest.mark.parametrize("xshape,axis,sshape", [((2, 3, 8), -1, (8,)), ((3, 5, 7), 1, (1, 7))], ids=ids)
def test_bfloat16(xshape, axis, sshape):
    """ORT's CPU EP has no bfloat16 kernel: the reference is the float32 computation, rounded once."""
    rng = np.random.default_rng(5)
    x = random_array(xshape, np.float32, rng).astype(BF16)
    scale = random_array(sshape, np.float32, rng).astype(BF16)
    x32, s32 = x.astype(np.float32), scale.astype(np.float32)
    ref = run_cpu(rms_model(x32, s32, {"axis": axis})[0], {"x": x32, "scale": s32})
    check_bf16(rms_model(x, scale, {"axis": axis})[0], {"x": x, "scale": scale}, ref)


def test_declined_stash_type():
    x = random_array((3, 4), np.float32)
    assert_declined(*rms_model(x, random_array((4,), np.float32), {"stash_type": 0}))


def test_nothing_to_normalize_is_an_error():
    """ORT rejects an empty X.shape[axis:]; so does MLX (no made-up output)."""
    x = np.zeros((2, 0, 3), np.float32)
    assert_mlx_error(*rms_model(x, np.ones((3,), np.float32), {"axis": 1}))
