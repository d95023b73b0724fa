"""Parity tests of Einsum (src/ops/einsum.cc) against ORT's CPU EP.

Float data is positive (0.5-1.5): MLX and ORT sum products in different orders, and positive terms
keep the comparison meaningful at fp32's 1e-5 relative tolerance (see test_matmul.py). Where ORT's
CPU EP cannot run a case (8/16-bit and unsigned integers, implicit equations with upper case
letters) numpy's einsum is the reference. bfloat16 is no Einsum-12 type (ORT rejects such models;
Einsum-28 adds it)."""
import numpy as np
import pytest

from harness import assert_close, assert_declined, check_parity, make_model, run_cpu, run_mlx


def operands(shapes, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        lo = 0 if dtype.kind == "u" else -3
        return [rng.integers(lo, 4, size=s).astype(dtype) for s in shapes]
    return [rng.uniform(0.5, 1.5, size=s).astype(np.float32).astype(dtype) for s in shapes]


def einsum_model(equation, arrays, static=True):
    """(model, feeds) of one Einsum node on inputs x0, x1, ... (static shapes, or none at all)."""
    inputs = [(f"x{i}", a.dtype, list(a.shape) if static else None) for i, a in enumerate(arrays)]
    m = make_model("Einsum", inputs, [("y0", arrays[0].dtype, None)], {"equation": equation}, opset=12)
    return m, {f"x{i}": a for i, a in enumerate(arrays)}


# (equation, operand shapes): those of real models first, then the parser's corners.
CASES = [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 5, 8), (2, 3, 6, 8)]),    # attention scores
    ("bhqk,bhkd->bhqd", [(2, 3, 5, 6), (2, 3, 6, 8)]),    # attention output
    ("bid,bjd->bij", [(2, 3, 4), (2, 5, 4)]),
    ("nchw,kc->nkhw", [(2, 3, 4, 5), (6, 3)]),            # 1x1 convolution
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),       # bilinear
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (2, 3, 5, 2)]),
    ("...ij,...jk->...ik", [(3, 4), (4, 5)]),             # empty ellipsis
    ("...ij,...jk", [(2, 3, 4), (2, 4, 5)]),              # implicit: ellipsis first
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (1, 5, 4, 2)]),  # ellipsis dims broadcast
    ("i...j,j...->i...", [(2, 3, 4), (4, 3)]),            # ellipsis in the middle
    ("...ij->...ji", [(2, 3, 4)]),
    ("ij->...ij", [(2, 3)]),                              # an output ellipsis of no dims
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),                                     # implicit trace
    ("iii->i", [(3, 3, 3)]),
    ("iij->ij", [(3, 3, 2)]),
    ("bii->bi", [(2, 3, 3)]),
    ("ij->", [(3, 4)]),
    ("ij->i", [(3, 4)]),
    ("ij->j", [(3, 4)]),
    ("ijk->", [(2, 3, 4)]),
    ("i,j->ij", [(3,), (4,)]),                            # outer products
    ("ij,kl->ijkl", [(2, 3), (2, 2)]),
    ("i,i->", [(5,), (5,)]),
    ("i,i->i", [(5,), (5,)]),
    ("ij,ij->ij", [(2, 3), (2, 3)]),
    ("ij,ij->", [(2, 3), (2, 3)]),
    ("ij->ji", [(3, 4)]),                                 # transposes
    ("ijk->kji", [(2, 3, 4)]),
    ("ji", [(3, 4)]),                                     # implicit: sorted letters, a transpose
    ("ij", [(3, 4)]),
    ("Ab->bA", [(2, 3)]),                                 # upper case, explicit
    ("ij,jk->ik", [(2, 1), (3, 4)]),                      # a letter of dim 1 broadcasts
    ("ij,jk->ik", [(3, 0), (0, 2)]),                      # contracting an empty dim: zeros
    ("ij,jk->ik", [(0, 3), (3, 2)]),
    (" ij , jk -> ik ", [(2, 3), (3, 4)]),                # spaces
    ("i,->i", [(3,), ()]),                                # 0-d operands
    (",i->i", [(), (3,)]),
    (",->", [(), ()]),
    ("->", [()]),
]


@pytest.mark.parametrize("equation,shapes", CASES, ids=[f"{e.replace(' ', '_')}-{i}" for i, (e, _) in enumerate(CASES)])
def test_equations(equation, shapes):
    arrays = operands(shapes)
    got = check_parity(*einsum_model(equation, arrays))
    assert_close(got[0], np.einsum(equation.replace(" ", ""), *arrays).astype(np.float32), rtol=1e-5, atol=1e-6)


DTYPE_CASES = [
    ("bij,bjk->bik", [(2, 3, 7), (2, 7, 5)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 9), (1, 2, 4, 9)]),
    ("ii->i", [(4, 4)]),
    ("bii,bi->b", [(2, 3, 3), (2, 3)]),
    ("ij->", [(3, 40)]),
    ("i,j->ij", [(3,), (4,)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 2)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("ij,jk->ik", [(2, 1), (3, 4)]),
    ("i,->i", [(3,), ()]),
]
DTYPE_IDS = [f"{e}-{i}" for i, (e, _) in enumerate(DTYPE_CASES)]


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int32, np.int64], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("equation,shapes", DTYPE_CASES, ids=DTYPE_IDS)
def test_dtypes_ort(equation, shapes, dtype):
    """float16 computes in float32 and rounds once (ORT's CPU kernel returns exactly that); integers
    are exact."""
    arrays = operands(shapes, dtype, seed=1)
    check_parity(*einsum_model(equation, arrays))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint32, np.uint64], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("equation,shapes", DTYPE_CASES, ids=DTYPE_IDS)
def test_integer_types_without_ort_kernel(equation, shapes, dtype):
    arrays = operands(shapes, dtype, seed=3)
    got, mlx, total = run_mlx(*einsum_model(equation, arrays))
    assert mlx == total == 1
    assert_close(got[0], np.einsum(equation, *arrays).astype(dtype))


def test_integer_overflow_wraps_like_ort():
    rng = np.random.default_rng(4)
    a = rng.integers(-(1 << 30), 1 << 30, size=(3, 5)).astype(np.int32)
    b = rng.integers(-(1 << 30), 1 << 30, size=(5, 2)).astype(np.int32)
    check_parity(*einsum_model("ij,jk->ik", [a, b]))


def test_integer_contraction_in_chunks():
    """Integer products are summed in chunks of the contracted dim (~2^24 elements at a time)."""
    a, b = operands([(200, 600), (600, 150)], np.int64, seed=5)
    check_parity(*einsum_model("ij,jk->ik", [a, b]))


def test_float32_large_contraction_and_repeated_runs():
    m, _ = einsum_model("bij,bjk->bik", operands([(2, 16, 512), (2, 512, 24)]))
    for seed in range(3):
        a, b = operands([(2, 16, 512), (2, 512, 24)], seed=seed)
        check_parity(m, {"x0": a, "x1": b})


def test_implicit_upper_case_follows_onnx():
    """Implicit output letters are sorted by ASCII (upper case first); ORT's CPU kernel rejects
    upper case letters in implicit equations, numpy agrees with ONNX."""
    arrays = operands([(2, 3), (3, 4)])
    m, feeds = einsum_model("Ba,aC", arrays)
    with pytest.raises(Exception):
        run_cpu(m, feeds)
    got, mlx, total = run_mlx(m, feeds)
    assert mlx == total == 1
    assert_close(got[0], np.einsum("Ba,aC", *arrays), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("equation,shapes", [
    ("...ij->ij", [(2, 3, 4)]),          # ellipsis dims with no ellipsis in the output
    ("ii->i", [(3, 1)]),                 # a diagonal that is not square
    ("ij,jk->ik", [(2, 3), (4, 5)]),     # j cannot broadcast
    ("ij->i", [(2, 3, 4)]),              # rank differs from the term
], ids=["no_output_ellipsis", "non_square_diagonal", "no_broadcast", "rank"])
def test_invalid_inputs_error(equation, shapes):
    """ORT's CPU kernel rejects these; the MLX translation must refuse them too."""
    m, feeds = einsum_model(equation, operands(shapes), static=False)
    with pytest.raises(Exception):
        run_cpu(m, feeds)
    with pytest.raises(Exception, match=r"\[MlxEp\]\[Einsum\]"):
        run_mlx(m, feeds)


def test_ellipses_of_different_ranks_error():
    """ONNX requires every ellipsis to stand for the same number of dims (ORT's CPU kernel crashes
    the process on this model, so it is not run here); the MLX translation refuses it."""
    m, feeds = einsum_model("...ij,...jk->...ik", operands([(3, 4), (5, 4, 2)]), static=False)
    with pytest.raises(Exception, match=r"\[MlxEp\]\[Einsum\].*ellipses"):
        run_mlx(m, feeds)


def test_more_letters_than_mlx_takes_is_declined():
    """mx::einsum breaks beyond 49 distinct letters (it needs spare letters besides ',' and '->')."""
    lower, upper = "abcdefghijklmnopqrstuvwxy", "ABCDEFGHIJKLMNOPQRSTUVWXY"
    arrays = operands([(1,) * 25, (1,) * 25])
    assert_declined(*einsum_model(f"{lower},{upper}->aA", arrays))


def test_bad_equations_are_declined():
    """Left to ORT, which rejects them too (no made-up output)."""
    for equation in ["ij,jk->ii", "ij->k", "i.j->i", "ij->i->j"]:
        m, feeds = einsum_model(equation, operands([(2, 2), (2, 2)][:equation.split("->")[0].count(",") + 1]),
                                static=False)
        with pytest.raises(Exception):
            run_cpu(m, feeds)
        with pytest.raises(Exception):
            run_mlx(m, feeds)
