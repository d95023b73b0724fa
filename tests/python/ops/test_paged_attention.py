"""Tests of com.microsoft PagedAttention (src/ops/attention_contrib_paged.cc). ORT's CPU EP has no
kernel for it (ORT registers CUDA ones only), so the reference is `paged_attention_ref` below: a
float64 numpy implementation written from the CUDA kernel's semantics (paged_attention_impl.cu:
slots from block_table or slot_mapping, bottom-right causal mask, window of local_window_size
positions, softcap, head sinks, QK-Norm then rotary at past_seqlens + row, the new K/V rounded to
T where the cache stores them). When onnxruntime's CUDA EP is available (onnxruntime-gpu),
test_reference_matches_ort_cuda checks that reference against ORT's own kernel."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from harness import BF16, assert_close, assert_ran_on_mlx, mlx_session, onnx_type, run_mlx_nodes
from harness_bf16 import check_bf16

MS = "com.microsoft"
INPUTS = ["query", "key", "value", "key_cache", "value_cache", "cumulative_sequence_length", "past_seqlens",
          "block_table", "cos_cache", "sin_cache", "slot_mapping", "head_sink", "q_norm_weight", "k_norm_weight"]
OUTPUTS = ["output", "key_cache_out", "value_cache_out"]


def paged_model(feeds, attrs, outputs=OUTPUTS):
    """A one-node PagedAttention model over `feeds` (input name -> array, None when absent)."""
    names = [n for n in INPUTS if n in feeds]
    while feeds[names[-1]] is None:
        names.pop()
    node = helper.make_node("PagedAttention", [n if feeds[n] is not None else "" for n in names], outputs,
                            domain=MS, **attrs)
    inputs = [helper.make_tensor_value_info(n, onnx_type(feeds[n].dtype), list(feeds[n].shape))
              for n in names if feeds[n] is not None]
    dtype = onnx_type(feeds["query"].dtype)
    outs = [helper.make_tensor_value_info(o, dtype, None) for o in outputs if o]
    graph = helper.make_graph([node], "paged_attention_test", inputs, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)])
    model.ir_version = 10
    return model, {n: a for n, a in feeds.items() if a is not None}


def paged_case(new, past, heads=4, kv_heads=2, head_size=16, block_size=16, blocks_per_seq=3, spare_blocks=2,
               dtype=np.float16, packed=False, rotary=None, sink=False, qk_norm=False, slot_mapping=False,
               unmapped_tail=False, seed=0, **attrs):
    """(model, feeds, attrs) of sequences with `new` new tokens on top of `past` cached ones.
    `rotary`: None or (rotary_dim, interleaved). The block table is a random permutation of the
    cache's blocks (`spare_blocks` more than the sequences use: never touched); `unmapped_tail`
    marks the blocks past each sequence's last position -1."""
    rng = np.random.default_rng(seed)
    arr = lambda *shape: rng.uniform(-1.5, 1.5, shape).astype(dtype)  # noqa: E731
    batch, tokens = len(new), sum(new)
    blocks = batch * blocks_per_seq + spare_blocks
    feeds = dict.fromkeys(INPUTS)
    if packed:
        feeds["query"] = arr(tokens, (heads + 2 * kv_heads) * head_size)
    else:
        feeds.update(query=arr(tokens, heads * head_size), key=arr(tokens, kv_heads * head_size),
                     value=arr(tokens, kv_heads * head_size))
    feeds["key_cache"] = arr(blocks, block_size, kv_heads, head_size)
    feeds["value_cache"] = arr(blocks, block_size, kv_heads, head_size)
    feeds["cumulative_sequence_length"] = np.concatenate([[0], np.cumsum(new)]).astype(np.int32)
    feeds["past_seqlens"] = np.asarray(past, np.int32)
    table = rng.permutation(blocks)[:batch * blocks_per_seq].reshape(batch, blocks_per_seq).astype(np.int32)
    if unmapped_tail:
        for b, (n, p) in enumerate(zip(new, past)):
            table[b, (n + p + block_size - 1) // block_size:] = -1
    feeds["block_table"] = table
    if rotary:
        rot, interleaved = rotary
        angles = rng.uniform(0, 2 * np.pi, (blocks_per_seq * block_size, rot // 2))
        feeds["cos_cache"], feeds["sin_cache"] = np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)
        attrs.update(do_rotary=1, rotary_interleaved=interleaved)
    if slot_mapping:
        slots = paged_slots(feeds, block_size)
        slots[rng.random(tokens) < 0.3] = -1  # some writes skipped (prefix-cache hits)
        feeds["slot_mapping"] = slots
    if sink:
        feeds["head_sink"] = rng.uniform(-2, 6, heads).astype(dtype)
    if qk_norm:
        feeds["q_norm_weight"], feeds["k_norm_weight"] = arr(head_size), arr(head_size)
    attrs = {"num_heads": heads, "kv_num_heads": kv_heads, **attrs}
    model, feeds = paged_model(feeds, attrs)
    return model, feeds, attrs


def token_places(feeds):
    """Per token: (sequence, position in the sequence)."""
    cum, past = feeds["cumulative_sequence_length"], feeds["past_seqlens"]
    seq = np.searchsorted(cum[1:], np.arange(cum[-1]), side="right")
    return seq, past[seq] + np.arange(cum[-1]) - cum[seq]


def paged_slots(feeds, block_size):
    """The flat cache slot of each token's K/V, derived from block_table (ORT's DerivedSlotResolver)."""
    seq, pos = token_places(feeds)
    block = feeds["block_table"][seq, pos // block_size]
    return np.where(block >= 0, block * block_size + pos % block_size, -1).astype(np.int32)


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w.astype(np.float64)


def rotate(x, cos, sin, interleaved):
    """x [T, heads, D] float64 rotated by cos/sin [T, rot / 2]; channels past rot pass."""
    rot = 2 * cos.shape[1]
    c, s = cos[:, None, :], sin[:, None, :]
    y = x.copy()
    if interleaved:
        x1, x2 = x[..., 0:rot:2], x[..., 1:rot:2]
        y[..., 0:rot:2], y[..., 1:rot:2] = x1 * c - x2 * s, x1 * s + x2 * c
    else:
        x1, x2 = x[..., :rot // 2], x[..., rot // 2:rot]
        y[..., :rot // 2], y[..., rot // 2:rot] = x1 * c - x2 * s, x1 * s + x2 * c
    return y


def paged_attention_ref(feeds, attrs):
    """[output, key_cache_out, value_cache_out] of ORT's CUDA PagedAttention, computed in float64
    (values rounded to T where the kernel stores T: the normalised and rotated Q/K, the cache)."""
    dtype = feeds["query"].dtype
    heads, kv_heads = attrs["num_heads"], attrs["kv_num_heads"]
    rnd = lambda x: x.astype(dtype).astype(np.float64)  # noqa: E731
    query = feeds["query"].astype(np.float64)
    tokens = query.shape[0]
    kc, vc = feeds["key_cache"].copy(), feeds["value_cache"].copy()
    blocks, block_size, _, d = kc.shape
    if feeds.get("key") is None:
        query, key, value = np.split(query, [heads * d, (heads + kv_heads) * d], axis=1)
    else:
        key, value = feeds["key"].astype(np.float64), feeds["value"].astype(np.float64)
    q, k, v = (x.reshape(tokens, x.shape[1] // d, d) for x in (query, key, value))
    seq, pos = token_places(feeds)
    if feeds.get("q_norm_weight") is not None:
        eps = attrs.get("qk_norm_epsilon", 1e-6)
        q, k = rnd(rms_norm(q, feeds["q_norm_weight"], eps)), rnd(rms_norm(k, feeds["k_norm_weight"], eps))
    if attrs.get("do_rotary", 0):
        cos, sin = (feeds[n].astype(np.float64)[pos] for n in ("cos_cache", "sin_cache"))
        interleaved = attrs.get("rotary_interleaved", 0) == 1
        q, k = rnd(rotate(q, cos, sin, interleaved)), rnd(rotate(k, cos, sin, interleaved))
    slots = feeds["slot_mapping"] if feeds.get("slot_mapping") is not None else paged_slots(feeds, block_size)
    flat_k, flat_v = kc.reshape(blocks * block_size, kv_heads, d), vc.reshape(blocks * block_size, kv_heads, d)
    for t in range(tokens):
        if 0 <= slots[t] < blocks * block_size:
            flat_k[slots[t]], flat_v[slots[t]] = k[t].astype(dtype), v[t].astype(dtype)
    scale = attrs.get("scale", 0.0) or 1.0 / np.sqrt(d)
    softcap, window = attrs.get("softcap", 0.0), attrs.get("local_window_size", -1)
    sink = feeds.get("head_sink")
    out = np.zeros((tokens, heads, d))
    for t in range(tokens):
        j = np.arange(pos[t] + 1)
        if window > 0:
            j = j[j > pos[t] - window]
        block = feeds["block_table"][seq[t], j // block_size]
        j, block = j[block >= 0], block[block >= 0]
        rows = block * block_size + j % block_size
        kk = np.repeat(flat_k[rows].astype(np.float64), heads // kv_heads, axis=1)  # [keys, heads, d]
        vv = np.repeat(flat_v[rows].astype(np.float64), heads // kv_heads, axis=1)
        scores = scale * np.einsum("hd,jhd->hj", q[t], kk)
        if softcap > 0:
            scores = softcap * np.tanh(scores / softcap)
        if sink is not None:
            scores = np.concatenate([sink.astype(np.float64)[:, None], scores], axis=1)
        p = np.exp(scores - scores.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        out[t] = np.einsum("hj,jhd->hd", p[:, 1:] if sink is not None else p, vv)
    return [out.reshape(tokens, heads * d).astype(dtype), kc, vc]


def check_paged(model, feeds, attrs):
    """MLX's outputs against the float64 reference (the dtype's tolerance; the cache slots not
    written must be untouched, bit for bit), every node on MLX (ORT's profile)."""
    expected = paged_attention_ref(feeds, attrs)
    got, nodes = run_mlx_nodes(model, feeds)
    assert_ran_on_mlx(nodes)
    assert_close(got[0], expected[0], what="output")
    for g, e, name in zip(got[1:], expected[1:], ("key_cache", "value_cache")):
        written = (g != feeds[name]).any(axis=(2, 3)) | (e != feeds[name]).any(axis=(2, 3))
        np.testing.assert_array_equal(g[~written], feeds[name][~written], err_msg=f"{name} slots not written")
        assert_close(g, e, what=f"{name}_out")
    return got, expected


# (new tokens, past tokens) per sequence: decode steps, prefill, mixed (chunked prefill + decode).
BATCHES = {
    "decode": ([1, 1, 1], [5, 0, 30]),
    "prefill": ([7, 3, 12], [0, 0, 0]),
    "mixed": ([1, 9, 4, 1], [17, 0, 20, 47]),
    "block_edge": ([2, 16], [15, 16]),
    "idle_decode": ([1, 0, 1, 0], [4, 9, 0, 0]),  # continuous batching: sequences without a token
    "idle_prefill": ([5, 0, 6], [0, 3, 2]),
}


@pytest.mark.parametrize("batch", list(BATCHES))
@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2), (6, 1)])
def test_lengths_and_gqa(batch, heads, kv_heads):
    check_paged(*paged_case(*BATCHES[batch], heads=heads, kv_heads=kv_heads))


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rot", [16, 8])
@pytest.mark.parametrize("packed", [False, True])
def test_rotary(interleaved, rot, packed):
    check_paged(*paged_case(*BATCHES["mixed"], rotary=(rot, interleaved), packed=packed))


@pytest.mark.parametrize("batch", ["decode", "mixed"])
@pytest.mark.parametrize("window", [1, 3, 20])
def test_local_window(batch, window):
    check_paged(*paged_case(*BATCHES[batch], local_window_size=window))


@pytest.mark.parametrize("options", [{"softcap": 2.0}, {"scale": 0.7}, {"sink": True},
                                     {"softcap": 3.0, "sink": True, "local_window_size": 4}, {"qk_norm": True},
                                     {"qk_norm": True, "rotary": (16, 0), "qk_norm_epsilon": 1e-3}])
def test_score_options(options):
    check_paged(*paged_case(*BATCHES["mixed"], **options))


@pytest.mark.parametrize("batch", ["decode", "mixed"])
def test_slot_mapping_with_skipped_writes(batch):
    check_paged(*paged_case(*BATCHES[batch], slot_mapping=True, seed=3))


def test_unmapped_tail_blocks_and_packed():
    check_paged(*paged_case(*BATCHES["mixed"], unmapped_tail=True, packed=True))


@pytest.mark.parametrize("block_size,head_size", [(32, 8), (64, 24)])
def test_block_and_head_sizes(block_size, head_size):
    check_paged(*paged_case([3, 1], [40, 70], block_size=block_size, head_size=head_size, blocks_per_seq=3))


@pytest.mark.parametrize("batch", ["decode", "mixed"])
def test_bfloat16(batch):
    """bfloat16 through Cast wrappers (ORT's Python API cannot feed it): the node on MLX."""
    model, feeds, attrs = paged_case(*BATCHES[batch], dtype=BF16, rotary=(16, 1), softcap=2.0)
    check_bf16(model, feeds, paged_attention_ref(feeds, attrs))


def test_no_tokens():
    """A step with no new token: an empty output, the caches unchanged."""
    check_paged(*paged_case([0, 0], [3, 7]))


def test_output_only():
    model, feeds, attrs = paged_case(*BATCHES["mixed"])
    model, feeds = paged_model({n: feeds.get(n) for n in INPUTS}, attrs, outputs=["output"])
    got, nodes = run_mlx_nodes(model, feeds)
    assert_ran_on_mlx(nodes)
    assert_close(got[0], paged_attention_ref(feeds, attrs)[0])


def test_one_trace_over_decode_steps():
    """Decode steps of one session: same shapes, new lengths each step (data, not host values),
    the caches fed back: one trace, and the cache after the steps as the reference leaves it."""
    from harness import run_mlx_with_report

    model, feeds, attrs = paged_case([1, 1], [3, 9], blocks_per_seq=2)
    steps, rng = [], np.random.default_rng(1)
    kc, vc = feeds["key_cache"], feeds["value_cache"]
    for i in range(4):
        step = dict(feeds, past_seqlens=np.asarray([3 + i, 9 + 5 * i], np.int32),
                    query=rng.uniform(-1, 1, feeds["query"].shape).astype(np.float16))
        step.update(key_cache=kc, value_cache=vc)
        _, kc, vc = paged_attention_ref(step, attrs)
        steps.append(step)
    outs, report, providers = run_mlx_with_report(model, steps)
    assert providers == ["MLXExecutionProvider"], providers
    for step, got in zip(steps, outs):
        for g, e in zip(got, paged_attention_ref(step, attrs)):
            assert_close(g, e)
    (part,) = report["runtime"]["partitions"]
    assert part["traces"] == 1 and part["cache_hits"] == len(steps) - 1, part


def run_bound(sess, feeds, device=None):
    """Runs with each cache bound as its own output (one buffer each, as ORT's CUDA EP requires),
    on the ORT `device` named (None: the EP's device memory where it lends some, else host memory;
    llm_client.ep_memory); returns [output, key cache, value cache] as the buffers hold them after
    the run."""
    from llm_client import bound_value, ep_memory, host_array

    binding = sess.io_binding()
    caches = ("key_cache", "value_cache")
    if device is None:
        buffers = {n: bound_value(feeds[n], ep_memory(sess)) for n in caches}
    else:
        buffers = {n: ort.OrtValue.ortvalue_from_numpy(feeds[n].copy(), device, 0) for n in caches}
    for name, value in feeds.items():
        if name in buffers:
            binding.bind_ortvalue_input(name, buffers[name])
        else:
            binding.bind_cpu_input(name, value)
    binding.bind_output("output")
    binding.bind_ortvalue_output("key_cache_out", buffers["key_cache"])
    binding.bind_ortvalue_output("value_cache_out", buffers["value_cache"])
    sess.run_with_iobinding(binding)
    if device is not None:  # ORT's own device values read back through OrtValue.numpy()
        return [binding.copy_outputs_to_cpu()[0]] + [buffers[n].numpy().copy() for n in caches]
    return [binding.copy_outputs_to_cpu()[0]] + [host_array(buffers[n], feeds[n].dtype) for n in caches]


# (new, past, rows written in place per block): decode-shaped steps write one row per block; a
# decode-shaped step whose sequence 0 has two tokens in one block does not fit: the whole caches.
BOUND = {"decode": ([1, 1, 1], [5, 0, 30], 1), "mixed": ([1, 9, 4, 1], [17, 0, 20, 47], 15),
         "two_in_a_block": ([2, 0, 1], [3, 5, 0], 0)}


@pytest.mark.parametrize("case", list(BOUND))
def test_caches_bound_as_outputs(case):
    """The caches bound as their own outputs: the buffers hold the updated caches after the run,
    and only the rows of each block's run of new slots were written (bytes_out_in_place). With the
    caches in the EP's device memory (MLX on a GPU), ORT's buffer for an output is asked for after
    evaluation until it has once been the input's own, so a session's first run writes the caches
    whole: there the second run (fresh buffers of the same feeds) is the one written in place."""
    from llm_client import ReportedSession, ep_memory

    new, past, rows = BOUND[case]
    model, feeds, attrs = paged_case(new, past, rotary=(16, 0))
    reported = ReportedSession(model)
    for _ in range(2 if ep_memory(reported.sess) is not None else 1):
        got = run_bound(reported.sess, feeds)
        for g, e, what in zip(got, paged_attention_ref(feeds, attrs), OUTPUTS):
            assert_close(g, e, what=what)
    (part,) = reported.close()["runtime"]["partitions"]
    blocks, _, kv_heads, head_size = feeds["key_cache"].shape
    assert part["bytes_out_in_place"] == 2 * blocks * rows * kv_heads * head_size * 2, part


def test_bad_lengths_fail_the_run():
    """cumulative_sequence_length not ending at the token count, or a sequence past its blocks:
    ORT's kernel rejects them; the MLX run fails instead of inventing an output."""
    model, feeds, _ = paged_case(*BATCHES["mixed"])
    sess = mlx_session(model)
    bad = dict(feeds, cumulative_sequence_length=np.asarray([0, 1, 10, 14, 14], np.int32))
    with pytest.raises(Exception, match="cumulative_sequence_length"):
        sess.run(None, bad)
    bad = dict(feeds, past_seqlens=np.asarray([17, 0, 20, 48], np.int32))  # 48 + 1 > 3 blocks x 16
    with pytest.raises(Exception, match="past_seqlens"):
        sess.run(None, bad)


@pytest.mark.parametrize("case", ["is_causal0", "latent", "quantized", "rotary_offset", "window0"])
def test_declined(case):
    """Cases the translation does not implement: the EP declines the node (it names the reason in
    its claim report), and with no other EP that has a kernel the session cannot be created."""
    import json
    import os
    import tempfile

    _, feeds, attrs = paged_case(*BATCHES["mixed"], kv_heads=1)
    extra = {"is_causal0": {"is_causal": 0}, "latent": {"kv_cache_layout": "LATENT"},
             "quantized": {"k_quant_type": "PER_TENSOR"}, "rotary_offset": {"rotary_offset": 8},
             "window0": {"local_window_size": 0}}[case]
    outputs = OUTPUTS
    if case == "latent":  # one cache, V its leading channels: no value, value_cache or value_cache_out
        feeds.update(value=None, value_cache=None)
        outputs = OUTPUTS[:2]
    model, feeds = paged_model({n: feeds.get(n) for n in INPUTS}, {**attrs, **extra}, outputs)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "report.json")
        os.environ["ONNXRUNTIME_EP_MLX_REPORT"] = path
        try:
            with pytest.raises(Exception):
                mlx_session(model)
        finally:
            del os.environ["ONNXRUNTIME_EP_MLX_REPORT"]
        import gc

        gc.collect()
        with open(path) as f:
            report = json.load(f)
    declined = [d for g in report["graphs"] for d in g["declined"] if d["op_type"] == "PagedAttention"]
    assert declined and declined[0]["reason"], report


# ORT's CUDA kernels round the rotated Q/K in T arithmetic and FlashAttention rounds P to T before
# P @ V: ORT's own test_paged_attention_cuda.py compares them to its reference at 5e-3.
CUDA_TOLERANCE = {"rtol": 5e-3, "atol": 5e-3}
CUDA_CASES = {
    "prefill_gqa": dict(new=[7, 3, 12], past=[0, 0, 0]),
    "mixed_rotary": dict(new=[1, 9, 4, 1], past=[17, 0, 20, 47], rotary=(16, 0)),
    "mixed_rotary_interleaved_packed": dict(new=[1, 9, 4, 1], past=[17, 0, 20, 47], rotary=(16, 1), packed=True),
    "decode_window_softcap": dict(new=[1, 1, 1], past=[5, 0, 30], local_window_size=3, softcap=2.0),
    "decode_sink": dict(new=[1, 1, 1], past=[5, 0, 30], sink=True),
    "slot_mapping": dict(new=[1, 9, 4, 1], past=[17, 0, 20, 47], slot_mapping=True, seed=3),
    "qk_norm_rotary": dict(new=[1, 9, 4, 1], past=[17, 0, 20, 47], qk_norm=True, rotary=(16, 0)),
    "block_256": dict(new=[5, 1], past=[300, 0], block_size=256, blocks_per_seq=2, head_size=64),
}


def run_ort_cuda(model, feeds):
    """ORT's CUDA EP, with each cache bound as its own output (the kernel requires it)."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CUDAExecutionProvider"])
    return run_bound(sess, feeds, "cuda")


@pytest.mark.skipif("CUDAExecutionProvider" not in ort.get_available_providers(),
                    reason="ORT's CUDA EP is not available (PagedAttention has CUDA kernels only; "
                           "run this file where onnxruntime-gpu is installed to cross-check the reference)")
@pytest.mark.parametrize("case", list(CUDA_CASES))
def test_reference_matches_ort_cuda(case):
    """The float64 reference against ORT's CUDA kernel, and MLX against the reference."""
    from onnxruntime.capi import onnxruntime_pybind11_state as capi

    schema = [s for s in capi.get_all_operator_schema() if s.name == "PagedAttention" and s.domain == MS]
    if not schema or [i.name for i in schema[0].inputs][:len(INPUTS)] != INPUTS:
        pytest.skip(f"onnxruntime {ort.__version__}'s PagedAttention schema is not the one these tests build "
                    "(1.31's: 4-D caches, slot_mapping, head_sink, q/k norm weights)")
    model, feeds, attrs = paged_case(**CUDA_CASES[case])
    cuda = run_ort_cuda(model, feeds)
    got, expected = check_paged(model, feeds, attrs)
    for c, e, what in zip(cuda, expected, OUTPUTS):
        assert_close(c, e, what=f"ORT CUDA {what}", **CUDA_TOLERANCE)
