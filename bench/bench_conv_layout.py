"""Measures the cost of the convolution layout (docs/conv_layout.md): the MLX EP transposes every
Conv's input from ONNX's NCHW to MLX's NHWC and its output back. Times, through ORT, a MobileNet-like
block and a pointwise convolution written two ways, on the MLX EP (compiled and with
ONNXRUNTIME_EP_MLX_NO_COMPILE=1) and on ORT's CPU EP. Prints median milliseconds.

  block     Conv 3x3 (32->32) + Relu + depthwise Conv 3x3 + Relu + Conv 1x1 (32->64), with biases
  residual  the block with a 32->32 pointwise Conv and an Add of the block's input (a two-input
            elementwise op, which MLX runs in row-major order: it materializes the transpose)
  conv1x1   one Conv 1x1 (32->64): the EP transposes NCHW -> NHWC, convolves, transposes back
  matmul    the same product as MatMul(W[64,32], X[B,32,H*W]) on a reshaped X: no transposes at all

conv1x1 vs matmul bounds what the transpose pair costs (both do the same 64x32 GEMM per image).
The runs of all sessions of one row are interleaved, so that load from other processes falls on
all of them alike, and each run's process CPU time (all threads) is recorded next to its wall
time: on a shared machine the CPU time is the steadier measure of the work (ORT's thread pools
do not spin here, so that idle threads add no CPU time).

--experiment needs a build with bench/conv_layout_experiment.patch applied. It adds three EP
columns in which every Conv, pointwise ones too, runs through mx::conv_general: "conv_general"
(with the transpose pair, as the EP does for non-pointwise convolutions), "no act T" (the
activation transposes replaced by free reshapes: wrong numbers, the same convolutions) and
"no T" (the weight transposes too). Their differences are what the layout changes cost.

    .venv/bin/python bench/bench_conv_layout.py [--iters 20] [--size 56] [--json FILE] [--experiment]
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
import onnxruntime_ep_mlx as mlx_ep  # noqa: E402

C, M = 32, 64  # channels of the block, output channels of its pointwise convolution


def median_ms(fns, warmup, iters):
    """(wall, process CPU) median milliseconds of each of `fns`, their runs interleaved."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    wall, cpu = [[] for _ in fns], [[] for _ in fns]
    for _ in range(iters):
        for fn, w, c in zip(fns, wall, cpu):
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            c.append((time.process_time() - c0) * 1e3)
            w.append((time.perf_counter() - t0) * 1e3)
    return [statistics.median(t) for t in wall], [statistics.median(t) for t in cpu]


def make_model(nodes, size, out_channels, inits):
    rng = np.random.default_rng(0)
    tensors = [numpy_helper.from_array(rng.uniform(-0.5, 0.5, shape).astype(np.float32), name)
               for name, shape in inits.items()]
    graph = helper.make_graph(
        nodes, "conv_layout", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["B", C, size, size])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["B", out_channels, size, size])], tensors)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def block_model(size):
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], group=C),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["y"]),
    ]
    inits = {"w1": (C, C, 3, 3), "b1": (C,), "w2": (C, 1, 3, 3), "b2": (C,), "w3": (M, C, 1, 1), "b3": (M,)}
    return make_model(nodes, size, M, inits)


def residual_model(size):
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], group=C),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"]),
        helper.make_node("Add", ["c3", "x"], ["y"]),
    ]
    inits = {"w1": (C, C, 3, 3), "b1": (C,), "w2": (C, 1, 3, 3), "b2": (C,), "w3": (C, C, 1, 1), "b3": (C,)}
    return make_model(nodes, size, C, inits)


def conv1x1_model(size):
    return make_model([helper.make_node("Conv", ["x", "w"], ["y"])], size, M, {"w": (M, C, 1, 1)})


def matmul_model(size):
    """conv1x1's product without layout changes: W (M, C) @ X (B, C, H*W)."""
    shapes = {"flat": np.array([0, C, size * size], np.int64), "out": np.array([0, M, size, size], np.int64)}
    nodes = [helper.make_node("Reshape", ["x", "flat"], ["xf"]),
             helper.make_node("Reshape", ["w", "w2d"], ["wm"]),
             helper.make_node("MatMul", ["wm", "xf"], ["yf"]),
             helper.make_node("Reshape", ["yf", "out"], ["y"])]
    model = make_model(nodes, size, M, {"w": (M, C, 1, 1)})
    for name, value in [*shapes.items(), ("w2d", np.array([M, C], np.int64))]:
        model.graph.initializer.append(numpy_helper.from_array(value, name))
    return model


def with_env(name, value, fn):
    """fn() with environment variable `name` set to `value` (None: unchanged)."""
    if value is None:
        return fn()
    os.environ[name] = value
    try:
        return fn()
    finally:
        os.environ.pop(name, None)


def runner(model, feeds, mlx, no_compile=False, experiment=None):
    """A function running `model` once. The EP reads ONNXRUNTIME_EP_MLX_NO_COMPILE when the session
    is created, the experiment's CONV_LAYOUT_EXPERIMENT when it traces (the first, compiled run)."""
    providers = [mlx_ep.ep_name(), "CPUExecutionProvider"] if mlx else ["CPUExecutionProvider"]
    so = ort.SessionOptions()
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    sess = with_env("ONNXRUNTIME_EP_MLX_NO_COMPILE", "1" if no_compile else None,
                    lambda: ort.InferenceSession(model.SerializeToString(), so, providers=providers))
    with_env("CONV_LAYOUT_EXPERIMENT", experiment, lambda: sess.run(None, feeds))
    return lambda: sess.run(None, feeds)[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--size", type=int, default=56, help="H = W")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--experiment", action="store_true", help="see above (needs the patched build)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()

    mlx_ep.register_execution_provider_library()
    device = next(d.ep_metadata.get("mlx_device", "?") for d in mlx_ep.get_ep_devices())
    columns = {"ort_cpu": "ORT CPU", "mlx": "MLX EP", "mlx_no_compile": "no compile"}
    if args.experiment:
        columns.update({"mlx_conv_general": "conv_general", "mlx_no_act_transpose": "no act T",
                        "mlx_no_transpose": "no T"})
    print(f"MLX device: {device}; onnxruntime {ort.__version__}; {C} channels, {args.size}x{args.size}; "
          f"{args.iters} interleaved timed runs, median ms: wall / process CPU")
    print(f"{'model':<10}{'batch':>6}" + "".join(f"{c:>16}" for c in columns.values()) + "  max|diff|")
    rows = []
    for name, build in [("block", block_model), ("residual", residual_model), ("conv1x1", conv1x1_model),
                        ("matmul", matmul_model)]:
        model = build(args.size)
        for batch in map(int, args.batches.split(",")):
            x = np.random.default_rng(1).uniform(-1, 1, (batch, C, args.size, args.size)).astype(np.float32)
            feeds = {"x": x}
            fns = [runner(model, feeds, False), runner(model, feeds, True), runner(model, feeds, True, True)]
            if args.experiment:
                fns += [runner(model, feeds, True, experiment=e) for e in ("none", "act", "all")]
            ref = fns[0]()
            diff = max(float(np.max(np.abs(fn() - ref))) for fn in fns[1:3])
            wall, cpu = median_ms(fns, 3, args.iters)
            row = {"model": name, "batch": batch, "max_abs_diff": diff,
                   **{f"{c}_wall_ms": t for c, t in zip(columns, wall)},
                   **{f"{c}_cpu_ms": t for c, t in zip(columns, cpu)}}
            rows.append(row)
            print(f"{name:<10}{batch:>6}" + "".join(f"{w:>9.1f} /{c:>5.0f}" for w, c in zip(wall, cpu))
                  + f"  {diff:.1e}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": device, "onnxruntime": ort.__version__, "size": args.size, "rows": rows}, fh,
                      indent=2)


if __name__ == "__main__":
    main()
