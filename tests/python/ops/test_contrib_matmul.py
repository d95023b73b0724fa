"""Parity of com.microsoft FusedMatMul / TransposeMatMul (src/ops/matmul_contrib.cc) against ORT's CPU EP."""
import numpy as np
import pytest

from harness import BF16, assert_declined, assert_mlx_error, check_parity, ids, random_array, run_cpu
from harness_bf16 import check_bf16
from test_contrib_normalization import contrib_model, retyped


def fused_case(a_shape, b_shape, dtype=np.float32, op="FusedMatMul", seed=0, **attrs):
    """(model, float32 feeds) of one node; bfloat16 models are built as float32 (see parity)."""
    t = np.float32 if dtype == BF16 else dtype
    rng = np.random.default_rng(seed)
    feeds = {"a": random_array(a_shape, np.float32, rng, -2, 2), "b": random_array(b_shape, np.float32, rng, -2, 2)}
    model = contrib_model(op, [("a", t, a_shape), ("b", t, b_shape)], [("y", t)], attrs)
    return model, feeds


def parity(model, feeds, dtype=np.float32):
    """check_parity on `feeds` cast to `dtype`; bfloat16 against ORT's float32 result, rounded."""
    if np.dtype(dtype) != BF16:
        return check_parity(model, {k: v.astype(dtype) for k, v in feeds.items()})
    f32 = {k: v.astype(BF16).astype(np.float32) for k, v in feeds.items()}
    return check_bf16(retyped(model, BF16), f32, run_cpu(model, f32))


# (A shape, B shape, attributes): plain, transposes, alpha, broadcast batches, 1-D operands, and the
# transBatch forms (A [M, batch.., K] / [K, batch.., M], B likewise), ranks 3 and 4.
CASES = [
    ((3, 4), (4, 5), {}),
    ((4, 3), (4, 5), {"transA": 1}),
    ((3, 4), (5, 4), {"transB": 1, "alpha": 0.125}),
    ((4, 3), (5, 4), {"transA": 1, "transB": 1, "alpha": -2.0}),
    ((2, 3, 7, 4), (4, 5), {"alpha": 0.5}),
    ((2, 1, 7, 4), (3, 5, 4), {"transB": 1}),
    ((4,), (4, 5), {}),
    ((3, 4), (4,), {"alpha": 3.0}),
    ((2, 3, 4), (3, 4, 5), {"transBatchA": 1}),
    ((2, 3, 4), (3, 2, 5), {"transBatchA": 1, "transA": 1}),
    ((2, 3, 4), (4, 2, 5), {"transBatchB": 1}),
    ((2, 3, 4), (5, 2, 4), {"transBatchB": 1, "transB": 1, "alpha": 0.25}),
    ((2, 3, 4, 5), (3, 4, 5, 6), {"transBatchA": 1}),
    ((2, 3, 4, 5), (3, 4, 2, 6), {"transBatchA": 1, "transA": 1}),
    ((7, 3, 4), (1, 4, 5), {"transBatchA": 1}),
    ((6, 2, 5), (5, 2, 3), {"transBatchA": 1, "transBatchB": 1}),
    ((5, 2, 6), (3, 2, 5), {"transBatchA": 1, "transBatchB": 1, "transA": 1, "transB": 1}),
    ((0, 4), (4, 5), {"alpha": 2.0}),
    ((3, 0), (0, 5), {}),
]


@pytest.mark.parametrize("a_shape,b_shape,attrs", CASES, ids=[f"{ids(a)}-{ids(b)}-{ids(t)}" for a, b, t in CASES])
def test_float32(a_shape, b_shape, attrs):
    parity(*fused_case(a_shape, b_shape, **attrs))


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=ids)
@pytest.mark.parametrize("attrs", [{}, {"alpha": 0.3, "transB": 1}, {"transBatchA": 1, "alpha": 1.7}], ids=ids)
def test_low_precision(attrs, dtype):
    """float16 (ORT: float32 between Casts) and bfloat16: one rounding of the scaled float32 product."""
    b_shape = (3, 24, 40) if attrs.get("transB") else (3, 40, 24)
    a_shape = (5, 3, 40) if attrs.get("transBatchA") else (3, 5, 40)
    parity(*fused_case(a_shape, b_shape, dtype, **attrs), dtype)


def test_transpose_matmul():
    """TransposeMatMul: FusedMatMul's former name, the same kernel."""
    parity(*fused_case((4, 3), (5, 4), op="TransposeMatMul", transA=1, transB=1, alpha=0.5))


def test_trans_batch_rank_mismatch_errors():
    """transBatch with ranks that differ: ORT's kernel errors, the translation too."""
    assert_mlx_error(*fused_case((2, 3, 4), (4, 5), transBatchA=1))


def test_float64_declined():
    model, feeds = fused_case((3, 4), (4, 5), np.float64, alpha=0.5)
    assert_declined(model, {k: v.astype(np.float64) for k, v in feeds.items()})
