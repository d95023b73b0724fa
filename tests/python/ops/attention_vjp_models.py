"""Test models of the pkg.onnax AttentionVJP contract (src/ops/attention_vjp*.cc).

Each contract node calls a model-local ONNX function (domain pkg.onnax, named by the node's op type)
whose body computes the same pullback with plain ONNX ops: when the MLX EP declines the node, ORT's
CPU EP inlines and runs the body, so ORT CPU is the reference. `reference` is the same computation
in float64 numpy (for gradient error numbers). The bodies are specialised to the test's static
sequence lengths (the causal triangle and the mask padding are constants)."""
import os
import struct
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import numpy as np
import onnx
from onnx import TensorProto, helper

DOMAIN = "pkg.onnax"
OPSET = 18
NEG_INF = np.float32(-np.inf)


@contextmanager
def scoped_env(**values):
    """Sets (None: unsets) environment variables for the block (the EP reads its AttentionVJP
    variables when it traces): shared by the kernel tests and bench/bench_attention_vjp.py."""
    old = {k: os.environ.get(k) for k in values}
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@dataclass(frozen=True)
class Config:
    rank: int = 4
    hq: int = 2
    hk: int = 2
    d: int = 8
    scale: float = 0.35
    causal: bool = False
    outputs: tuple = (0, 1, 2)
    mask: int = 0  # 0 none, 1 bool (true attends), 2 additive float
    recompute: bool = False
    tag: str = "0123456789abcdef"

    def op_type(self):
        bits = struct.unpack("<I", struct.pack("<f", self.scale))[0]
        kind = "AttentionVJPRecompute" if self.recompute else "AttentionVJP"
        outs = "".join(map(str, self.outputs))
        return (f"{kind}_r{self.rank}_q{self.hq}_k{self.hk}_d{self.d}_s{bits:08x}_c{int(self.causal)}"
                f"_o{outs}_m{self.mask}_{self.tag}")

    def input_names(self):
        return ["Q", "K", "V"] + ([] if self.recompute else ["Y"]) + ["G", "Mask"]


@dataclass
class Body:
    """Nodes of a function body, with fresh value names."""
    nodes: list = field(default_factory=list)

    def op(self, op_type, *inputs, **attrs):
        out = f"t{len(self.nodes)}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def const(self, value):
        return self.op("Constant", value=onnx.numpy_helper.from_array(np.asarray(value)))


def _heads(b, c, x, heads):
    """[B, S, H*D] -> [B, H, S, D] (rank 3), else x."""
    if c.rank == 4:
        return x
    split = b.op("Reshape", x, b.const(np.array([0, 0, heads, c.d], np.int64)))
    return b.op("Transpose", split, perm=[0, 2, 1, 3])


def _merge(b, c, x, heads):
    if c.rank == 4:
        return x
    return b.op("Reshape", b.op("Transpose", x, perm=[0, 2, 1, 3]),
                b.const(np.array([0, 0, heads * c.d], np.int64)))


def _repeat_kv(b, c, x):
    """[B, Hk, S, D] -> [B, Hq, S, D], kv head h // (Hq / Hk) for query head h."""
    groups = c.hq // c.hk
    if groups == 1:
        return x
    tiled = b.op("Expand", b.op("Unsqueeze", x, b.const(np.array([2], np.int64))),
                 b.const(np.array([1, 1, groups, 1, 1], np.int64)))
    shape = b.op("Concat", b.op("Shape", x, start=0, end=1), b.const(np.array([c.hq], np.int64)),
                 b.op("Shape", x, start=2), axis=0)
    return b.op("Reshape", tiled, shape)


def _group_sum(b, c, x):
    """[B, Hq, S, D] -> [B, Hk, S, D], summing the query heads of each kv head."""
    groups = c.hq // c.hk
    if groups == 1:
        return x
    shape = b.op("Concat", b.op("Shape", x, start=0, end=1), b.const(np.array([c.hk, groups], np.int64)),
                 b.op("Shape", x, start=2), axis=0)
    return b.op("ReduceSum", b.op("Reshape", x, shape), b.const(np.array([2], np.int64)), keepdims=0)


def _transpose_last(b, x):
    return b.op("Transpose", x, perm=[0, 1, 3, 2])


def _probabilities(b, c, scores, mask_pad, sq, sk):
    """Softmax of the masked scores; rows that attend nothing are 0."""
    allowed = None
    if c.mask:
        pads = b.const(np.array([0] * (2 * mask_pad[0] - 1) + [mask_pad[1]], np.int64))
        fill = b.const(np.array(False) if c.mask == 1 else NEG_INF)
        mask = b.op("Pad", "Mask", pads, fill) if mask_pad[1] else "Mask"
        if c.mask == 1:
            allowed = mask
        else:
            scores = b.op("Add", scores, mask)
            allowed = b.op("Not", b.op("Equal", mask, b.const(NEG_INF)))
    if c.causal:
        tri = b.const(np.tril(np.ones((sq, sk), np.bool_)))
        allowed = tri if allowed is None else b.op("And", allowed, tri)
    if allowed is None:
        return b.op("Softmax", scores, axis=-1)
    masked = b.op("Where", allowed, scores, b.const(NEG_INF))
    full = b.op("Cast", b.op("Expand", allowed, b.op("Shape", scores)), to=TensorProto.FLOAT)
    valid = b.op("Cast", b.op("ReduceMax", full, b.const(np.array([-1], np.int64)), keepdims=1),
                 to=TensorProto.BOOL)
    safe = b.op("Where", valid, masked, b.const(np.float32(0)))
    return b.op("Where", allowed, b.op("Softmax", safe, axis=-1), b.const(np.float32(0)))


def function(c, mask_pad, sq, sk, op_type=None):
    """The FunctionProto of `c` (named `op_type`, default c.op_type()). mask_pad: (mask rank,
    how many entries the body pads the mask's last axis with)."""
    b = Body()
    scale = b.const(np.float32(c.scale))
    q = _heads(b, c, "Q", c.hq)
    k = _repeat_kv(b, c, _heads(b, c, "K", c.hk))
    v = _repeat_kv(b, c, _heads(b, c, "V", c.hk))
    g = _heads(b, c, "G", c.hq)
    scores = b.op("Mul", b.op("MatMul", q, _transpose_last(b, k)), scale)
    p = _probabilities(b, c, scores, mask_pad, sq, sk)
    y = b.op("MatMul", p, v) if c.recompute else _heads(b, c, "Y", c.hq)
    dv = _group_sum(b, c, b.op("MatMul", _transpose_last(b, p), g))
    dp = b.op("MatMul", g, _transpose_last(b, v))
    delta = b.op("ReduceSum", b.op("Mul", g, y), b.const(np.array([-1], np.int64)), keepdims=1)
    ds = b.op("Mul", p, b.op("Sub", dp, delta))
    dq = b.op("Mul", b.op("MatMul", ds, k), scale)
    dk = _group_sum(b, c, b.op("Mul", b.op("MatMul", _transpose_last(b, ds), q), scale))
    grads = [_merge(b, c, dq, c.hq), _merge(b, c, dk, c.hk), _merge(b, c, dv, c.hk)]
    outputs = [f"d{i}" for i in c.outputs]
    for i, name in zip(c.outputs, outputs):
        b.nodes.append(helper.make_node("Identity", [grads[i]], [name]))
    return helper.make_function(DOMAIN, op_type or c.op_type(), c.input_names(), outputs, b.nodes,
                                [helper.make_opsetid("", OPSET)])


def shapes(c, batch, sq, sk):
    """Shapes of Q (also Y, G) and K (also V)."""
    if c.rank == 3:
        return (batch, sq, c.hq * c.d), (batch, sk, c.hk * c.d)
    return (batch, c.hq, sq, c.d), (batch, c.hk, sk, c.d)


def to_heads(c, x, heads):
    x = np.asarray(x, np.float64)
    if c.rank == 4:
        return x
    return x.reshape(x.shape[0], x.shape[1], heads, c.d).transpose(0, 2, 1, 3)


def from_heads(c, x):
    if c.rank == 4:
        return x
    return x.transpose(0, 2, 1, 3).reshape(x.shape[0], x.shape[2], x.shape[1] * x.shape[3])


def probabilities(c, q, k, mask, sq, sk):
    """float64 attention probabilities [B, Hq, Sq, Sk] (fully masked rows 0) of [B, H, S, D] q, k."""
    groups = c.hq // c.hk
    kr = np.repeat(k, groups, axis=1)
    scores = c.scale * q @ kr.transpose(0, 1, 3, 2)
    allowed = np.ones(scores.shape, bool)
    if c.mask:
        m = np.asarray(mask)
        if m.shape[-1] not in (1, sk):
            pad = [(0, 0)] * (m.ndim - 1) + [(0, sk - m.shape[-1])]
            m = np.pad(m, pad, constant_values=False if c.mask == 1 else -np.inf)
        if c.mask == 1:
            allowed = allowed & m
        else:
            scores = scores + m.astype(np.float64)
            allowed = allowed & ~np.isneginf(m)
    if c.causal:
        allowed = allowed & np.tril(np.ones((sq, sk), bool))
    scores = np.where(allowed, scores, -np.inf)
    row_max = scores.max(-1, keepdims=True, initial=-np.inf)
    valid = row_max > -np.inf
    e = np.where(allowed, np.exp(scores - np.where(valid, row_max, 0)), 0)
    return e / np.where(valid, e.sum(-1, keepdims=True), 1)


def reference(c, feeds):
    """float64 (forward Y, {output index: gradient}) of the feeds."""
    q, k, v, g = (to_heads(c, feeds[n], h) for n, h in [("Q", c.hq), ("K", c.hk), ("V", c.hk), ("G", c.hq)])
    sq, sk = q.shape[2], k.shape[2]
    groups = c.hq // c.hk
    p = probabilities(c, q, k, feeds.get("Mask"), sq, sk)
    kr, vr = np.repeat(k, groups, axis=1), np.repeat(v, groups, axis=1)
    y = p @ vr
    if not c.recompute and "Y" in feeds:
        y = to_heads(c, feeds["Y"], c.hq)

    def group_sum(x):
        return x.reshape(x.shape[0], c.hk, groups, *x.shape[2:]).sum(2)

    ds = p * (g @ vr.transpose(0, 1, 3, 2) - (g * y).sum(-1, keepdims=True))
    grads = [c.scale * ds @ kr, group_sum(c.scale * ds.transpose(0, 1, 3, 2) @ q),
             group_sum(p.transpose(0, 1, 3, 2) @ g)]
    return from_heads(c, y), {i: from_heads(c, grads[i]) for i in c.outputs}


def case(c, batch=2, sq=5, sk=5, mask_shape=None, mask_rows_off=(), seed=0, dtype=np.float32):
    """(model, feeds) of one contract node. mask_shape: the Mask input's shape (default [B, Hq, Sq,
    Sk]); mask_rows_off: query rows masked entirely (every batch and head)."""
    rng = np.random.default_rng(seed)
    qs, ks = shapes(c, batch, sq, sk)
    feeds = {"Q": rng.uniform(-1, 1, qs), "K": rng.uniform(-1, 1, ks), "V": rng.uniform(-1, 1, ks),
             "G": rng.uniform(-1, 1, qs)}
    mask_shape = tuple(mask_shape) if mask_shape is not None else (batch, c.hq, sq, sk)
    if c.mask == 1:
        m = rng.random(mask_shape) < 0.7
    else:
        m = np.where(rng.random(mask_shape) < 0.7, rng.uniform(-1, 1, mask_shape), -np.inf)
    if len(mask_shape) >= 2:
        for r in mask_rows_off:
            m[..., r, :] = False if c.mask == 1 else -np.inf
    feeds["Mask"] = m.astype(np.bool_ if c.mask != 2 else np.float32)
    feeds = {n: (a if a.dtype == np.bool_ else a.astype(dtype)) for n, a in feeds.items()}
    if not c.recompute:
        feeds["Y"] = reference(replace(c, recompute=True), feeds)[0].astype(dtype)
    pad = 0 if mask_shape[-1] in (1, sk) else sk - mask_shape[-1]
    return model(c, feeds, (len(mask_shape), pad), sq, sk), feeds


def model(c, feeds, mask_pad, sq, sk, op_type=None, body=None, n_outputs=None):
    """The one-node model of `c` on `feeds` (its function named `op_type`, default c.op_type();
    `body`: the Config the function body computes, default c)."""
    op_type = op_type or c.op_type()
    body = body or c
    names = body.input_names()
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(feeds[n].dtype), feeds[n].shape)
              for n in names]
    n_outputs = n_outputs or len(body.outputs)
    outputs = [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None) for i in range(len(body.outputs))]
    node = helper.make_node(op_type, names, [o.name for o in outputs][:n_outputs], domain=DOMAIN, name="vjp")
    graph = helper.make_graph([node], "attention_vjp", inputs, outputs[:n_outputs])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(DOMAIN, 1)],
                          functions=[function(body, mask_pad, sq, sk, op_type)])
    m.ir_version = 10
    return m


def retype(model, feeds, dtype):
    """(model, feeds) with every float32 tensor (graph inputs and outputs, the function body's
    constants and casts) in `dtype`."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in list(m.graph.input) + list(m.graph.output):
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT:
            vi.type.tensor_type.elem_type = elem
    for n in m.functions[0].node:
        for a in n.attribute:
            if a.name == "value" and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(helper.make_tensor(a.t.name, elem, a.t.dims,
                                                onnx.numpy_helper.to_array(a.t).astype(dtype).reshape(-1).tolist()))
            if a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = elem
    return m, {n: a.astype(dtype) if a.dtype == np.float32 else a for n, a in feeds.items()}
