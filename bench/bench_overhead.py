"""Per-run overhead of the MLX EP on tiny models, where the compute is negligible and what is
measured is the cost of one Run: ORT's session machinery, the EP's binding of inputs and outputs,
the hand-off to the MLX thread, the compiled-function lookup, MLX's own call and evaluation, and
the output copy. ORT's CPU EP on the same model is the peer (its time is almost all ORT's own
per-run cost), so `MLX - CPU` is what the EP adds.

    .venv/bin/python bench/bench_overhead.py [--iters 2000] [--json FILE]

Medians of interleaved runs (bench/timing.py), microseconds.
"""
import argparse
import json
import os
import sys

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import onnxruntime_ep_mlx as mlx_ep  # noqa: E402
from timing import median_ms  # noqa: E402


def chain_model(nodes, shape):
    """`nodes` elementwise nodes in a chain (Add, Mul, Relu, ...) on one fp32 input of `shape`,
    with a constant operand: one MLX partition of `nodes` nodes."""
    ops = ["Add", "Mul", "Relu", "Sub", "Tanh"]
    c = helper.make_tensor("c", TensorProto.FLOAT, [shape[-1]], np.full(shape[-1], 0.5, np.float32))
    graph_nodes, prev = [], "x"
    for i in range(nodes):
        op = ops[i % len(ops)]
        out = "y" if i == nodes - 1 else f"t{i}"
        graph_nodes.append(helper.make_node(op, [prev] if op in ("Relu", "Tanh") else [prev, "c"], [out]))
        prev = out
    graph = helper.make_graph(graph_nodes, "chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], [c])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def multi_io_model(count, shape):
    """`count` inputs, each through one Add, to `count` outputs: the per-input and per-output
    costs (binding, key building, output copy)."""
    c = helper.make_tensor("c", TensorProto.FLOAT, [1], [1.0])
    nodes = [helper.make_node("Add", [f"x{i}", "c"], [f"y{i}"]) for i in range(count)]
    graph = helper.make_graph(
        nodes, "multi_io",
        [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, shape) for i in range(count)],
        [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, shape) for i in range(count)], [c])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


CASES = [  # (name, model, input shape)
    ("add x1 [8,64]", lambda: chain_model(1, [8, 64]), [8, 64]),
    ("chain x3 [8,64]", lambda: chain_model(3, [8, 64]), [8, 64]),
    ("chain x10 [8,64]", lambda: chain_model(10, [8, 64]), [8, 64]),
    ("chain x3 [64,1024]", lambda: chain_model(3, [64, 1024]), [64, 1024]),
    ("8 in/out [8,64]", lambda: multi_io_model(8, [8, 64]), [8, 64]),
]


def sessions(model):
    data = model.SerializeToString()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1  # a tiny model: the pool's wake-ups are noise, for both peers
    cpu = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    mlx_ep.append_to_session_options(so)
    mlx = ort.InferenceSession(data, so)
    return cpu, mlx


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    mlx_ep.register_execution_provider_library()
    device = next(d.ep_metadata.get("mlx_device", "?") for d in mlx_ep.get_ep_devices())
    print(f"MLX device: {device}; onnxruntime {ort.__version__}; {args.iters} timed runs, median us")
    print(f"{'case':<22}{'ORT CPU us':>12}{'MLX EP us':>12}{'MLX-CPU us':>12}")
    rows = []
    rng = np.random.default_rng(0)
    for name, make, shape in CASES:
        model = make()
        cpu, mlx = sessions(model)
        feeds = {i.name: rng.standard_normal(shape).astype(np.float32) for i in model.graph.input}
        for a, b in zip(cpu.run(None, feeds), mlx.run(None, feeds)):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
        t_cpu, t_mlx = median_ms([lambda: cpu.run(None, feeds), lambda: mlx.run(None, feeds)],
                                 args.iters // 10, args.iters)
        row = {"case": name, "ort_cpu_us": t_cpu * 1e3, "mlx_us": t_mlx * 1e3}
        rows.append(row)
        print(f"{name:<22}{row['ort_cpu_us']:>12.1f}{row['mlx_us']:>12.1f}"
              f"{row['mlx_us'] - row['ort_cpu_us']:>12.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device, "iters": args.iters, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
