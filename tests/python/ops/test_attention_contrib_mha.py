"""Parity tests of com.microsoft MultiHeadAttention and Attention (src/ops/attention_contrib_mha.cc) against
ORT's CPU EP: self and cross attention, projection bias, key padding masks (1-D lengths, 2-D,
3-D), attention_bias, past/present, unidirectional, scale, mask_filter_value, 4-D key/value."""
import numpy as np
import pytest

from onnx import TensorProto, helper

from harness import BF16, assert_mlx_error, check_parity, cpu_or_none, random_array, run_cpu
from harness_bf16 import check_bf16
from test_attention_contrib_gqa import ms_model

MHA_INPUTS = ["query", "key", "value", "bias", "key_padding_mask", "attention_bias", "past_key", "past_value"]


def mha(batch, seq, kv_seq, heads, head_size, v_head_size=None, dtype=np.float32, proj_bias=False, mask=None,
        attn_bias=False, past_len=None, present=False, kv_4d=False, seed=0, **attrs):
    """(model, feeds) of a MultiHeadAttention node; `mask`: None, "lengths", "2d" or "3d"."""
    rng = np.random.default_rng(seed)
    v_head_size = v_head_size or head_size
    arr = lambda *shape: random_array(shape, dtype, rng, -1.5, 1.5)  # noqa: E731
    total = kv_seq + (past_len or 0)
    feeds = dict.fromkeys(MHA_INPUTS)
    feeds["query"] = arr(batch, seq, heads * head_size)
    if kv_4d:
        feeds.update(key=arr(batch, heads, kv_seq, head_size), value=arr(batch, heads, kv_seq, v_head_size))
    else:
        feeds.update(key=arr(batch, kv_seq, heads * head_size), value=arr(batch, kv_seq, heads * v_head_size))
    if proj_bias:
        feeds["bias"] = arr(2 * heads * head_size + heads * v_head_size)
    if mask == "lengths":
        feeds["key_padding_mask"] = rng.integers(1, kv_seq + 1, size=batch).astype(np.int32)
    elif mask == "2d":
        feeds["key_padding_mask"] = (rng.random((batch, total)) < 0.7).astype(np.int32)
    elif mask == "3d":
        feeds["key_padding_mask"] = (rng.random((batch, seq, total)) < 0.7).astype(np.int32)
    if attn_bias:
        feeds["attention_bias"] = arr(1 if batch > 1 else batch, heads, seq, total)
    if past_len is not None:
        feeds.update(past_key=arr(batch, heads, past_len, head_size), past_value=arr(batch, heads, past_len, v_head_size))
    outputs = ["output", "present_key", "present_value"] if present else ["output"]
    return ms_model("MultiHeadAttention", feeds, {"num_heads": heads, **attrs}, outputs, dtype)


def check(model, feeds):
    return check_parity(model, feeds, rtol=1e-5, atol=1e-5)


# (batch, seq, kv_seq, heads, head_size, v_head_size)
SHAPES = [(2, 5, 5, 4, 8, 8), (3, 1, 7, 2, 16, 6), (1, 6, 3, 3, 5, 5), (2, 3, 6, 2, 8, 4)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("proj_bias", [False, True], ids=["", "proj_bias"])
@pytest.mark.parametrize("unidirectional", [0, 1])
def test_self_and_cross(shape, proj_bias, unidirectional):
    b, s, l, h, d, dv = shape
    check(*mha(b, s, l, h, d, dv, proj_bias=proj_bias, unidirectional=unidirectional))


@pytest.mark.parametrize("mask", ["lengths", "2d", "3d"])
@pytest.mark.parametrize("extra", [{}, {"mask_filter_value": -3.0}, {"unidirectional": 1, "attn_bias": True}],
                         ids=lambda d: "_".join(d) or "plain")
def test_masks(mask, extra):
    check(*mha(3, 4, 4, 2, 8, mask=mask, **extra))


@pytest.mark.parametrize("seq", [1, 3])
@pytest.mark.parametrize("options", [{}, {"unidirectional": 1, "mask": "2d", "attn_bias": True, "proj_bias": True}],
                         ids=["plain", "masked"])
def test_past_and_present(seq, options):
    check(*mha(2, seq, seq, 2, 8, past_len=5, present=True, **options))


@pytest.mark.parametrize("mask", [None, "lengths"])
def test_cross_attention_4d_kv(mask):
    check(*mha(2, 3, 6, 2, 8, kv_4d=True, mask=mask, scale=0.2))


def test_scale_and_attention_bias_per_batch():
    model, feeds = mha(1, 4, 6, 2, 8, attn_bias=True, scale=0.7)
    check(model, feeds)


def test_causal_with_tiny_filter():
    """A mask_filter_value close to 0 tells padding (the filter value) from the causal mask
    (the lowest float) apart."""
    check(*mha(2, 4, 4, 2, 8, mask="2d", unidirectional=1, mask_filter_value=-0.5))


def test_float16():
    model, feeds = mha(2, 4, 4, 2, 16, dtype=np.float16, mask="lengths", proj_bias=True)
    if cpu_or_none(model, feeds) is None:
        pytest.skip("ORT's CPU EP has no float16 MultiHeadAttention")
    check_parity(model, feeds)


def test_bfloat16_against_float32():
    model, feeds = mha(2, 3, 5, 2, 8, mask="2d", unidirectional=1)
    feeds = {k: (v.astype(BF16).astype(np.float32) if v.dtype == np.float32 else v) for k, v in feeds.items()}
    expected = run_cpu(model, feeds)
    bf16_model, _ = mha(2, 3, 5, 2, 8, dtype=BF16, mask="2d", unidirectional=1)
    check_bf16(bf16_model, {k: (v.astype(BF16) if v.dtype == np.float32 else v) for k, v in feeds.items()}, expected)


def test_2d_mask_of_kv_length_with_past_errors():
    """A [B, L] mask with a past: ORT's CPU kernel rejects it (it wants [B, P + L]); the EP
    declines it rather than guessing, so the run errors as on CPU."""
    model, feeds = mha(2, 2, 2, 2, 8, past_len=3, present=True)
    feeds["key_padding_mask"] = (np.random.default_rng(1).random((2, 2)) < 0.7).astype(np.int32)
    model.graph.node[0].input[4] = "key_padding_mask"
    model.graph.input.append(helper.make_tensor_value_info("key_padding_mask", TensorProto.INT32, [2, 2]))
    assert_mlx_error(model, feeds)


ATTENTION_INPUTS = ["input", "weights", "bias", "mask_index", "past", "attention_bias"]


def attention(batch, seq, in_hidden, heads, head_size, v_head_size=None, dtype=np.float32, bias=True, mask=None,
              attn_bias=False, past_len=None, seed=0, **attrs):
    """(model, feeds) of a com.microsoft Attention node; `mask`: None, "lengths", "start_end", "2d", "3d"."""
    rng = np.random.default_rng(seed)
    v_head_size = v_head_size or head_size
    arr = lambda *shape: random_array(shape, dtype, rng, -1.0, 1.0)  # noqa: E731
    d, dv = heads * head_size, heads * v_head_size
    total = seq + (past_len or 0)
    feeds = dict.fromkeys(ATTENTION_INPUTS)
    feeds.update(input=arr(batch, seq, in_hidden), weights=arr(in_hidden, 2 * d + dv))
    if bias:
        feeds["bias"] = arr(2 * d + dv)
    if mask == "lengths":
        feeds["mask_index"] = rng.integers(1, total + 1, size=batch).astype(np.int32)
    elif mask == "start_end":
        end = rng.integers(total // 2 + 1, total + 1, size=batch)
        feeds["mask_index"] = np.concatenate([end, rng.integers(0, total // 2 + 1, size=batch)]).astype(np.int32)
    elif mask == "2d":
        feeds["mask_index"] = (rng.random((batch, total)) < 0.7).astype(np.int32)
    elif mask == "3d":
        feeds["mask_index"] = (rng.random((batch, seq, total)) < 0.7).astype(np.int32)
    if attn_bias:
        feeds["attention_bias"] = arr(batch, 1, seq, total)
    if past_len is not None:
        feeds["past"] = arr(2, batch, heads, past_len, head_size)
    if v_head_size != head_size:
        attrs["qkv_hidden_sizes"] = [d, d, dv]
    outputs = ["output", "present"] if past_len is not None else ["output"]
    return ms_model("Attention", feeds, {"num_heads": heads, **attrs}, outputs, dtype)


@pytest.mark.parametrize("mask", [None, "lengths", "start_end", "2d", "3d"])
@pytest.mark.parametrize("unidirectional", [0, 1])
def test_attention_masks(mask, unidirectional):
    check(*attention(2, 5, 12, 2, 4, mask=mask, unidirectional=unidirectional))


@pytest.mark.parametrize("seq", [1, 3])
@pytest.mark.parametrize("options", [{}, {"mask": "2d", "unidirectional": 1}], ids=["plain", "masked"])
def test_attention_past_present(seq, options):
    check(*attention(2, seq, 8, 2, 4, past_len=4, **options))


def test_attention_v_hidden_scale_filter():
    check(*attention(3, 4, 6, 2, 4, v_head_size=3, mask="2d", scale=0.4, mask_filter_value=-2.0))


def test_attention_without_bias():
    """ORT's CPU kernel crashes without the (optional) bias; the reference is its run with a zero
    bias, which is the same computation."""
    model, feeds = attention(2, 3, 6, 2, 4, bias=False, mask="lengths")
    ref_model, ref_feeds = attention(2, 3, 6, 2, 4, bias=True, mask="lengths")
    ref_feeds.update(input=feeds["input"], weights=feeds["weights"], mask_index=feeds["mask_index"])
    ref_feeds["bias"] = np.zeros_like(ref_feeds["bias"])
    check_parity(model, feeds, rtol=1e-5, atol=1e-5, expected=run_cpu(ref_model, ref_feeds))


def test_attention_float16():
    model, feeds = attention(2, 4, 8, 2, 8, dtype=np.float16, mask="lengths")
    if cpu_or_none(model, feeds) is None:
        pytest.skip("ORT's CPU EP has no float16 Attention")
    check_parity(model, feeds)


@pytest.mark.parametrize("case", ["do_rotary", "past_with_attention_bias"])
def test_attention_rejected_by_ort_is_not_claimed(case):
    """ORT's CPU kernel rejects these; the EP declines them, so the run errors as on CPU."""
    if case == "do_rotary":
        model, feeds = attention(2, 3, 8, 2, 4, do_rotary=1)
    else:
        model, feeds = attention(2, 1, 8, 2, 4, past_len=3, attn_bias=True)
    assert_mlx_error(model, feeds)


def test_attention_bfloat16_against_float32():
    """The projection rounds Q/K/V to bfloat16 (as the float16 path does to float16): the float32
    reference fed bfloat16-rounded inputs differs from it by bfloat16 roundings only."""
    model, feeds = attention(2, 3, 8, 2, 4, mask="lengths", unidirectional=1)
    feeds = {k: (v.astype(BF16).astype(np.float32) if v.dtype == np.float32 else v) for k, v in feeds.items()}
    expected = run_cpu(model, feeds)
    bf16_model, _ = attention(2, 3, 8, 2, 4, dtype=BF16, mask="lengths", unidirectional=1)
    check_bf16(bf16_model, {k: (v.astype(BF16) if v.dtype == np.float32 else v) for k, v in feeds.items()}, expected)
