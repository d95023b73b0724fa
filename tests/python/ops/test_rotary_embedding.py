"""Parity of RotaryEmbedding (opset 23, src/ops/rotary_embedding.cc) against ORT's CPU EP."""
import numpy as np
import pytest
from onnx.reference.ops.op_rotary_embedding import rotary_embedding

from harness import BF16, census_of_tests, check_parity, ids, node_model, random_array, run_cpu
from harness_bf16 import check_bf16


def rope_inputs(xshape, half, max_pos=None, batch_seq=None, dtype=np.float32, seed=0):
    """X, cos and sin caches ([max_pos, half] with position ids, else [batch, seq, half]), ids."""
    rng = np.random.default_rng(seed)
    x = random_array(xshape, np.float32, rng)
    b, s = batch_seq
    angles = rng.uniform(0, 2 * np.pi, (max_pos, half) if max_pos else (b, s, half))
    pos = rng.integers(0, max_pos, (b, s)).astype(np.int64) if max_pos else None
    return x.astype(dtype), np.cos(angles).astype(dtype), np.sin(angles).astype(dtype), pos


def rope_model(x, cos, sin, pos, attrs, constant_caches=False):
    data = [("x", x)] + ([] if constant_caches else [("cos", cos), ("sin", sin)])
    host = [("cos", cos), ("sin", sin)] if constant_caches else []
    if pos is not None:
        if constant_caches:
            host.append(("pos", pos))
        else:
            data.append(("pos", pos))
    return node_model("RotaryEmbedding", data, attrs, 23, host=host)


# (X shape, num_heads (3-D X), rotary_embedding_dim, interleaved)
CASES = [
    ((2, 3, 5, 8), 0, 0, 0),
    ((2, 3, 5, 8), 0, 0, 1),
    ((2, 3, 5, 8), 0, 4, 0),
    ((2, 3, 5, 8), 0, 6, 1),
    ((1, 4, 7, 16), 0, 16, 0),
    ((2, 5, 24), 3, 0, 0),
    ((2, 5, 24), 3, 0, 1),
    ((2, 5, 24), 3, 4, 1),
    ((3, 1, 10), 1, 6, 0),
    ((0, 3, 4, 8), 0, 0, 0),
]


def batch_seq(xshape):
    return (xshape[0], xshape[1]) if len(xshape) == 3 else (xshape[0], xshape[2])


def attrs_of(heads, rot, interleaved):
    a = {"interleaved": interleaved}
    if heads:
        a["num_heads"] = heads
    if rot:
        a["rotary_embedding_dim"] = rot
    return a


def head_size(xshape, heads):
    return xshape[2] // heads if len(xshape) == 3 else xshape[3]


@pytest.mark.parametrize("with_positions", [True, False])
@pytest.mark.parametrize("xshape,heads,rot,interleaved", CASES, ids=ids)
def test_float32(xshape, heads, rot, interleaved, with_positions):
    half = (rot or head_size(xshape, heads)) // 2
    x, cos, sin, pos = rope_inputs(xshape, half, 12 if with_positions else None, batch_seq(xshape))
    got = check_parity(*rope_model(x, cos, sin, pos, attrs_of(heads, rot, interleaved)))
    ref = rotary_embedding(x, cos, sin, pos, interleaved=interleaved, rotary_embedding_dim=rot, num_heads=heads)
    np.testing.assert_allclose(got[0], ref, rtol=1e-5, atol=1e-6)


def test_constant_caches():
    x, cos, sin, pos = rope_inputs((2, 2, 6, 8), 4, 32, (2, 6))
    check_parity(*rope_model(x, cos, sin, pos, {}, constant_caches=True))


def test_num_heads_ignored_for_4d():
    """ORT ignores num_heads for 4-D X (the heads are X's dim 1)."""
    x, cos, sin, pos = rope_inputs((2, 3, 5, 8), 4, 10, (2, 5))
    check_parity(*rope_model(x, cos, sin, pos, {"num_heads": 4}))


@pytest.mark.parametrize("interleaved", [0, 1])
def test_float16(interleaved):
    x, cos, sin, pos = rope_inputs((2, 4, 9, 16), 8, 20, (2, 9), np.float16, seed=3)
    check_parity(*rope_model(x, cos, sin, pos, {"interleaved": interleaved}))


@pytest.mark.parametrize("interleaved", [0, 1])
def test_bfloat16(interleaved):
    """No bfloat16 kernel in ORT's CPU EP: the reference is the float32 one of the same values."""
    x, cos, sin, pos = rope_inputs((2, 9, 32), 4, 20, (2, 9), BF16, seed=4)
    attrs = {"interleaved": interleaved, "num_heads": 4}
    f32 = [v.astype(np.float32) for v in (x, cos, sin)]
    ref = run_cpu(*rope_model(*f32, pos, attrs))
    check_bf16(rope_model(x, cos, sin, pos, attrs)[0], {"x": x, "cos": cos, "sin": sin, "pos": pos}, ref)


def test_full_rotation_is_one_fused_kernel():
    """Full-width, non-interleaved rotation (every Llama-style model's): the casts, the two-row
    cos/sin selects and the products in one compiled kernel, no Concatenate (no copy of the
    swapped halves)."""
    cases = ["test_float16[0]", "test_float32[1x4x7x16-0-16-0-True]", "test_float32[2x5x24-3-0-0-False]"]
    census = [line for line in census_of_tests(__file__, cases)[0] if "Compiled" in line]
    assert len(census) >= 3, census
    for line in census:
        assert "Concatenate" not in line and line.count("Compiled") - line.count("CompiledBroadcastMaximum") == 1, line
