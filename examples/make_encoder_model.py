"""Generates the demo model: one transformer encoder block (pre-LayerNorm, multi-head
self-attention, GELU feed-forward), exported the way PyTorch exports it at opset 17.
Weights are random with a fixed seed, so the model is the same on every machine."""
import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build_encoder(d_model=256, heads=4, d_ff=1024, seed=0):
    rng = np.random.default_rng(seed)
    dh = d_model // heads
    inits, nodes = [], []

    def weight(name, *shape, scale=None):
        scale = scale if scale is not None else 1.0 / np.sqrt(shape[0])
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def const(name, value, dtype=np.float32):
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def node(op, inputs, attrs=None, name=None):
        out = name or f"{op.lower()}_{len(nodes)}"
        nodes.append(helper.make_node(op, inputs, [out], name=out, **(attrs or {})))
        return out

    def layer_norm(x, prefix):
        g = const(prefix + "_gamma", np.ones(d_model) + 0.1 * rng.standard_normal(d_model))
        b = const(prefix + "_beta", 0.1 * rng.standard_normal(d_model))
        return node("LayerNormalization", [x, g, b], {"axis": -1, "epsilon": 1e-5})

    def linear(x, prefix, n_in, n_out):
        w = weight(prefix + "_w", n_in, n_out)
        b = const(prefix + "_b", 0.02 * rng.standard_normal(n_out))
        return node("Add", [node("MatMul", [x, w]), b])

    split_shape = const("split_heads_shape", [0, 0, heads, dh], np.int64)
    merge_shape = const("merge_heads_shape", [0, 0, d_model], np.int64)

    def heads_first(t):  # [B, S, D] -> [B, H, S, Dh]
        return node("Transpose", [node("Reshape", [t, split_shape])], {"perm": [0, 2, 1, 3]})

    x = "x"
    h = layer_norm(x, "ln1")
    q = heads_first(linear(h, "q", d_model, d_model))
    k = heads_first(linear(h, "k", d_model, d_model))
    v = heads_first(linear(h, "v", d_model, d_model))
    kt = node("Transpose", [k], {"perm": [0, 1, 3, 2]})
    scores = node("Div", [node("MatMul", [q, kt]), const("sqrt_dh", np.sqrt(dh))])
    attn = node("Softmax", [scores], {"axis": -1})
    ctx = node("Transpose", [node("MatMul", [attn, v])], {"perm": [0, 2, 1, 3]})
    ctx = node("Reshape", [ctx, merge_shape])
    x1 = node("Add", [x, linear(ctx, "o", d_model, d_model)])
    h2 = layer_norm(x1, "ln2")
    f = linear(h2, "ff1", d_model, d_ff)
    # GELU as PyTorch exports it at opset 17: 0.5 * f * (1 + erf(f / sqrt(2)))
    erf = node("Erf", [node("Div", [f, const("sqrt2", np.sqrt(2.0))])])
    gelu = node("Mul", [node("Mul", [f, node("Add", [erf, const("one", 1.0)])]), const("half", 0.5)])
    y = node("Add", [x1, linear(gelu, "ff2", d_ff, d_model)], name="y")

    graph = helper.make_graph(
        nodes, "encoder_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", d_model])],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, ["batch", "seq", d_model])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="onnxruntime-ep-mlx demo")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("output", help="where to write the .onnx file")
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--d-ff", type=int, default=1024)
    args = ap.parse_args()
    onnx.save(build_encoder(args.d_model, args.heads, args.d_ff), args.output)


if __name__ == "__main__":
    main()
