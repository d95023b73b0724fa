"""Parity tests of Attention 23/24 (src/ops/attention.cc) against ORT's CPU EP."""
import ml_dtypes
import numpy as np
import pytest
from onnx import helper

from onnx.reference import ReferenceEvaluator

from harness import assert_declined, assert_mlx_error, check_parity, make_graph_model, random_array
from harness_bf16 import check_bf16


def check(model, feeds, **kw):
    """float32: parity with ORT's CPU EP. float16: with the ONNX reference, whose step-by-step
    float16 rounding the translation follows (and the backend tests' expected data hold); ORT's
    float16 kernel rounds differently (it fails ONNX's own test_attention_4d_causal_fp16)."""
    if feeds["q"].dtype == np.float16:
        kw["expected"] = ReferenceEvaluator(model).run(None, feeds)
    return check_parity(model, feeds, **kw)


def attention_model(q, k, v, mask=None, past=None, nonpad=None, attrs=None, opset=23, present=False,
                    qk_out=False):
    """(model, feeds) of one Attention node; `past` is (past_key, past_value)."""
    named = [("q", q), ("k", k), ("v", v), ("mask", mask), ("past_key", None if past is None else past[0]),
             ("past_value", None if past is None else past[1]), ("nonpad", nonpad)]
    while named[-1][1] is None:
        named.pop()
    inputs = [(n, a.dtype, list(a.shape)) if a is not None else ("", None, None) for n, a in named]
    feeds = {n: a for n, a in named if a is not None}
    outs = ["y"] + (["present_key", "present_value"] if present else ["", ""] if qk_out else []) + \
        (["qk"] if qk_out else [])
    node = helper.make_node("Attention", [n if a is not None else "" for n, a in named], outs, **(attrs or {}))
    graph_outs = [(o, q.dtype, None) for o in outs if o]
    return make_graph_model([node], inputs, graph_outs, opset=opset), feeds


def qkv(batch, heads, kv_heads, q_len, kv_len, head_size, dtype, three_d=False, v_head_size=None, seed=0):
    rng = np.random.default_rng(seed)
    v_head_size = v_head_size or head_size
    if three_d:
        shapes = [(batch, q_len, heads * head_size), (batch, kv_len, kv_heads * head_size),
                  (batch, kv_len, kv_heads * v_head_size)]
    else:
        shapes = [(batch, heads, q_len, head_size), (batch, kv_heads, kv_len, head_size),
                  (batch, kv_heads, kv_len, v_head_size)]
    return [random_array(s, dtype, rng, -1.5, 1.5) for s in shapes]


def heads_attrs(heads, kv_heads, three_d):
    return {"q_num_heads": heads, "kv_num_heads": kv_heads} if three_d else {}


# (batch, heads, kv_heads, q_len, kv_len, head_size, v_head_size)
SHAPES = [(2, 3, 3, 5, 7, 8, 8), (1, 6, 2, 4, 4, 16, 5), (3, 4, 1, 1, 9, 4, 6), (2, 2, 2, 7, 3, 5, 5)]


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
@pytest.mark.parametrize("three_d", [False, True], ids=["4d", "3d"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [0, 1], ids=["full", "causal"])
def test_shapes_gqa_causal(shape, three_d, dtype, causal):
    b, h, hkv, s, l, d, dv = shape
    q, k, v = qkv(b, h, hkv, s, l, d, dtype, three_d, dv)
    check(*attention_model(q, k, v, attrs={"is_causal": causal, **heads_attrs(h, hkv, three_d)}))


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
@pytest.mark.parametrize("three_d", [False, True], ids=["4d", "3d"])
@pytest.mark.parametrize("causal", [0, 1], ids=["full", "causal"])
@pytest.mark.parametrize("heads,kv_heads", [(2, 2), (4, 2)])
def test_past_and_present(heads, kv_heads, causal, three_d, dtype):
    b, s, past_len, d = 2, 3, 4, 8
    q, k, v = qkv(b, heads, kv_heads, s, s, d, dtype, three_d, seed=1)
    rng = np.random.default_rng(2)
    past = [random_array((b, kv_heads, past_len, d), dtype, rng, -1.5, 1.5) for _ in range(2)]
    model, feeds = attention_model(q, k, v, past=past, present=True,
                                   attrs={"is_causal": causal, **heads_attrs(heads, kv_heads, three_d)})
    check(model, feeds)


def bool_mask(shape, seed=3):
    m = np.random.default_rng(seed).random(shape) < 0.6
    m[..., 0] = True  # no fully-masked row (ORT's CPU kernel then gives a uniform row, ONNX zeros)
    return m


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
@pytest.mark.parametrize("mask_shape", [(5, 7), (3, 5, 7), (2, 1, 5, 7), (2, 3, 5, 7)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("causal", [0, 1], ids=["full", "causal"])
def test_masks(kind, mask_shape, dtype, causal):
    q, k, v = qkv(2, 3, 3, 5, 7, 8, dtype, seed=4)
    mask = bool_mask(mask_shape) if kind == "bool" else random_array(mask_shape, dtype, low=-2, high=2)
    check(*attention_model(q, k, v, mask=mask, attrs={"is_causal": causal}))


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
@pytest.mark.parametrize("attrs", [{"softcap": 2.0}, {"softcap": 0.7, "is_causal": 1}, {"scale": 0.3},
                                   {"scale": 2.0, "softcap": 5.0}], ids=lambda a: str(a))
def test_softcap_and_scale(attrs, dtype):
    q, k, v = qkv(2, 4, 2, 6, 6, 8, dtype, seed=5)
    mask = bool_mask((6, 6))
    check(*attention_model(q, k, v, mask=mask, attrs=attrs))


def test_softmax_precision_float16():
    q, k, v = qkv(2, 4, 4, 6, 5, 8, np.float16, seed=6)
    check(*attention_model(q, k, v, attrs={"softmax_precision": 1}))


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
@pytest.mark.parametrize("softcap", [0.0, 3.0])
def test_qk_matmul_output(mode, softcap):
    if mode == 0 and softcap:
        pytest.skip("declined (test_declined)")
    q, k, v = qkv(2, 2, 2, 4, 6, 8, np.float32, seed=7)
    mask = random_array((4, 6), np.float32, low=-1, high=1)
    attrs = {"qk_matmul_output_mode": mode, "softcap": softcap}
    check(*attention_model(q, k, v, mask=mask, attrs=attrs, qk_out=True))


@pytest.mark.parametrize("causal", [0, 1], ids=["full", "causal"])
def test_nonpad_kv_seqlen(causal):
    q, k, v = qkv(3, 2, 2, 4, 6, 8, np.float32, seed=8)
    nonpad = np.array([6, 4, 5], np.int64)
    check(*attention_model(q, k, v, nonpad=nonpad, attrs={"is_causal": causal}, opset=24))


def test_declined():
    q, k, v = qkv(1, 2, 2, 3, 3, 4, np.float32, seed=9)
    # qk_matmul_output_mode 0 with softcap: the ONNX reference and ORT disagree.
    assert_declined(*attention_model(q, k, v, attrs={"softcap": 2.0, "qk_matmul_output_mode": 0}, qk_out=True))
    # softmax in float64 (softmax_precision=11).
    assert_declined(*attention_model(q, k, v, attrs={"softmax_precision": 11}))


@pytest.mark.parametrize("attrs", [{"is_causal": 1}, {"softcap": 2.0}, {"softmax_precision": 1}], ids=lambda a: str(a))
def test_bfloat16(attrs):
    """bfloat16 (ORT's CPU EP has no kernel): against the ONNX reference run in bfloat16."""
    q, k, v = qkv(2, 4, 2, 5, 6, 8, ml_dtypes.bfloat16, seed=10)
    model, feeds = attention_model(q, k, v, mask=bool_mask((5, 6)), attrs=attrs)
    check_bf16(model, feeds, ReferenceEvaluator(model).run(None, feeds))


def reference(model, feeds):
    return ReferenceEvaluator(model).run(None, feeds)


@pytest.mark.parametrize("mode", [None, 3])
def test_fully_masked_rows(mode):
    """ONNX: a row with no attendable key is 0 (ORT's CPU kernel gives a uniform row): the reference."""
    q, k, v = qkv(2, 2, 2, 4, 5, 8, np.float32, seed=11)
    mask = bool_mask((2, 1, 4, 5))
    mask[0, 0, 1] = False
    mask[1, 0, 3] = False
    attrs = {} if mode is None else {"qk_matmul_output_mode": mode}
    model, feeds = attention_model(q, k, v, mask=mask, attrs=attrs, qk_out=mode is not None)
    got = check_parity(model, feeds, expected=reference(model, feeds))
    assert not got[0][0, :, 1].any() and not got[0][1, :, 3].any()


def test_nonpad_shorter_than_query():
    """nonpad_kv_seqlen < q_len with is_causal: the leading rows see no key (zeros, per ONNX)."""
    q, k, v = qkv(2, 2, 2, 4, 6, 8, np.float32, seed=12)
    model, feeds = attention_model(q, k, v, nonpad=np.array([2, 6], np.int64), attrs={"is_causal": 1}, opset=24)
    check_parity(model, feeds, expected=reference(model, feeds))


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_mask_shorter_than_kv(kind):
    """A mask shorter than the total kv length is padded with -inf (ONNX; ORT rejects it)."""
    q, k, v = qkv(2, 3, 3, 4, 7, 8, np.float32, seed=13)
    mask = bool_mask((4, 5)) if kind == "bool" else random_array((4, 5), np.float32, low=-1, high=1)
    model, feeds = attention_model(q, k, v, mask=mask)
    check_parity(model, feeds, expected=reference(model, feeds))


def test_bad_head_count():
    """3-D hidden size not divisible by q_num_heads: both EPs fail."""
    q, k, v = qkv(1, 1, 1, 3, 3, 10, np.float32, three_d=True)
    assert_mlx_error(*attention_model(q, k, v, attrs={"q_num_heads": 3, "kv_num_heads": 1}))


def test_float16_default_scale_rounded_once():
    """head_size 29001: 1/sqrt(sqrt(29001)) rounds differently to float16 via float32; the reference
    rounds the double once."""
    q, k, v = qkv(1, 1, 1, 2, 3, 29001, np.float16, v_head_size=4, seed=14)
    model, feeds = attention_model(q, k, v, qk_out=True)
    check(model, feeds)


def test_mask_not_broadcastable():
    q, k, v = qkv(2, 3, 3, 4, 5, 8, np.float32, seed=15)
    assert_mlx_error(*attention_model(q, k, v, mask=bool_mask((2, 2, 4, 5))))
