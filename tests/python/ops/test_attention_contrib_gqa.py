"""Parity tests of com.microsoft GroupQueryAttention (src/ops/attention_contrib_gqa.cc) against
ORT's CPU EP: prefill (with batch padding), decode into a shared past/present buffer at several
positions, packed QKV, rotary, GQA ratios, local windows, softcap, sinks, bias, float16/bfloat16;
and one session over several decode steps that must trace once."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from harness import (BF16, assert_close, assert_declined, assert_mlx_error, check_parity, onnx_type, random_array, run_cpu,
                     run_mlx_with_report)
from harness_bf16 import check_bf16

MS = "com.microsoft"
GQA_INPUTS = ["query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length",
              "cos_cache", "sin_cache", "position_ids", "attention_bias", "head_sink"]


def ms_model(op, feeds, attrs, outputs, dtype):
    """(model, feeds) of one com.microsoft `op` node; `feeds` maps input names (in schema order,
    None for an absent optional one) to arrays; `outputs` lists output names ("" for unused)."""
    names = list(feeds)
    while names and feeds[names[-1]] is None:
        names.pop()
    node = helper.make_node(op, [n if feeds[n] is not None else "" for n in names], outputs, domain=MS, **attrs)
    inputs = [helper.make_tensor_value_info(n, onnx_type(feeds[n].dtype), list(feeds[n].shape))
              for n in names if feeds[n] is not None]
    outs = [helper.make_tensor_value_info(o, onnx_type(dtype), None) for o in outputs if o]
    graph = helper.make_graph([node], f"{op}_test", inputs, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)])
    model.ir_version = 10
    return model, {n: a for n, a in feeds.items() if a is not None}


def rotary_caches(max_len, rot, dtype):
    inv = 1.0 / (10000 ** (np.arange(0, rot, 2) / rot))
    angles = np.arange(max_len)[:, None] * inv[None, :]
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


def gqa(batch, seq, heads, kv_heads, head_size, seqlens, total, dtype=np.float32, past_len=None, packed=False,
        rotary=None, bias=False, sink=False, present=True, seed=0, position_ids=None, **attrs):
    """(model, feeds) of a GroupQueryAttention node. `past_len`: the shared past/present buffer
    length (None: no past). `rotary`: None, or (rotary_dim, interleaved)."""
    rng = np.random.default_rng(seed)
    arr = lambda *shape: random_array(shape, dtype, rng, -1.5, 1.5)  # noqa: E731
    feeds = dict.fromkeys(GQA_INPUTS)
    if packed:
        feeds["query"] = arr(batch, seq, (heads + 2 * kv_heads) * head_size)
    else:
        feeds.update(query=arr(batch, seq, heads * head_size), key=arr(batch, seq, kv_heads * head_size),
                     value=arr(batch, seq, kv_heads * head_size))
    if past_len is not None:
        feeds.update(past_key=arr(batch, kv_heads, past_len, head_size),
                     past_value=arr(batch, kv_heads, past_len, head_size))
    feeds["seqlens_k"] = np.asarray(seqlens, np.int32) - 1
    feeds["total_sequence_length"] = np.asarray(total, np.int32)
    if rotary:
        rot, interleaved = rotary
        feeds["cos_cache"], feeds["sin_cache"] = rotary_caches(max(past_len or 0, total) + 4, rot, dtype)
        attrs.update(do_rotary=1, rotary_interleaved=interleaved)
    if position_ids is not None:
        feeds["position_ids"] = np.asarray(position_ids, np.int64)
    if bias:
        feeds["attention_bias"] = arr(batch, heads, seq, total)
    if sink:
        feeds["head_sink"] = arr(heads)
    outputs = ["output", "present_key", "present_value"] if present else ["output"]
    return ms_model("GroupQueryAttention", feeds, {"num_heads": heads, "kv_num_heads": kv_heads, **attrs},
                    outputs, dtype)


def check(model, feeds):
    dtype = feeds["query"].dtype
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {}
    return check_parity(model, feeds, **tol)


# (heads, kv_heads)
RATIOS = [(4, 4), (4, 2), (6, 1)]


@pytest.mark.parametrize("heads,kv_heads", RATIOS, ids=lambda v: str(v))
@pytest.mark.parametrize("packed", [False, True], ids=["separate", "packed"])
@pytest.mark.parametrize("past", [False, True], ids=["no_past", "shared_buffer"])
def test_prefill_with_batch_padding(heads, kv_heads, packed, past):
    """A right-padded batch prompt: entry 1 holds 3 real tokens of 5."""
    check(*gqa(3, 5, heads, kv_heads, 8, seqlens=[5, 3, 1], total=5, packed=packed, past_len=9 if past else None))


@pytest.mark.parametrize("seqlens", [[4, 9], [1, 12], [12, 7]], ids=lambda v: "_".join(map(str, v)))
@pytest.mark.parametrize("packed", [False, True], ids=["separate", "packed"])
@pytest.mark.parametrize("heads,kv_heads", [(4, 2), (2, 2)], ids=lambda v: str(v))
def test_decode_shared_buffer(seqlens, packed, heads, kv_heads):
    """One new token per entry written into a [B, Hkv, 12, D] buffer at seqlens_k[b]."""
    check(*gqa(2, 1, heads, kv_heads, 8, seqlens=seqlens, total=max(seqlens), packed=packed, past_len=12))


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rot,head_size", [(16, 16), (16, 32)], ids=["full", "partial"])
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_rotary(interleaved, rot, head_size, phase):
    if phase == "prefill":
        model = gqa(2, 4, 4, 2, head_size, seqlens=[4, 2], total=4, past_len=7, rotary=(rot, interleaved))
    else:
        model = gqa(2, 1, 4, 2, head_size, seqlens=[6, 3], total=6, past_len=7, rotary=(rot, interleaved), seed=1)
    check(*model)


@pytest.mark.parametrize("packed", [False, True], ids=["separate", "packed"])
def test_rotary_packed_decode(packed):
    check(*gqa(3, 1, 2, 1, 16, seqlens=[2, 5, 8], total=8, past_len=8, packed=packed, rotary=(16, 1)))


def test_subsequent_prompt():
    """A chunk of 3 tokens after 4 cached ones (batch 1, S > 1, S != total_sequence_length)."""
    check(*gqa(1, 3, 4, 2, 16, seqlens=[7], total=7, past_len=9, rotary=(16, 0)))


# (batch, seq, seqlens, total, past_len, position_ids)
POSITION_CASES = {
    "decode": (2, 1, [6, 3], 6, 7, [[2], [4]]),
    "prefill": (2, 4, [4, 4], 4, 7, [[3, 0, 5, 1], [6, 2, 3, 0]]),  # ORT reads only [0, 0] here
    "prefill_padded": (2, 4, [4, 2], 4, None, [[3, 0, 5, 1], [6, 2, 3, 0]]),
    "subsequent": (1, 3, [7], 7, 9, [[5, 1, 6]]),
}


@pytest.mark.parametrize("case", list(POSITION_CASES))
@pytest.mark.parametrize("interleaved", [0, 1])
def test_position_ids(case, interleaved):
    b, s, lens, total, past, pos = POSITION_CASES[case]
    check(*gqa(b, s, 4, 2, 16, seqlens=lens, total=total, past_len=past, rotary=(16, interleaved), position_ids=pos))


@pytest.mark.parametrize("window", [1, 3])
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_local_window(window, phase):
    if phase == "prefill":
        # No padding rows: for a padding row whose window reaches past the entry's length ORT's CPU
        # kernel reads scratch memory it never filled (the translation attends the keys inside).
        check(*gqa(2, 6, 4, 2, 8, seqlens=[6, 6], total=6, local_window_size=window))
    else:
        check(*gqa(2, 1, 4, 2, 8, seqlens=[7, 2], total=7, past_len=10, local_window_size=window))


@pytest.mark.parametrize("extra", [{"softcap": 2.0}, {"scale": 0.3}, {"smooth_softmax": 1}, {"sink": True},
                                   {"bias": True}, {"softcap": 1.5, "bias": True, "sink": True, "local_window_size": 2}],
                         ids=lambda d: "_".join(d))
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_scores_options(extra, phase):
    if phase == "prefill":
        check(*gqa(2, 5, 4, 2, 8, seqlens=[5, 5 if "local_window_size" in extra else 3], total=5, **extra))
    else:
        check(*gqa(2, 1, 4, 2, 8, seqlens=[4, 8], total=8, past_len=9, **extra))


@pytest.mark.parametrize("phase", ["prefill", "decode"])
@pytest.mark.parametrize("options", [{}, {"rotary": (16, 0), "softcap": 3.0, "local_window_size": 3}],
                         ids=["plain", "rotary_softcap_window"])
def test_float16(phase, options):
    if phase == "prefill":
        lens = [5, 5] if options else [5, 2]  # no padding rows with a window (see test_local_window)
        check(*gqa(2, 5, 4, 2, 16, seqlens=lens, total=5, past_len=8, dtype=np.float16, **options))
    else:
        check(*gqa(2, 1, 4, 2, 16, seqlens=[3, 8], total=8, past_len=8, dtype=np.float16, **options))


def test_bfloat16_against_float32():
    """ORT's CPU EP has no bfloat16 GroupQueryAttention: the float32 result rounded is the reference."""
    model, feeds = gqa(2, 1, 4, 2, 16, seqlens=[3, 6], total=6, past_len=7, dtype=np.float32, rotary=(16, 0))
    feeds = {k: (v.astype(BF16).astype(np.float32) if v.dtype == np.float32 else v) for k, v in feeds.items()}
    expected = run_cpu(model, feeds)
    bf16_model, _ = gqa(2, 1, 4, 2, 16, seqlens=[3, 6], total=6, past_len=7, dtype=BF16, rotary=(16, 0))
    check_bf16(bf16_model, {k: (v.astype(BF16) if v.dtype == np.float32 else v) for k, v in feeds.items()},
               expected)


def test_output_only():
    check(*gqa(2, 3, 2, 1, 8, seqlens=[3, 2], total=3, present=False))


def test_one_trace_over_decode_steps():
    """One session over several decode steps with the shared buffer: same shapes, different
    seqlens_k/total_sequence_length (data, not host values), one trace and compile."""
    steps = [[3, 5], [4, 6], [5, 7], [9, 2], [11, 12]]
    feeds_list, models = [], []
    for i, lens in enumerate(steps):
        model, feeds = gqa(2, 1, 4, 2, 16, seqlens=lens, total=max(lens), past_len=12, rotary=(16, 0), seed=i)
        models.append(model)
        feeds_list.append(feeds)
    outs, report, providers = run_mlx_with_report(models[0], feeds_list)
    assert providers == ["MLXExecutionProvider"], providers
    for feeds, got in zip(feeds_list, outs):
        for g, r in zip(got, run_cpu(models[0], feeds)):
            assert_close(g, r, rtol=1e-5, atol=1e-5)
    (part,) = report["runtime"]["partitions"]
    assert part["traces"] == 1 and part["cache_misses"] == 1, part
    assert part["cache_hits"] == len(steps) - 1, part


def test_non_shared_layout_fails_with_the_reason():
    """total_sequence_length beyond the past buffer, as a graph input the trace cannot read, means
    ORT's present is past + new (a shape the compiled graph cannot have): the run fails with the
    reason rather than giving plausible wrong numbers (or NaN, as it did before)."""
    model, feeds = gqa(2, 1, 4, 2, 8, seqlens=[5, 6], total=6, past_len=5)
    assert run_cpu(model, feeds)[1].shape[2] == 6
    with pytest.raises(Exception, match="total_sequence_length exceeds past_key's 5 rows"):
        run_mlx_with_report(model, [feeds])


@pytest.mark.parametrize("case", ["qk_output", "causal0", "quantized"])
def test_declined(case):
    # Equal lengths: ORT leaves the qk columns past an entry's length unwritten.
    model, feeds = gqa(2, 1, 4, 2, 8, seqlens=[5, 5], total=5, past_len=6)
    node = model.graph.node[0]
    if case == "qk_output":
        node.attribute.append(helper.make_attribute("qk_output", 1))
        node.output.append("qk")
        model.graph.output.append(helper.make_tensor_value_info("qk", TensorProto.FLOAT, None))
    elif case == "causal0":
        node.attribute.append(helper.make_attribute("causal", 0))
    elif case == "quantized":
        node.attribute.append(helper.make_attribute("k_quant_type", "PER_TENSOR"))
    try:
        run_cpu(model, feeds)
    except Exception:  # noqa: BLE001 - ORT's CPU EP rejects the case itself: the MLX run must fail too
        assert_mlx_error(model, feeds)
        return
    assert_declined(model, feeds)


def _run_shared(sess, feeds, names=("past_key", "past_value"), outs=("present_key", "present_value")):
    """Runs with past_key/past_value bound as present_key/present_value (one buffer each, as
    onnxruntime-genai's past_present_share_buffer binds them), in the EP's device memory where it
    lends some (llm_client.ep_memory); returns (output, the buffers' contents)."""
    from llm_client import bound_value, ep_memory, host_array

    memory = ep_memory(sess)
    binding = sess.io_binding()
    buffers = {}
    for name, value in feeds.items():
        if name in names:
            buffers[name] = bound_value(value, memory)
            binding.bind_ortvalue_input(name, buffers[name])
        else:
            binding.bind_cpu_input(name, value)
    binding.bind_output("output")
    for past, present in zip(names, outs):
        binding.bind_ortvalue_output(present, buffers[past])
    sess.run_with_iobinding(binding)
    return binding.copy_outputs_to_cpu()[0], [host_array(buffers[n], feeds[n].dtype) for n in names]


@pytest.mark.parametrize("phase", ["prefill", "decode", "decode_rotary_window"])
def test_present_bound_to_past_buffer_writes_rows_in_place(phase):
    """past and present one buffer: output and buffer as ORT's CPU EP leaves them (rows past the
    new ones untouched, as the CPU kernel leaves them when it sees one buffer), and only the new
    rows written (bytes_out_in_place); a total past the buffer falls back to the whole write.
    With the buffers in the EP's device memory (MLX on a GPU), ORT's buffer for present is asked
    for after evaluation until it has once been past's own, so a session's first run writes present
    whole: each sequence's rows as the CPU EP's, zeros past them (max(length, S) rows), and only
    the later runs write in place."""
    import onnxruntime as ort
    from llm_client import ReportedSession, ep_memory

    extra = {"rotary": (16, 0), "local_window_size": 3} if phase == "decode_rotary_window" else {}
    d = 16 if extra else 8  # ORT's CPU rotary wants a multiple of 16
    steps = [(4, [4, 2], 4)] if phase == "prefill" else [(1, [5, 9], 9), (1, [6, 10], 10)]  # S, lengths, total
    model = gqa(2, steps[0][0], 4, 2, d, steps[0][1], steps[0][2], past_len=10, **extra)[0]
    cpu = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    reported = ReportedSession(model)
    sess = reported.sess
    device_memory = ep_memory(sess) is not None
    for i, (seq, lengths, total) in enumerate(steps):
        _, feeds = gqa(2, seq, 4, 2, d, lengths, total, past_len=10, seed=i, **extra)
        got, got_kv = _run_shared(sess, feeds)
        ref, ref_kv = _run_shared(cpu, feeds)
        assert_close(got, ref, rtol=1e-5, atol=1e-5)
        for g, r in zip(got_kv, ref_kv):
            if device_memory and i == 0:  # the whole write (see above)
                for b, n in enumerate(max(length, seq) for length in lengths):
                    assert_close(g[b, :, :n], r[b, :, :n], rtol=1e-5, atol=1e-5)
                    assert not g[b, :, n:].any(), (b, n)
                continue
            assert_close(g, r, rtol=1e-5, atol=1e-5)
    # total 11 > the buffer's 10: present would be past + new (ORT's CPU EP reallocates), a shape
    # the compiled graph cannot have: the run fails with the reason, and writes nothing
    _, feeds = gqa(2, steps[0][0], 4, 2, d, [5, 11], 11, past_len=10, **extra)
    for cache in ("cos_cache", "sin_cache"):
        if cache in feeds:
            feeds[cache] = feeds[cache][:14]  # the session's shape (rows for positions < 14)
    with pytest.raises(Exception, match="total_sequence_length exceeds past_key's 10 rows"):
        _run_shared(sess, feeds)
    del sess
    runtime = reported.close()["runtime"]
    (part,) = runtime["partitions"]
    row = 2 * 2 * d * 4  # batch x kv heads x head size x 4 bytes, per new token
    out_bytes = 2 * 4 * d * 4  # output [2, S, 4 x 8] per token
    whole = 2 * 2 * 2 * 10 * d * 4  # present_key and present_value whole
    outputs = sum(step[0] for step in steps) * out_bytes
    if device_memory:  # the first run whole too; outputs copied into ORT's buffers or adopted
        assert part["bytes_out_in_place"] == 2 * sum(step[0] for step in steps[1:]) * row, part
        written = part["bytes_out_host_copied"] + part["bytes_out_adopted"] + part["bytes_out_device_copied"]
        assert written == outputs + whole, part
        if runtime["device_writes"]:  # a CUDA GPU: all by device kernels
            assert part["bytes_out_device_copied"] == written, part
        return
    assert part["bytes_out_in_place"] == 2 * sum(step[0] for step in steps) * row, part
    assert part["bytes_out_host_copied"] == outputs, part
