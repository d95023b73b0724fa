"""LLM test models in the layouts real tools produce, with random weights (fixed seed).

Three forms, each written as <out>/<name>/model.onnx (+ genai_config.json for the decoders):

* `genai`: onnxruntime-genai's model-builder layout for a Llama/Qwen2 decoder
  (onnxruntime_genai/models/builders/base.py, 0.18): inputs input_ids, attention_mask,
  past_key_values.{i}.key/value; outputs logits, present.{i}.key/value; the attention-mask
  subgraph seqlens_k = Cast<int32>(ReduceSum(attention_mask) - 1) and total_seq_len =
  Cast<int32>(Shape(attention_mask)[1]); per layer SimplifiedLayerNormalization (first) /
  com.microsoft SkipSimplifiedLayerNormalization, one packed QKV MatMul (+ bias Add for Qwen2),
  com.microsoft GroupQueryAttention with in-op rotary (do_rotary=1, cos_cache/sin_cache
  [max_len, head/2]), SiLU as Sigmoid*Mul; MatMul in fp32/fp16 or com.microsoft MatMulNBits
  int4 packed as ORT's MatMulNBits expects (B uint8 [N, blocks, block/2], low nibble first,
  scales [N*blocks], optional packed zero points); node and value names as the builder's.
* `standard`: the same decoder in standard ONNX (opset 23: Attention with past/present and a
  bool mask, RMSNormalization, RotaryEmbedding with position_ids), past/present concatenated
  (no shared buffer), as an exporter produces it.
* `encoder`: a BERT-style encoder: embeddings + LayerNormalization, com.microsoft
  MultiHeadAttention (packed bias, key_padding_mask from the padding mask, attention_bias),
  SkipLayerNormalization and FastGelu.

The decoders of one config and seed share their weights, so `genai` and `standard` compute the
same function (the tests check that on the CPU EP). Nothing here is committed as a model:
tests generate into build/models/llm.

    python tests/models/llm/build_llm_models.py --out build/models/llm            # test sizes
    python tests/models/llm/build_llm_models.py --size qwen2-0.5b --forms standard # benchmark size
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MS = "com.microsoft"


@dataclasses.dataclass(frozen=True)
class LlmConfig:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    max_len: int = 256  # context_length: rotary cache rows and genai's max_length
    rope_theta: float = 1e6
    eps: float = 1e-6
    qkv_bias: bool = True  # Qwen2 has q/k/v biases, Llama none

    @property
    def head_size(self):
        return self.hidden // self.heads


SIZES = {
    # Odd-ish sizes on purpose: 3 query heads per kv head, K not a multiple of 128.
    "tiny": LlmConfig(hidden=96, layers=2, heads=6, kv_heads=2, intermediate=160, vocab=384),
    # Qwen2-0.5B's shape (config.json of Qwen/Qwen2-0.5B).
    "qwen2-0.5b": LlmConfig(hidden=896, layers=24, heads=14, kv_heads=2, intermediate=4864, vocab=151936,
                            max_len=2048),
}

NP_DTYPES = {"fp32": np.float32, "fp16": np.float16}
ONNX_DTYPES = {"fp32": TensorProto.FLOAT, "fp16": TensorProto.FLOAT16}


# --- weights --------------------------------------------------------------------------------

def make_weights(cfg: LlmConfig, seed: int = 0):
    """fp32 weights of a decoder, HF names; matrices as ONNX MatMul's B ([in, out])."""
    rng = np.random.default_rng(seed)

    def linear(n_in, n_out):
        return rng.standard_normal((n_in, n_out), dtype=np.float32) / np.float32(np.sqrt(n_in))

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    q, kv = cfg.heads * cfg.head_size, cfg.kv_heads * cfg.head_size
    w = {"embed": rng.standard_normal((cfg.vocab, cfg.hidden), dtype=np.float32)}
    for i in range(cfg.layers):
        p = f"layers.{i}."
        w[p + "input_norm"] = norm(cfg.hidden)
        w[p + "post_norm"] = norm(cfg.hidden)
        w[p + "q"], w[p + "k"], w[p + "v"] = linear(cfg.hidden, q), linear(cfg.hidden, kv), linear(cfg.hidden, kv)
        if cfg.qkv_bias:
            w[p + "q_bias"] = (0.1 * rng.standard_normal(q)).astype(np.float32)
            w[p + "k_bias"] = (0.1 * rng.standard_normal(kv)).astype(np.float32)
            w[p + "v_bias"] = (0.1 * rng.standard_normal(kv)).astype(np.float32)
        w[p + "o"] = linear(q, cfg.hidden)
        w[p + "gate"] = linear(cfg.hidden, cfg.intermediate)
        w[p + "up"] = linear(cfg.hidden, cfg.intermediate)
        w[p + "down"] = linear(cfg.intermediate, cfg.hidden)
    w["final_norm"] = norm(cfg.hidden)
    w["lm_head"] = linear(cfg.hidden, cfg.vocab)
    return w


def rotary_caches(cfg: LlmConfig):
    """cos/sin [max_len, head/2] as the builder makes them (rotate-half, not interleaved)."""
    dim = cfg.head_size
    inv_freq = 1.0 / (cfg.rope_theta ** (np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / dim))
    t = np.arange(cfg.max_len, dtype=np.float32)
    freqs = np.outer(t, inv_freq).astype(np.float32)
    return np.cos(freqs).astype(np.float32), np.sin(freqs).astype(np.float32)


def quantize_int4(w_kn, block_size, symmetric=True):
    """MatMulNBits (bits=4) initializers for a MatMul weight [K, N]: (B uint8 [N, blocks,
    block/2], scales fp32 [N*blocks], zero points uint8 [N*ceil(blocks/2)] or None). Symmetric
    as MLAS quantizes it: scale = v/-8 where v is the block's value of largest magnitude, q =
    clip(round(w/scale) + 8, 0, 15), zero point 8 implied. Asymmetric: scale = (max - min)/15
    over the block (min <= 0 <= max), zero point = round(-min/scale)."""
    k, n = w_kn.shape
    blocks = -(-k // block_size)
    w = np.zeros((n, blocks * block_size), np.float32)
    w[:, :k] = w_kn.T
    w = w.reshape(n, blocks, block_size)
    if symmetric:
        idx = np.abs(w).argmax(axis=2)
        vmax = np.take_along_axis(w, idx[..., None], axis=2)[..., 0]
        scale = vmax / -8.0
        safe = np.where(scale == 0, 1.0, scale)
        q = np.clip(np.round(w / safe[..., None]) + 8, 0, 15).astype(np.uint8)
        zp = None
    else:
        lo = np.minimum(w.min(axis=2), 0.0)
        hi = np.maximum(w.max(axis=2), 0.0)
        scale = (hi - lo) / 15.0
        safe = np.where(scale == 0, 1.0, scale)
        zpv = np.clip(np.round(-lo / safe), 0, 15).astype(np.uint8)
        q = np.clip(np.round(w / safe[..., None]) + zpv[..., None], 0, 15).astype(np.uint8)
        zp_pad = np.full((n, blocks + blocks % 2), 0, np.uint8)
        zp_pad[:, :blocks] = zpv
        zp = (zp_pad[:, 0::2] | (zp_pad[:, 1::2] << 4)).reshape(-1)
    packed = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
    return packed, scale.astype(np.float32).reshape(-1), zp


def dequantize_int4(packed, scales, zp, k, block_size):
    """The [K, N] weight a MatMulNBits node of these initializers multiplies by (for checks)."""
    n, blocks, _ = packed.shape
    q = np.empty((n, blocks, block_size), np.float32)
    q[..., 0::2] = packed & 0x0F
    q[..., 1::2] = packed >> 4
    if zp is None:
        z = np.full((n, blocks), 8.0, np.float32)
    else:
        z2 = np.stack([zp & 0x0F, zp >> 4], axis=-1).reshape(n, -1)[:, :blocks]
        z = z2.astype(np.float32)
    w = (q - z[..., None]) * scales.reshape(n, blocks)[..., None]
    return w.reshape(n, -1)[:, :k].T.copy()


# --- graph construction -----------------------------------------------------------------------

class Graph:
    """Nodes, initializers and value infos, named the way the genai builder names them."""

    def __init__(self, dtype):
        self.dtype = dtype
        self.np_dtype = NP_DTYPES[dtype]
        self.nodes, self.inits, self.values = [], {}, []
        self.inputs, self.outputs = [], []

    def init(self, name, value, cast=True):
        if name not in self.inits:
            v = np.asarray(value)
            if cast and v.dtype == np.float32:
                v = v.astype(self.np_dtype)
            self.inits[name] = numpy_helper.from_array(v, name)
        return name

    def node(self, op, name, inputs, n_out=1, domain="", outputs=None, **attrs):
        outs = outputs or [f"{name}/output_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, domain=domain or None, **attrs))
        return outs[0]

    def model(self, opsets, name):
        graph = helper.make_graph(self.nodes, name, self.inputs, self.outputs, list(self.inits.values()),
                                  value_info=self.values)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()],
                              producer_name="build_llm_models")
        m.ir_version = 10
        return m


def matmul(g, name, x, w, quant):
    """MatMul, or MatMulNBits when quant = dict(block_size, symmetric, accuracy_level)."""
    base = name[1:].replace("/", ".")
    if quant is None:
        return g.node("MatMul", f"{name}/MatMul", [x, g.init(base + ".weight", w)])
    bs = quant["block_size"]
    packed, scales, zp = quantize_int4(w, bs, quant.get("symmetric", True))
    inputs = [x, g.init(base + ".MatMulNBits.qweight", packed), g.init(base + ".MatMulNBits.scales", scales)]
    if zp is not None:
        inputs.append(g.init(base + ".MatMulNBits.qzeros", zp))
    k, n = w.shape
    return g.node("MatMulNBits", f"{name}/MatMulNBits", inputs, domain=MS, K=k, N=n, bits=4, block_size=bs,
                  accuracy_level=quant.get("accuracy_level", 0))


def build_genai_decoder(cfg, w, dtype="fp32", quant=None):
    """onnxruntime-genai builder layout (see the module docstring)."""
    g = Graph(dtype)
    t = ONNX_DTYPES[dtype]
    hs = cfg.head_size
    g.inputs += [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
                 helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                               ["batch_size", "total_sequence_length"])]
    for i in range(cfg.layers):
        for kv in ("key", "value"):
            g.inputs.append(helper.make_tensor_value_info(
                f"past_key_values.{i}.{kv}", t, ["batch_size", cfg.kv_heads, "past_sequence_length", "kv_cache_dim"]))
    g.outputs.append(helper.make_tensor_value_info("logits", t, ["batch_size", "sequence_length", cfg.vocab]))
    for i in range(cfg.layers):
        for kv in ("key", "value"):
            g.outputs.append(helper.make_tensor_value_info(
                f"present.{i}.{kv}", t, ["batch_size", cfg.kv_heads, "total_sequence_length", "kv_cache_dim"]))

    one_1d = g.init("/model/constants/INT64/[1]", np.array([1], np.int64))
    one = g.init("/model/constants/INT64/1", np.array(1, np.int64))
    # attention-mask subgraph (make_attention_mask_reformatting_for_gqa)
    mb = "/model/attn_mask_reformat/attn_mask_subgraph"
    rs = g.node("ReduceSum", f"{mb}/ReduceSum", ["attention_mask", one_1d], keepdims=0)
    sub = g.node("Sub", f"{mb}/Sub", [rs, one_1d])
    seqlens_k = g.node("Cast", f"{mb}/Sub/Cast", [sub], to=TensorProto.INT32)
    shape = g.node("Shape", f"{mb}/Shape", ["attention_mask"])
    gather = g.node("Gather", f"{mb}/Gather", [shape, one], axis=0)
    total_seq_len = g.node("Cast", f"{mb}/Gather/Cast", [gather], to=TensorProto.INT32)

    cos, sin = rotary_caches(cfg)
    cos_cache, sin_cache = g.init("cos_cache", cos), g.init("sin_cache", sin)
    x = g.node("Gather", "/model/embed_tokens/Gather", [g.init("model.embed_tokens.weight", w["embed"]), "input_ids"])

    def layernorm(layer, location, root, skip, weight, last=False):
        wname = g.init(f"model.layers.{layer}.{location}_layernorm.weight", weight)
        base = f"/model/layers.{layer}/{location}_layernorm"
        if skip is None:
            return g.node("SimplifiedLayerNormalization", f"{base}/LayerNorm", [root, wname],
                          outputs=[f"{base}/output_0"], axis=-1, epsilon=cfg.eps, stash_type=1), root
        outs = [f"{base}/output_0"] if last else [f"{base}/output_0", "", "", f"{base}/output_3"]
        g.node("SkipSimplifiedLayerNormalization", f"{base}/SkipLayerNorm", [root, skip, wname], domain=MS,
               outputs=outs, epsilon=cfg.eps)
        return outs[0], (None if last else outs[3])

    root, skip = x, None
    for i in range(cfg.layers):
        p, b = f"layers.{i}.", f"/model/layers.{i}"
        normed, root = layernorm(i, "input", root, skip, w[p + "input_norm"])
        qkv_w = np.concatenate([w[p + "q"], w[p + "k"], w[p + "v"]], axis=1)
        qkv = matmul(g, f"{b}/attn/qkv_proj", normed, qkv_w, quant)
        if cfg.qkv_bias:
            bias = np.concatenate([w[p + "q_bias"], w[p + "k_bias"], w[p + "v_bias"]])
            qkv = g.node("Add", f"{b}/attn/qkv_proj/Add", [g.init(f"model.layers.{i}.attn.qkv_proj.bias", bias), qkv])
        attn = g.node("GroupQueryAttention", f"{b}/attn/GroupQueryAttention",
                      [qkv, "", "", f"past_key_values.{i}.key", f"past_key_values.{i}.value", seqlens_k,
                       total_seq_len, cos_cache, sin_cache],
                      domain=MS, outputs=[f"{b}/attn/GroupQueryAttention/output_0", f"present.{i}.key",
                                          f"present.{i}.value"],
                      num_heads=cfg.heads, kv_num_heads=cfg.kv_heads, scale=float(1.0 / np.sqrt(hs)),
                      local_window_size=-1, softcap=0.0, do_rotary=1, rotary_interleaved=0)
        o = matmul(g, f"{b}/attn/o_proj", attn, w[p + "o"], quant)
        normed, root = layernorm(i, "post_attention", root, o, w[p + "post_norm"])
        gate = matmul(g, f"{b}/mlp/gate_proj", normed, w[p + "gate"], quant)
        up = matmul(g, f"{b}/mlp/up_proj", normed, w[p + "up"], quant)
        sig = g.node("Sigmoid", f"{b}/mlp/act_fn/Sigmoid", [gate])
        act = g.node("Mul", f"{b}/mlp/act_fn/Mul", [gate, sig])
        mul = g.node("Mul", f"{b}/mlp/Mul", [act, up])
        skip = matmul(g, f"{b}/mlp/down_proj", mul, w[p + "down"], quant)
    final, _ = layernorm(cfg.layers, "final_norm", root, skip, w["final_norm"], last=True)
    # as the builder: the final norm is model.layers.{num_layers}.final_norm_layernorm
    matmul(g, "/lm_head", final, w["lm_head"], quant)
    g.nodes[-1].output[0] = "logits"
    return g.model({"": 22, MS: 1}, "genai_decoder")


def genai_config(cfg, dtype, share_buffer, position_ids=False, filename="model.onnx", model_type="qwen2"):
    """genai_config.json as make_genai_config writes it (search: greedy). `position_ids`: the
    model takes them (rotary outside the attention op), as the builder's non-GQA models do."""
    inputs = {"input_ids": "input_ids", "attention_mask": "attention_mask"}
    if position_ids:
        inputs["position_ids"] = "position_ids"
    inputs |= {"past_key_names": "past_key_values.%d.key", "past_value_names": "past_key_values.%d.value"}
    return {
        "model": {
            "bos_token_id": 1,
            "context_length": cfg.max_len,
            "decoder": {
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                "filename": filename,
                "head_size": cfg.head_size,
                "hidden_size": cfg.hidden,
                "inputs": inputs,
                "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                            "present_value_names": "present.%d.value"},
                "num_attention_heads": cfg.heads,
                "num_hidden_layers": cfg.layers,
                "num_key_value_heads": cfg.kv_heads,
            },
            "eos_token_id": cfg.vocab - 1,
            "pad_token_id": 0,
            "type": model_type,
            "vocab_size": cfg.vocab,
        },
        "search": {"diversity_penalty": 0.0, "do_sample": False, "early_stopping": True, "length_penalty": 1.0,
                   "max_length": cfg.max_len, "min_length": 0, "no_repeat_ngram_size": 0, "num_beams": 1,
                   "num_return_sequences": 1, "past_present_share_buffer": bool(share_buffer),
                   "repetition_penalty": 1.0, "temperature": 1.0, "top_k": 1, "top_p": 1.0},
    }


def build_standard_decoder(cfg, w, dtype="fp32"):
    """Standard ONNX (opset 23) form of the same decoder: explicit residual Adds, RMSNormalization,
    separate q/k/v MatMuls, RotaryEmbedding on [B, S, heads*head] with position_ids, Attention with
    past/present (concatenating) and a bool [B, 1, S, T] mask = causal AND padding."""
    g = Graph(dtype)
    t = ONNX_DTYPES[dtype]
    hs = cfg.head_size
    g.inputs += [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
                 helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                               ["batch_size", "total_sequence_length"]),
                 helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch_size", "sequence_length"])]
    for i in range(cfg.layers):
        for kv in ("key", "value"):
            g.inputs.append(helper.make_tensor_value_info(
                f"past_key_values.{i}.{kv}", t, ["batch_size", cfg.kv_heads, "past_sequence_length", hs]))
    g.outputs.append(helper.make_tensor_value_info("logits", t, ["batch_size", "sequence_length", cfg.vocab]))
    for i in range(cfg.layers):
        for kv in ("key", "value"):
            g.outputs.append(helper.make_tensor_value_info(
                f"present.{i}.{kv}", t, ["batch_size", cfg.kv_heads, "total_sequence_length", hs]))

    i64 = lambda name, v: g.init(name, np.array(v, np.int64))  # noqa: E731
    mb = "/model/mask"
    total = g.node("Gather", f"{mb}/total/Gather", [g.node("Shape", f"{mb}/total/Shape", ["attention_mask"]),
                                                    i64("/c/1", 1)], axis=0)
    seq = g.node("Gather", f"{mb}/seq/Gather", [g.node("Shape", f"{mb}/seq/Shape", ["input_ids"]), "/c/1"], axis=0)
    past = g.node("Sub", f"{mb}/past/Sub", [total, seq])
    q_pos = g.node("Unsqueeze", f"{mb}/q_pos/Unsqueeze",
                   [g.node("Range", f"{mb}/q_pos/Range", [past, total, "/c/1"]), i64("/c/[1]", [1])])
    k_pos = g.node("Range", f"{mb}/k_pos/Range", [i64("/c/0", 0), total, "/c/1"])
    causal = g.node("LessOrEqual", f"{mb}/causal/LessOrEqual", [k_pos, q_pos])
    pad = g.node("Unsqueeze", f"{mb}/pad/Unsqueeze",
                 [g.node("Cast", f"{mb}/pad/Cast", ["attention_mask"], to=TensorProto.BOOL), i64("/c/[1,2]", [1, 2])])
    mask = g.node("And", f"{mb}/And", [pad, causal])

    cos, sin = rotary_caches(cfg)
    cos_cache, sin_cache = g.init("cos_cache", cos), g.init("sin_cache", sin)
    x = g.node("Gather", "/model/embed_tokens/Gather", [g.init("model.embed_tokens.weight", w["embed"]), "input_ids"])

    def rms(name, inp, weight):
        return g.node("RMSNormalization", f"{name}/RMSNormalization", [inp, g.init(name[1:] + ".weight", weight)],
                      axis=-1, epsilon=cfg.eps, stash_type=1)

    def linear(name, inp, weight, bias=None):
        y = matmul(g, name, inp, weight, None)
        return g.node("Add", f"{name}/Add", [y, g.init(name[1:] + ".bias", bias)]) if bias is not None else y

    for i in range(cfg.layers):
        p, b = f"layers.{i}.", f"/model/layers.{i}"
        h = rms(f"{b}/input_layernorm", x, w[p + "input_norm"])
        q = linear(f"{b}/attn/q_proj", h, w[p + "q"], w.get(p + "q_bias"))
        k = linear(f"{b}/attn/k_proj", h, w[p + "k"], w.get(p + "k_bias"))
        v = linear(f"{b}/attn/v_proj", h, w[p + "v"], w.get(p + "v_bias"))
        q = g.node("RotaryEmbedding", f"{b}/attn/q_rotary/RotaryEmbedding", [q, cos_cache, sin_cache, "position_ids"],
                   num_heads=cfg.heads, interleaved=0)
        k = g.node("RotaryEmbedding", f"{b}/attn/k_rotary/RotaryEmbedding", [k, cos_cache, sin_cache, "position_ids"],
                   num_heads=cfg.kv_heads, interleaved=0)
        attn = g.node("Attention", f"{b}/attn/Attention",
                      [q, k, v, mask, f"past_key_values.{i}.key", f"past_key_values.{i}.value"],
                      outputs=[f"{b}/attn/Attention/output_0", f"present.{i}.key", f"present.{i}.value"],
                      q_num_heads=cfg.heads, kv_num_heads=cfg.kv_heads, scale=float(1.0 / np.sqrt(hs)))
        x = g.node("Add", f"{b}/attn/residual/Add", [x, linear(f"{b}/attn/o_proj", attn, w[p + "o"])])
        h = rms(f"{b}/post_attention_layernorm", x, w[p + "post_norm"])
        gate = linear(f"{b}/mlp/gate_proj", h, w[p + "gate"])
        up = linear(f"{b}/mlp/up_proj", h, w[p + "up"])
        act = g.node("Mul", f"{b}/mlp/act_fn/Mul", [gate, g.node("Sigmoid", f"{b}/mlp/act_fn/Sigmoid", [gate])])
        down = linear(f"{b}/mlp/down_proj", g.node("Mul", f"{b}/mlp/Mul", [act, up]), w[p + "down"])
        x = g.node("Add", f"{b}/mlp/residual/Add", [x, down])
    h = rms("/model/norm", x, w["final_norm"])
    g.node("MatMul", "/lm_head/MatMul", [h, g.init("lm_head.weight", w["lm_head"])], outputs=["logits"])
    return g.model({"": 23}, "standard_decoder")


@dataclasses.dataclass(frozen=True)
class EncoderConfig:
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    intermediate: int = 128
    vocab: int = 200
    max_pos: int = 64
    eps: float = 1e-12


def build_encoder(cfg: EncoderConfig, dtype="fp32", seed=0):
    """BERT-style encoder as ORT's transformer optimizer leaves it, with MultiHeadAttention.
    Inputs input_ids, attention_mask [B, S] int64 (1 = token, 0 = padding), attention_bias
    [1, heads, S, S] (e.g. relative-position bias); output last_hidden_state [B, S, hidden]."""
    rng = np.random.default_rng(seed)
    g = Graph(dtype)
    t = ONNX_DTYPES[dtype]
    H = cfg.hidden
    rand = lambda *s, scale=1.0: (scale * rng.standard_normal(s)).astype(np.float32)  # noqa: E731
    g.inputs += [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
                 helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch_size", "sequence_length"]),
                 helper.make_tensor_value_info("attention_bias", t, [1, cfg.heads, "sequence_length",
                                                                     "sequence_length"])]
    g.outputs.append(helper.make_tensor_value_info("last_hidden_state", t, ["batch_size", "sequence_length", H]))
    words = g.node("Gather", "/embeddings/word/Gather", [g.init("embeddings.word.weight", rand(cfg.vocab, H)),
                                                         "input_ids"])
    seq = g.node("Shape", "/embeddings/Shape", ["input_ids"], start=1, end=2)
    positions = g.node("Slice", "/embeddings/position/Slice",
                       [g.init("embeddings.position.weight", rand(cfg.max_pos, H)), g.init("/c/[0]", np.array([0])),
                        seq, g.init("/c/[0]", np.array([0]))])
    emb = g.node("Add", "/embeddings/Add", [words, positions])
    x = g.node("LayerNormalization", "/embeddings/LayerNorm",
               [emb, g.init("embeddings.ln.weight", 1 + rand(H, scale=0.1)), g.init("embeddings.ln.bias", rand(H, scale=0.1))],
               axis=-1, epsilon=cfg.eps)
    key_mask = g.node("Cast", "/attention_mask/Cast", ["attention_mask"], to=TensorProto.INT32)
    lin = lambda name, inp, n_in, n_out: g.node(  # noqa: E731
        "MatMul", f"{name}/MatMul", [inp, g.init(name[1:] + ".weight", rand(n_in, n_out, scale=1 / np.sqrt(n_in)))])
    for i in range(cfg.layers):
        b = f"/encoder/layer.{i}"
        q, k, v = (lin(f"{b}/attention/{n}", x, H, H) for n in ("query", "key", "value"))
        attn = g.node("MultiHeadAttention", f"{b}/attention/MultiHeadAttention",
                      [q, k, v, g.init(f"encoder.layer.{i}.attention.qkv_bias", rand(3 * H, scale=0.1)), key_mask,
                       "attention_bias"], domain=MS, num_heads=cfg.heads)
        o = lin(f"{b}/attention/output/dense", attn, H, H)
        ln = lambda name, inp, skip: g.node(  # noqa: E731
            "SkipLayerNormalization", f"{name}/SkipLayerNorm",
            [inp, skip, g.init(name[1:] + ".weight", 1 + rand(H, scale=0.1)), g.init(name[1:] + ".beta", rand(H, scale=0.1)),
             g.init(name[1:] + ".bias", rand(H, scale=0.1))], domain=MS, epsilon=cfg.eps)
        x = ln(f"{b}/attention/output/LayerNorm", o, x)
        inter = g.node("FastGelu", f"{b}/intermediate/FastGelu",
                       [lin(f"{b}/intermediate/dense", x, H, cfg.intermediate),
                        g.init(f"encoder.layer.{i}.intermediate.bias", rand(cfg.intermediate, scale=0.1))], domain=MS)
        x = ln(f"{b}/output/LayerNorm", lin(f"{b}/output/dense", inter, cfg.intermediate, H), x)
    g.nodes[-1].output[0] = "last_hidden_state"
    return g.model({"": 21, MS: 1}, "bert_encoder")


# --- variants and files -----------------------------------------------------------------------

def variants(size="tiny"):
    """name -> (form, dtype, quant, share_buffer) of the models tests and benchmarks use."""
    v = {
        "genai_fp32_shared": ("genai", "fp32", None, True),
        "genai_fp32_unshared": ("genai", "fp32", None, False),
        "genai_fp16_shared": ("genai", "fp16", None, True),
        "genai_int4_b32_shared": ("genai", "fp32", {"block_size": 32, "symmetric": True}, True),
        "genai_int4_b128_asym_unshared": ("genai", "fp32", {"block_size": 128, "symmetric": False}, False),
        # accuracy_level 4 (int8 activations allowed), the builder's default for the CPU EP
        "genai_int4_b32_acc4_shared": ("genai", "fp32", {"block_size": 32, "symmetric": True, "accuracy_level": 4},
                                       True),
        "standard_fp32": ("standard", "fp32", None, False),
        "standard_fp16": ("standard", "fp16", None, False),
        "encoder_fp32": ("encoder", "fp32", None, None),
    }
    if size != "tiny":  # the benchmark set
        v = {"standard_fp32": v["standard_fp32"], "genai_fp32_shared": v["genai_fp32_shared"],
             "genai_int4_b32_shared": ("genai", "fp32", {"block_size": 32, "symmetric": True}, True),
             "genai_int4_b32_acc4_shared": v["genai_int4_b32_acc4_shared"]}
    return v


def write(model, out_dir, config=None):
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "model.onnx")
    weight_bytes = sum(len(t.raw_data) for t in model.graph.initializer)
    data = os.path.join(out_dir, "model.onnx.data")
    if os.path.exists(data):
        os.remove(data)  # onnx appends to an existing external-data file
    if weight_bytes > 1_500_000_000:  # protobuf's 2 GiB limit: weights beside the model
        onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location="model.onnx.data", size_threshold=1024)
    else:
        onnx.save_model(model, path)
    if config is not None:
        with open(os.path.join(out_dir, "genai_config.json"), "w") as f:
            json.dump(config, f, indent=4)
    return path


def build(out, size="tiny", names=None, seed=0, vocab=None, forms=None):
    """Writes the variants (all, or `names`/`forms`) under `out`/<size>/<name>; returns (name ->
    dir, config). Skips a variant whose directory holds a stamp of this generator's source, the
    config and the seed (it would write the same bytes)."""
    cfg = SIZES[size]
    if vocab:
        cfg = dataclasses.replace(cfg, vocab=vocab)
    weights = None
    dirs = {}
    for name, (form, dtype, quant, share) in variants(size).items():
        if (names and name not in names) or (forms and form not in forms):
            continue
        d = os.path.join(out, size if not vocab else f"{size}-v{vocab}", name)
        dirs[name] = d
        stamp = _stamp(cfg, name, seed)
        if _read(os.path.join(d, "stamp")) == stamp:
            continue
        if form == "encoder":
            write(build_encoder(EncoderConfig(), dtype, seed), d)
        elif form == "genai":
            weights = weights or make_weights(cfg, seed)
            write(build_genai_decoder(cfg, weights, dtype, quant), d, genai_config(cfg, dtype, share))
        else:
            weights = weights or make_weights(cfg, seed)
            write(build_standard_decoder(cfg, weights, dtype), d,
                  genai_config(cfg, dtype, False, position_ids=True))
        with open(os.path.join(d, "stamp"), "w") as f:
            f.write(stamp)
    return dirs, cfg


def _stamp(cfg, name, seed):
    with open(__file__, "rb") as f:
        source = hashlib.sha256(f.read()).hexdigest()
    return f"{source} {cfg} {name} {seed}"


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "..", "build", "models", "llm"))
    ap.add_argument("--size", choices=sorted(SIZES), default="tiny")
    ap.add_argument("--vocab", type=int, help="override the vocabulary size (the benchmark may reduce it)")
    ap.add_argument("--forms", nargs="*", choices=["genai", "standard", "encoder"])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    dirs, _ = build(os.path.abspath(args.out), args.size, seed=args.seed, vocab=args.vocab, forms=args.forms)
    for name, d in dirs.items():
        print(name, d)


if __name__ == "__main__":
    main()
