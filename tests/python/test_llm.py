"""LLMs end to end: the decoders and encoder of tests/models/llm/build_llm_models.py (generated
into build/models/llm, tiny sizes, random weights of a fixed seed) through a plain-ORT greedy
decode loop and through onnxruntime-genai's generator, on MLX against ORT's CPU EP.

Parity: prefill logits, then a 32-token greedy decode. fp32 models must produce the CPU EP's
tokens exactly; every model's logits are compared to the output's scale (assert_close_to_scale),
the fp16 decode teacher-forced with the CPU's tokens so that a near-tie cannot end the comparison.
Tolerances: fp32 1e-5 (the harness's). int4 models are MatMulNBits with fp32 activations at
accuracy_level 0 (dequantize, then an fp32 product), so fp32's holds; at accuracy_level 4 ORT's
CPU EP quantizes A to int8 per block and the EP does the same on MLX's CPU device (ops/quantized.cc). fp16 2.3e-3 of the scale:
after 2 layers in fp16, ORT's CPU EP differs from itself by 7.6e-4 of the logits' scale between its
disabled and full graph optimizations on genai_fp16_shared's decode (and by 1.4e-3 from the fp32
model), so the per-node 1e-3 is no measure for the whole model; 3x ORT's own spread, as
test_real_models does for its detector.

Placement and compile counts come from the EP's report: every node on MLX in one partition; a
shared-buffer decode adds no trace after its first step, through the plain loop (static shapes)
and through genai (whose growing attention mask is a dynamic dim, docs/dynamic_shapes.md);
prompt lengths cost one trace each, and nothing more when they come again.
Bytes come from the report too: with past and present bound to one buffer, each run writes only its
new KV rows into it and copies out only the logits (docs/kv_cache.md).

The genai-layout models use com.microsoft GroupQueryAttention, MatMulNBits,
SimplifiedLayerNormalization/SkipSimplifiedLayerNormalization and the encoder MultiHeadAttention,
SkipLayerNormalization and FastGelu. A model the EP cannot place whole is listed in
CONTRIB_PENDING with the reason: its placement tests are xfail(strict=True)."""
import os
import sys

import numpy as np
import pytest

import onnxruntime_ep_mlx as mlx_ep
from harness import EP, assert_close_to_scale, mlx_device
from llm_client import (Decoder, ReportedSession, all_on_mlx_in_one_partition, cpu_session, genai_generate,
                        genai_generate_many, total_traces)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "models", "llm"))
import build_llm_models as llm  # noqa: E402

OUT = os.path.join(ROOT, "build", "models", "llm")
DECODE_STEPS = 32
PROMPT = [5, 17, 99, 3, 250, 8, 41, 377, 12, 64, 200]

# variant -> what keeps it off MLX. MatMulNBits with accuracy_level 4, genai's builder default for
# the CPU EP, runs on MLX's CPU device with ORT's int8 quantization of A; on GPUs the EP declines it
# (ops/quantized.cc), and test_int4_accuracy_level_4_is_ort_level_4 asserts that decline.
ACC4_GPU_REASON = "accuracy_level=4 (int8 A, MLAS CompInt8) is reproduced on MLX's CPU device only"
CONTRIB_PENDING = {} if mlx_device() == "cpu" else {"genai_int4_b32_acc4_shared": f"MatMulNBits: {ACC4_GPU_REASON}"}
# The EP lends ORT device memory (MLX on a GPU): the caches are bound there (llm_client.Decoder).
DEVICE_MEMORY = mlx_ep.device_memory_info() is not None
VARIANTS = llm.variants("tiny")
DECODERS = [n for n, v in VARIANTS.items() if v[0] != "encoder"]
TOL = {"fp32": 1e-5, "fp16": 2.3e-3}  # see the module docstring


def pending(names):
    """pytest params of `names`, xfail(strict) where the model waits for contrib ops."""
    return [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=f"declined on MLX: {CONTRIB_PENDING[n]}"))
            if n in CONTRIB_PENDING else n for n in names]


@pytest.fixture(scope="module")
def models():
    dirs, cfg = llm.build(OUT, "tiny")
    return dirs, cfg


def decoder(models, name, sess):
    dirs, cfg = models
    form, dtype, _, shared = VARIANTS[name]
    return Decoder(sess, cfg, llm.NP_DTYPES[dtype], bool(shared), position_ids=form == "standard")


def path(models, name):
    return os.path.join(models[0][name], "model.onnx")


# --- the generator itself (CPU EP only) ---------------------------------------------------------

def test_int4_packing_is_what_ort_multiplies_by():
    """MatMulNBits of quantize_int4's initializers on ORT's CPU EP == x @ dequantize_int4(...)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    for symmetric, block, k, n in [(True, 32, 96, 40), (False, 128, 160, 24), (False, 32, 70, 9), (True, 128, 200, 5)]:
        w = rng.standard_normal((k, n)).astype(np.float32)
        g = llm.Graph("fp32")
        g.inputs.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, k]))
        g.outputs.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, n]))
        llm.matmul(g, "/m", "x", w, {"block_size": block, "symmetric": symmetric})
        g.nodes[-1].output[0] = "y"
        model = g.model({"": 21, llm.MS: 1}, "nbits")
        x = rng.standard_normal((3, k)).astype(np.float32)
        got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        packed, scales, zp = llm.quantize_int4(w, block, symmetric)
        assert_close_to_scale(got, x @ llm.dequantize_int4(packed, scales, zp, k, block), what=f"{symmetric} {block}")


def test_genai_layout_equals_standard_layout_on_cpu(models):
    """The builder layout (GQA with in-op rotary, packed QKV, skip norms) and the standard-ONNX
    form compute the same function on ORT's CPU EP: same tokens, logits to fp32 rounding."""
    ref = decoder(models, "standard_fp32", cpu_session(path(models, "standard_fp32"))).greedy(PROMPT, 8)
    for name in ("genai_fp32_shared", "genai_fp32_unshared"):
        got = decoder(models, name, cpu_session(path(models, name))).greedy(PROMPT, 8)
        assert got[1] == ref[1], name
        assert_close_to_scale(got[0], ref[0], what=name)


# --- plain ORT decode loop ----------------------------------------------------------------------

@pytest.mark.parametrize("name", DECODERS)
def test_decode_parity(models, name):
    """Prefill logits and a 32-token greedy decode: MLX (with whatever it declines on CPU) vs CPU."""
    dtype = VARIANTS[name][1]
    ref = decoder(models, name, cpu_session(path(models, name))).greedy(PROMPT, DECODE_STEPS)
    rs = ReportedSession(path(models, name))
    dec = decoder(models, name, rs.sess)
    forced = ref[1] if dtype == "fp16" else None
    got = dec.greedy(PROMPT, DECODE_STEPS, forced=forced)
    assert_close_to_scale(got[0], ref[0], rtol=TOL[dtype], what="prefill logits")
    for s, (g, r) in enumerate(zip(got[2], ref[2])):
        assert_close_to_scale(g, r, rtol=TOL[dtype], what=f"decode step {s} logits")
    if dtype == "fp32":
        assert got[1] == ref[1]
    del dec
    report = rs.close()
    assert report["runtime"]["partitions"], "nothing ran on MLX"


def test_int4_accuracy_level_4_is_ort_level_4(models):
    """accuracy_level 4 lets a kernel quantize activations to int8, and ORT's CPU EP does: its
    logits differ from the level-0 model's by more than fp32 rounding. MLX (all nodes, one
    partition) reproduces ORT's level-4 logits and tokens; test_decode_parity checks the decode.
    On GPUs the EP declines every MatMulNBits of the model, with its reason, and claims the rest."""
    name = "genai_int4_b32_acc4_shared"
    level0 = decoder(models, name, cpu_session(path(models, "genai_int4_b32_shared"))).greedy(PROMPT, 4)
    ref = decoder(models, name, cpu_session(path(models, name))).greedy(PROMPT, 4)
    with pytest.raises(AssertionError):
        assert_close_to_scale(ref[0], level0[0])
    if mlx_device() != "cpu":
        graph = ReportedSession(path(models, name)).close()["graphs"][0]
        declined = [(d["domain"], d["op_type"], d["reason"]) for d in graph["declined"]]
        assert declined and all(d[:2] == ("com.microsoft", "MatMulNBits") and ACC4_GPU_REASON in d[2]
                                for d in declined), declined
        assert graph["nodes_claimed"] == graph["nodes_total"] - len(declined), graph
        return
    rs = ReportedSession(path(models, name))
    dec = decoder(models, name, rs.sess)
    got = dec.greedy(PROMPT, 4)
    del dec
    ok, why = all_on_mlx_in_one_partition(rs.close())
    assert ok, why
    assert_close_to_scale(got[0], ref[0], what="prefill logits")
    assert got[1] == ref[1]


@pytest.mark.parametrize("name", pending(DECODERS))
def test_decoder_all_on_mlx_one_partition(models, name):
    rs = ReportedSession(path(models, name))
    decoder(models, name, rs.sess).greedy(PROMPT[:4], 2)
    ok, why = all_on_mlx_in_one_partition(rs.close())
    assert ok, why


def _traces_after(models, name, decode_steps):
    rs = ReportedSession(path(models, name))
    decoder(models, name, rs.sess).greedy(PROMPT, decode_steps)
    report = rs.close()
    return report, total_traces(report)


@pytest.mark.parametrize("name", pending([n for n in DECODERS if VARIANTS[n][3]]))
def test_shared_buffer_decode_does_not_retrace(models, name):
    """Static shapes: 64 more decode steps after the first cost no trace (one partition, all on MLX)."""
    report, first = _traces_after(models, name, 1)
    ok, why = all_on_mlx_in_one_partition(report)
    assert ok, why
    _, more = _traces_after(models, name, 65)
    assert more == first, f"64 decode steps added {more - first} traces"


def _kv_row_bytes(models, name):
    """Bytes of one token's keys and values over every layer (what one decode step appends)."""
    cfg = models[1]
    return cfg.layers * 2 * cfg.kv_heads * cfg.head_size * np.dtype(llm.NP_DTYPES[VARIANTS[name][1]]).itemsize


def _logits_bytes(models, name):
    return models[1].vocab * np.dtype(llm.NP_DTYPES[VARIANTS[name][1]]).itemsize


def _caches_bytes(models, name):
    """Bytes of every layer's whole [1, kv_heads, max_len, head] key and value buffers."""
    cfg = models[1]
    return _kv_row_bytes(models, name) * cfg.max_len


def assert_in_place_in_device_memory(part, models, name, steps):
    """The counters of a shared-buffer decode of `steps` steps after PROMPT, the caches in the EP's
    device memory: ORT's buffer for present is asked for after evaluation until it has once been
    past's own (so that an output ORT allocates stays adoptable), so the prefill writes the caches
    whole and every decode step only its rows; out of the EP go the logits of every run and the
    prefill's caches."""
    assert part["runs"] == 1 + steps, part
    assert part["bytes_out_in_place"] == steps * _kv_row_bytes(models, name), part
    out = part["bytes_out_host_copied"] + part["bytes_out_adopted"] + part["bytes_out_device_copied"]
    assert out == (len(PROMPT) + steps) * _logits_bytes(models, name) + _caches_bytes(models, name), part


@pytest.mark.parametrize("name", pending([n for n in DECODERS if VARIANTS[n][3]]))
def test_shared_buffer_decode_writes_only_new_rows(models, name):
    """past and present bound to one buffer (genai's past_present_share_buffer): each run writes
    only its new rows of every KV cache into it (bytes_out_in_place), and copies out nothing but the
    logits -- not the [1, kv_heads, max_len, head] buffers (64 KiB a layer here, fp32). Where the
    EP has device memory (a GPU), the caches are bound there and the prefill writes them whole
    (assert_in_place_in_device_memory)."""
    steps = 8
    rs = ReportedSession(path(models, name))
    decoder(models, name, rs.sess).greedy(PROMPT, steps)
    part = rs.close()["runtime"]["partitions"][0]
    if DEVICE_MEMORY:
        assert_in_place_in_device_memory(part, models, name, steps)
        return
    tokens = len(PROMPT) + steps  # the prefill's rows, then one per decode step
    assert part["runs"] == 1 + steps, part
    assert part["bytes_out_in_place"] == tokens * _kv_row_bytes(models, name), part
    assert part["bytes_out_host_copied"] == tokens * _logits_bytes(models, name), part


def in_child(function, name, steps, env):
    """This module's `function`(name, steps) in a child process with `env` added (the EP reads its
    switches once per process): the JSON its last stdout line holds, and its stderr."""
    import json
    import subprocess

    here = os.path.dirname(os.path.abspath(__file__))
    code = (f"import sys; sys.path[:0] = [{os.path.join(ROOT, 'python')!r}, {here!r}]; "
            f"import test_llm as t; t.{function}({name!r}, {steps})")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def shared_decode_in_child(name, steps):
    """(tokens, the partition's counters) of a shared-buffer greedy decode, printed as JSON: run
    in a child process by the test below (the device-memory switch is read once per process)."""
    import json

    dirs, cfg = llm.build(OUT, "tiny")
    rs = ReportedSession(os.path.join(dirs[name], "model.onnx"))
    form, dtype, _, shared = VARIANTS[name]
    dec = Decoder(rs.sess, cfg, llm.NP_DTYPES[dtype], bool(shared))  # the caches in the EP's memory
    assert dec.kv_memory is not None, "the EP lends no device memory"
    tokens = dec.greedy(PROMPT, steps)[1]
    del dec
    print(json.dumps([tokens, rs.close()["runtime"]["partitions"][0]]))


def test_shared_buffer_in_place_with_device_memory_forced(models):
    """ONNXRUNTIME_EP_MLX_DEVICE_MEMORY=force (the GPU's device-memory path, over MLX's CPU
    allocator), the caches allocated in the EP's memory: assert_in_place_in_device_memory's
    counters; tokens as on the CPU EP."""
    name, steps = "genai_fp32_shared", 6
    (tokens, part), _ = in_child("shared_decode_in_child", name, steps,
                                 env={"ONNXRUNTIME_EP_MLX_DEVICE_MEMORY": "force"})
    assert tokens == decoder(models, name, cpu_session(path(models, name))).greedy(PROMPT, steps)[1]
    assert_in_place_in_device_memory(part, models, name, steps)


def decode_in_child(name, steps):
    """A shared-buffer greedy decode's tokens, printed as JSON (the EP's graph census is read once
    per process: the test below runs this in a child)."""
    import json

    dirs, cfg = llm.build(OUT, "tiny")
    rs = ReportedSession(os.path.join(dirs[name], "model.onnx"))
    tokens = decoder((dirs, cfg), name, rs.sess).greedy(PROMPT, steps)[1]
    rs.close()
    print(json.dumps(tokens))


def growing_decode_in_child(name, steps):
    """decode_in_child with genai's mask ([1, total], growing by a token a step)."""
    import json

    dirs, cfg = llm.build(OUT, "tiny")
    dtype = llm.NP_DTYPES[VARIANTS[name][1]]
    rs = ReportedSession(os.path.join(dirs[name], "model.onnx"))
    tokens = Decoder(rs.sess, cfg, dtype, True, growing_mask=True).greedy(PROMPT, steps)[1]
    rs.close()
    print(json.dumps(tokens))


def test_gpu_graphs_forced_greedy_tokens(models):
    """ONNXRUNTIME_EP_MLX_FUSED_GPU_PATHS=force32: a GPU's graphs on MLX's CPU device (float32 into
    the fused attention, MLX's fallbacks of its fused kernels), with genai's growing mask: the
    prompt, a first prompt the trace knows (total_sequence_length folds from the mask's shape and
    equals the prompt's length), attends its new rows alone (no Concatenate with the 64-row buffer:
    the first census line, the prompt's trace), the decode steps the buffer and the new row (on
    MLX's CPU device they concatenate; on a CUDA GPU the decode-step kernel reads the buffer where
    it is, so no step concatenates: the thirtieth session's H200); the greedy tokens are ORT CPU
    EP's."""
    name, steps = "genai_fp32_shared", 6
    tokens, stderr = in_child("growing_decode_in_child", name, steps,
                              env={"ONNXRUNTIME_EP_MLX_FUSED_GPU_PATHS": "force32",
                                   "ONNXRUNTIME_EP_MLX_GRAPH_CENSUS": "1"})
    cpu = Decoder(cpu_session(path(models, name)), models[1], llm.NP_DTYPES["fp32"], True, growing_mask=True)
    assert tokens == cpu.greedy(PROMPT, steps)[1]
    census = [line for line in stderr.splitlines() if "MLX primitives per run" in line]
    assert len(census) >= 2 and "Concatenate" not in census[0], census
    if mlx_device() == "cpu":
        assert "Concatenate" in census[1], census
    else:
        assert "CustomKernel" in census[1], census


def test_decode_step_hands_rows_as_they_are_and_one_offsets(models):
    """A decode step's graph (ONNXRUNTIME_EP_MLX_GRAPH_CENSUS=graph) ends in the logits' Contiguous
    only: the in-place K/V rows are outputs as the trace made them (no Contiguous each; the writes
    make strided rows contiguous themselves), and the layers' offsets, computed anew by each
    GroupQueryAttention from the same seqlens_k, are one output (one int32 Reshape to [B]), where
    they were a Contiguous and a Reshape per K/V row (88 primitives of a 22-layer step)."""
    import re

    name, steps = "genai_fp32_shared", 3  # float32: the tokens compare exactly on a GPU too
    tokens, stderr = in_child("decode_in_child", name, steps, env={"ONNXRUNTIME_EP_MLX_GRAPH_CENSUS": "graph"})
    assert tokens == decoder(models, name, cpu_session(path(models, name))).greedy(PROMPT, steps)[1]
    graph = stderr.split("MLX graph of a run")[-1].splitlines()
    assert len(graph) > 20, stderr[-2000:]
    contiguous = [line for line in graph if line.startswith("Contiguous ")]
    # The offsets output: an int32 Reshape of GroupQueryAttention's [B, 1, 1, 1] offsets to [B]
    # among the graph's outputs. With device writes (GPUs) the graph also outputs their range
    # check's verdict, an int32 scalar reshaped to [1] (runtime/device_writes.cc, OffsetsInRange),
    # which two H100 runs counted as a second offsets array.
    outputs = set(re.findall(r"(\w+) \[", next(line for line in graph if line.startswith("Outputs:"))))
    offsets = [line for line in graph
               if (m := re.match(r"^Reshape \w+ \[\(\d+,1,1,1\), int32\] -> (\w+) \[\(\d+\), int32\]$", line))
               and m.group(1) in outputs]
    vocab = models[1].vocab
    assert len(contiguous) == 1 and f"(1,1,{vocab})" in contiguous[0], contiguous  # the logits
    assert len(offsets) == 1, (offsets, [line for line in graph if line.startswith("Reshape") and "int32" in line])


def test_shared_layout_with_its_own_present_buffer(models):
    """The shared-buffer model run without binding present to past (ORT allocates present): the
    whole present is written, rows past the new ones zero, and the decode matches the CPU EP. (With
    device memory the EP hands ORT present in its own buffer, adopted, which ORT copies to the host.)"""
    name, cfg = "genai_fp32_shared", models[1]
    shape = (1, cfg.kv_heads, cfg.max_len, cfg.head_size)
    names = [(f"past_key_values.{i}.{kv}", f"present.{i}.{kv}") for i in range(cfg.layers) for kv in ("key", "value")]
    rs = ReportedSession(path(models, name))
    cpu = cpu_session(path(models, name))
    caches = [{p: np.zeros(shape, np.float32) for p, _ in names} for _ in range(2)]
    length, tokens = 0, PROMPT
    for _ in range(3):
        total = length + len(tokens)
        mask = np.zeros((1, cfg.max_len), np.int64)
        mask[:, :total] = 1
        feeds = {"input_ids": np.asarray([tokens], np.int64), "attention_mask": mask}
        outs = []
        for sess, kv in zip((rs.sess, cpu), caches):
            got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {**feeds, **kv})))
            kv.update({p: got[q] for p, q in names})
            outs.append(got)
        assert_close_to_scale(outs[0]["logits"], outs[1]["logits"], what=f"logits at {length}")
        for p, q in names:
            assert_close_to_scale(outs[0][q][:, :, :total], outs[1][q][:, :, :total], what=q)
            assert not outs[0][q][:, :, total:].any(), q
        length, tokens = total, [int(np.argmax(outs[1]["logits"][0, -1]))]
    part = rs.close()["runtime"]["partitions"][0]
    assert part["bytes_out_in_place"] == 0, part
    out = part["bytes_out_host_copied"] + part["bytes_out_adopted"] + part["bytes_out_device_copied"]
    assert out >= 3 * len(names) * int(np.prod(shape)) * 4, part


@pytest.mark.parametrize("name", pending([n for n in DECODERS if not VARIANTS[n][3]]))
def test_concatenating_decode_traces_once_per_length(models, name):
    """Past/present concatenated: each step has new shapes, so one trace per length; decoding the
    same prompt again reuses every compiled graph (bounded by the EP's compile cache)."""
    rs = ReportedSession(path(models, name))
    dec = decoder(models, name, rs.sess)
    for _ in range(2):
        dec.greedy(PROMPT, DECODE_STEPS)
    del dec
    report = rs.close()
    ok, why = all_on_mlx_in_one_partition(report)
    assert ok, why
    part = report["runtime"]["partitions"][0]
    assert (part["traces"], part["cache_hits"]) == (DECODE_STEPS + 1, DECODE_STEPS + 1), part


@pytest.mark.parametrize("name", pending(["standard_fp32", "genai_fp32_shared", "genai_fp32_unshared"]))
def test_prompt_lengths_trace_once_each(models, name):
    """10 prompt lengths: at most one trace each, and none when they come again."""
    lengths = [1, 2, 3, 5, 8, 11, 16, 23, 31, 40]
    rng = np.random.default_rng(3)
    prompts = [list(rng.integers(0, models[1].vocab, n)) for n in lengths]
    rs = ReportedSession(path(models, name))
    dec = decoder(models, name, rs.sess)
    for _ in range(2):
        for p in prompts:
            dec.start()
            dec.step(p)
    del dec
    report = rs.close()
    ok, why = all_on_mlx_in_one_partition(report)
    assert ok, why
    part = report["runtime"]["partitions"][0]
    assert part["runs"] == 2 * len(lengths)
    assert part["traces"] <= len(lengths), part
    assert part["cache_hits"] >= len(lengths), part


def test_standard_padded_batch_prefill(models):
    """Batch 2, the second prompt left-padded (as genai pads a batch): the bool mask of causal AND
    padding. Rows of padding tokens attend to nothing (ONNX gives 0, ORT's CPU kernel a uniform
    average), so only real tokens' logits are compared; they never see the padding."""
    cfg, name = models[1], "standard_fp32"
    rng = np.random.default_rng(7)
    ids = rng.integers(0, cfg.vocab, (2, 9))
    mask = np.ones((2, 9), np.int64)
    mask[1, :4] = 0
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
    feeds = {"input_ids": ids, "attention_mask": mask, "position_ids": positions}
    for i in range(cfg.layers):
        for kv in ("key", "value"):
            feeds[f"past_key_values.{i}.{kv}"] = np.zeros((2, cfg.kv_heads, 0, cfg.head_size), np.float32)
    ref = cpu_session(path(models, name)).run(None, feeds)[0]
    rs = ReportedSession(path(models, name))
    got = rs.sess.run(None, feeds)[0]
    ok, why = all_on_mlx_in_one_partition(rs.close())
    assert ok, why
    real = mask.astype(bool)
    assert_close_to_scale(got[real], ref[real], what="logits of real tokens")


# --- onnxruntime-genai's generator --------------------------------------------------------------

@pytest.mark.parametrize("name", DECODERS)
def test_genai_generator_parity(models, name):
    """og.Model/og.Generator on MLX (plugin EP library) vs on the CPU EP: 32 greedy tokens."""
    dtype = VARIANTS[name][1]
    ref_tokens, ref_logits, _ = genai_generate(models[0][name], PROMPT, DECODE_STEPS, on_mlx=False)
    tokens, logits, report = genai_generate(models[0][name], PROMPT, DECODE_STEPS, on_mlx=True)
    assert len(ref_tokens) == DECODE_STEPS
    assert report["runtime"]["partitions"] and any(p["runs"] > 0 for p in report["runtime"]["partitions"])
    assert_close_to_scale(logits[0], ref_logits[0], rtol=TOL[dtype], what="first token logits")
    if dtype == "fp32":
        assert tokens == ref_tokens
        for s, (g, r) in enumerate(zip(logits, ref_logits)):
            assert_close_to_scale(g, r, rtol=TOL[dtype], what=f"step {s}")
    else:  # compare while the two runs fed the same tokens
        n = next((i for i, (a, b) in enumerate(zip(tokens, ref_tokens)) if a != b), len(tokens))
        for s in range(min(n + 1, len(tokens))):
            assert_close_to_scale(logits[s], ref_logits[s], rtol=TOL[dtype], what=f"step {s}")


GENAI_HOST_CACHES = ("onnxruntime-genai appends a plugin EP as a CPU device and keeps its KV caches in host "
                     "memory: with the EP's device memory (a GPU) every run copies the caches in and out")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(DEVICE_MEMORY, strict=True,
                                                                          reason=GENAI_HOST_CACHES))
                                  for n in ["genai_fp32_shared", "genai_fp16_shared"]])
def test_genai_shared_buffer_writes_only_new_rows(models, name):
    """Through onnxruntime-genai (past_present_share_buffer): every run writes only its new KV rows
    and copies out only the logits (not where the EP has device memory: GENAI_HOST_CACHES)."""
    _, _, report = genai_generate(models[0][name], PROMPT, 8, on_mlx=True)
    part = report["runtime"]["partitions"][0]
    tokens = len(PROMPT) + part["runs"] - 1  # the prompt's rows, then one per decode run
    assert part["runs"] > 1, part
    assert part["bytes_out_in_place"] == tokens * _kv_row_bytes(models, name), part
    assert part["bytes_out_host_copied"] == tokens * _logits_bytes(models, name), part


@pytest.mark.parametrize("name", pending(["standard_fp32", "genai_fp32_shared", "genai_int4_b32_shared"]))
def test_genai_session_all_on_mlx(models, name):
    _, _, report = genai_generate(models[0][name], PROMPT, 4, on_mlx=True)
    ok, why = all_on_mlx_in_one_partition(report)
    assert ok, why


@pytest.mark.parametrize("name", ["genai_fp32_shared", "genai_int4_b32_shared"])
def test_genai_shared_buffer_decode_does_not_retrace(models, name):
    """genai grows attention_mask by one column per step (static masks only with graph capture),
    and its builder's total_sequence_length is Shape(attention_mask)[1]. The mask's length is a
    dynamic dim of the partition (docs/dynamic_shapes.md): the prefill traces for its shape, the
    first decode step once for every mask length, and 64 more steps add no trace. The tokens are
    the CPU EP's."""
    steps = 66
    ref_tokens, _, _ = genai_generate(models[0][name], PROMPT, steps, on_mlx=False)
    _, _, short = genai_generate(models[0][name], PROMPT, 2, on_mlx=True)
    tokens, _, long = genai_generate(models[0][name], PROMPT, steps, on_mlx=True)
    assert tokens == ref_tokens
    assert (total_traces(short), total_traces(long)) == (2, 2)
    (part,) = long["runtime"]["partitions"]
    assert part["runs"] == steps and part["cache_hits"] == steps - 2, part


def test_genai_prompt_lengths_share_one_decode_function(models):
    """10 prompt lengths through one genai model (one session, the same max_length, so the same
    shared past/present buffer): one trace per prompt length (input_ids' length reaches every
    MatMul, so it cannot be dynamic) and one for all their decode steps; the tokens are the CPU
    EP's."""
    name, steps = "genai_fp32_shared", 4
    lengths = [1, 2, 3, 5, 8, 11, 16, 23, 31, 40]
    rng = np.random.default_rng(3)
    prompts = [[int(t) for t in rng.integers(0, models[1].vocab - 1, n)] for n in lengths]
    ref, _ = genai_generate_many(models[0][name], prompts, steps, on_mlx=False, max_length=64)
    got, report = genai_generate_many(models[0][name], prompts, steps, on_mlx=True, max_length=64)
    assert [t for t, _ in got] == [t for t, _ in ref]
    (part,) = report["runtime"]["partitions"]
    assert part["traces"] == len(lengths) + 1, part


BUCKET_LENGTHS = [1, 2, 3, 5, 8, 11, 16, 23, 31, 40]


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(DEVICE_MEMORY, strict=True,
                                                                          reason=GENAI_HOST_CACHES + " (no buckets then)"))
                                  for n in pending(["genai_fp32_shared", "genai_int4_b32_shared",
                                                    "genai_int4_b32_acc4_shared"])])
def test_genai_prompt_buckets_bound_the_traces(models, name, monkeypatch):
    """The 10 prompt lengths again with ONNXRUNTIME_EP_MLX_PROMPT_BUCKETS=16: once input_ids and
    the mask have varied, a first prompt pads both to 16, 32 or 64 rows (tests/python/
    test_prompt_buckets.py has the rules). 6 traces instead of 11: the first prompt (nothing has
    varied yet), the decode function, the first decode step's mask padded alone (refused at
    GroupQueryAttention: the query does not hold the prompt) and the three buckets. Tokens are the
    CPU EP's; logits are the unbucketed EP run's, and the CPU EP's too but at accuracy_level 4:
    there an input to the int8 quantization of A that differs from ORT's in its last bit can round
    to the next integer (the prompt of 5 here: 0.024 in one row of logits, with and without
    buckets; every node before lm_head within 1.2e-6). The KV rows written in place are the
    unpadded run's bytes: only the prompt's rows, the buffer's rows after them untouched."""
    steps, lengths = 4, BUCKET_LENGTHS
    rng = np.random.default_rng(3)
    prompts = [[int(t) for t in rng.integers(0, models[1].vocab - 1, n)] for n in lengths]
    ref, _ = genai_generate_many(models[0][name], prompts, steps, on_mlx=False, max_length=64)
    unpadded, plain = genai_generate_many(models[0][name], prompts, steps, on_mlx=True, max_length=64)
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_PROMPT_BUCKETS", "16")
    got, report = genai_generate_many(models[0][name], prompts, steps, on_mlx=True, max_length=64)
    assert [t for t, _ in got] == [t for t, _ in ref]
    peers = [unpadded] if (VARIANTS[name][2] or {}).get("accuracy_level") == 4 else [unpadded, ref]
    for peer in peers:
        for n, (g, r) in zip(lengths, zip(got, peer)):
            for step, (a, b) in enumerate(zip(g[1], r[1])):
                assert_close_to_scale(a, b, TOL["fp32"], what=f"{name}: prompt of {n}, step {step}")
    (part,) = report["runtime"]["partitions"]
    assert (part["traces"], part["bucketed_runs"], part["bucket_refusals"]) == (6, len(lengths) - 1, 1), part
    assert "GroupQueryAttention" in part["bucket_refusal"], part
    (unpadded,) = plain["runtime"]["partitions"]
    assert part["bytes_out_in_place"] == unpadded["bytes_out_in_place"], (part, unpadded)


@pytest.mark.parametrize("name", pending(["genai_fp32_shared", "genai_int4_b32_shared"]))
def test_prompt_buckets_through_a_decode_loop(models, name, monkeypatch):
    """The plain-ORT loop with genai's mask ([1, total]) and the caches bound as past and present
    (in the EP's device memory where it lends some: a GPU), ONNXRUNTIME_EP_MLX_PROMPT_BUCKETS=16:
    the 10 prompt lengths, 2 greedy steps each, take 6 traces as through genai, and every logit is
    the CPU EP's."""
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_PROMPT_BUCKETS", "16")
    rng = np.random.default_rng(3)
    prompts = [[int(t) for t in rng.integers(0, models[1].vocab - 1, n)] for n in BUCKET_LENGTHS]
    form, dtype, _, _ = VARIANTS[name]
    cpu = Decoder(cpu_session(path(models, name)), models[1], llm.NP_DTYPES[dtype], True, growing_mask=True)
    rs = ReportedSession(path(models, name))
    dec = Decoder(rs.sess, models[1], llm.NP_DTYPES[dtype], True, growing_mask=True)
    for n, prompt in zip(BUCKET_LENGTHS, prompts):
        ref_prefill, ref_tokens, ref_steps = cpu.greedy(prompt, 2)
        prefill, tokens, steps = dec.greedy(prompt, 2, forced=ref_tokens)
        assert tokens == ref_tokens, n
        for what, a, b in [("prefill", prefill, ref_prefill)] + [(f"step {k}", x, y) for k, (x, y) in
                                                                  enumerate(zip(steps, ref_steps))]:
            assert_close_to_scale(a, b, TOL["fp32"], what=f"{name}: prompt of {n}, {what}")
    del dec
    (part,) = rs.close()["runtime"]["partitions"]
    assert (part["traces"], part["bucketed_runs"], part["bucket_refusals"]) == (6, len(BUCKET_LENGTHS) - 1, 1), part


def test_shared_buffer_mask_longer_than_past_is_retraced(models):
    """A plain-ORT loop on the genai model with a past buffer of 8 rows and masks of 5, 6, 7, then
    9 columns: the first length traces for its shape, the next once with the length dynamic
    (present stays 8 rows, assuming total <= 8), the 7 reuses it, and 9 breaks the assumption, so
    that run is traced for its shape (present of 9 rows, as ORT's CPU EP sizes it)."""
    name = "genai_fp32_shared"
    cfg = models[1]
    rng = np.random.default_rng(11)
    past = {f"past_key_values.{i}.{kv}": rng.standard_normal((1, cfg.kv_heads, 8, cfg.head_size)).astype(np.float32)
            for i in range(cfg.layers) for kv in ("key", "value")}
    feeds = [dict(past, input_ids=np.array([[7]], np.int64), attention_mask=np.ones((1, t), np.int64))
             for t in (5, 6, 7, 9)]
    cpu = cpu_session(path(models, name))
    rs = ReportedSession(path(models, name))
    names = [o.name for o in cpu.get_outputs()]
    for f in feeds:
        got, ref = rs.sess.run(None, f), cpu.run(None, f)
        for g, r, name in zip(got, ref, names):
            assert g.shape == r.shape, (name, f["attention_mask"].shape)
            assert_close_to_scale(g, r, what=f"{name} at mask {f['attention_mask'].shape}")
    report = rs.close()
    (part,) = report["runtime"]["partitions"]
    assert part["traces"] == 3, part


# --- encoder ------------------------------------------------------------------------------------

def _encoder_feeds(models):
    cfg = llm.EncoderConfig()
    rng = np.random.default_rng(5)
    b, s = 2, 13
    ids = rng.integers(0, cfg.vocab, (b, s))
    mask = np.ones((b, s), np.int64)
    mask[1, 9:] = 0  # the second sequence is padded
    bias = (0.5 * rng.standard_normal((1, cfg.heads, s, s))).astype(np.float32)
    return {"input_ids": ids, "attention_mask": mask, "attention_bias": bias}


def test_encoder_parity(models):
    feeds = _encoder_feeds(models)
    ref = cpu_session(path(models, "encoder_fp32")).run(None, feeds)
    rs = ReportedSession(path(models, "encoder_fp32"))
    got = rs.sess.run(None, feeds)
    rs.close()
    assert_close_to_scale(got[0], ref[0], what="last_hidden_state")


@pytest.mark.parametrize("name", pending(["encoder_fp32"]))
def test_encoder_all_on_mlx(models, name):
    rs = ReportedSession(path(models, name))
    rs.sess.run(None, _encoder_feeds(models))
    ok, why = all_on_mlx_in_one_partition(rs.close())
    assert ok, why

