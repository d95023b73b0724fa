"""Parity tests of com.microsoft RotaryEmbedding (src/ops/rotary_embedding.cc) against ORT's CPU EP:
3-D and 4-D input, position_ids as [batch, seq] data or one start value, interleaved or not,
partial rotation (rotary_embedding_dim with num_heads), float16/bfloat16."""
import numpy as np
import pytest
from onnx import helper

from harness import BF16, assert_declined, check_parity, cpu_or_none, random_array, run_cpu
from harness_bf16 import check_bf16
from test_attention_contrib_gqa import ms_model, rotary_caches


def rotary(x, pos, rot, max_pos=16, dtype=np.float32, **attrs):
    cos, sin = rotary_caches(max_pos, rot, dtype)
    feeds = {"input": x.astype(dtype), "position_ids": pos, "cos_cache": cos, "sin_cache": sin}
    return ms_model("RotaryEmbedding", feeds, attrs, ["output"], dtype)


def data(shape, seed=0):
    return random_array(shape, np.float32, np.random.default_rng(seed))


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("layout", ["3d", "4d"])
@pytest.mark.parametrize("positions", ["per_token", "start"])
def test_full_rotation(interleaved, layout, positions):
    b, s, n, h = 2, 5, 3, 8
    x = data((b, s, n * h)) if layout == "3d" else data((b, n, s, h))
    pos = np.array([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]], np.int64) if positions == "per_token" else np.array([4], np.int64)
    check_parity(*rotary(x, pos, h, interleaved=interleaved))


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("layout", ["3d", "4d"])
def test_partial_rotation(interleaved, layout):
    b, s, n, h, rot = 2, 3, 2, 16, 8
    x = data((b, s, n * h), 1) if layout == "3d" else data((b, n, s, h), 1)
    pos = np.array([[0, 1, 2], [7, 8, 9]], np.int64)
    check_parity(*rotary(x, pos, rot, interleaved=interleaved, rotary_embedding_dim=rot, num_heads=n))


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["float16", "bfloat16"])
def test_narrow_types(dtype):
    x = data((2, 4, 2 * 8), 2)
    pos = np.array([[0, 1, 2, 3], [5, 6, 7, 8]], np.int64)
    model, feeds = rotary(x, pos, 8, dtype=dtype, interleaved=1)
    if dtype == np.float16:
        if cpu_or_none(model, feeds) is None:
            pytest.skip("ORT's CPU EP has no float16 RotaryEmbedding")
        check_parity(model, feeds)
    else:
        ref_model, ref_feeds = rotary(x.astype(BF16).astype(np.float32), pos, 8, interleaved=1)
        ref_feeds["cos_cache"] = ref_feeds["cos_cache"].astype(BF16).astype(np.float32)
        ref_feeds["sin_cache"] = ref_feeds["sin_cache"].astype(BF16).astype(np.float32)
        check_bf16(model, feeds, run_cpu(ref_model, ref_feeds))


def test_declined_packed_batching():
    model, feeds = rotary(data((2, 3, 8)), np.array([[0, 1, 2], [0, 1, 2]], np.int64), 8)
    model.graph.node[0].attribute.append(helper.make_attribute("is_packed_batching", 1))
    try:
        run_cpu(model, feeds)
    except Exception as e:  # noqa: BLE001 - ORT's CPU EP may reject the case itself
        pytest.skip(f"ORT's CPU EP rejects it too: {str(e)[:80]}")
    assert_declined(model, feeds)


