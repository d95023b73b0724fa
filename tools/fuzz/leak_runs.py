#!/usr/bin/env python3
"""The long leak check (docs/reliability.md): --runs runs of a MatMul -> Gather -> Softmax model
on the MLX EP with shapes cycling through --shapes distinct signatures (and, with --fresh, a new
signature every run, so the compile cache's LRU bound is what keeps memory flat), printing the
process RSS every --every runs. The suite runs a short version (test_hardening.py).

  .venv/bin/python tools/fuzz/leak_runs.py --runs 10000
"""
import argparse
import gc
import os
import sys
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "python"))
import onnxruntime_ep_mlx as mlx_ep  # noqa: E402


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def model():
    f = TensorProto.FLOAT
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Gather", ["h", "i"], ["g"], axis=0),
             helper.make_node("Softmax", ["g"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "leak", [helper.make_tensor_value_info("x", f, ["n", 16]),
                                              helper.make_tensor_value_info("i", TensorProto.INT64, ["k"])],
                              [helper.make_tensor_value_info("y", f, ["k", 16])],
                              [helper.make_tensor("w", f, [16, 16], np.eye(16, dtype=np.float32).ravel())])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10000)
    ap.add_argument("--every", type=int, default=1000)
    ap.add_argument("--fresh", action="store_true", help="a new input signature every run")
    args = ap.parse_args()
    mlx_ep.register_execution_provider_library()
    sess = ort.InferenceSession(model(), providers=[mlx_ep.ep_name(), "CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    shapes = [(n, k) for n in (1, 3, 8, 17) for k in (1, 5)]
    t0, first = time.monotonic(), None
    for r in range(1, args.runs + 1):
        n, k = (1 + r % 997, 1 + r % 13) if args.fresh else shapes[r % len(shapes)]
        sess.run(None, {"x": rng.standard_normal((n, 16)).astype(np.float32),
                        "i": rng.integers(-n, n, size=k).astype(np.int64)})
        if r % args.every == 0:
            gc.collect()
            now = rss()
            first = first or now
            print(f"run {r:6d}: RSS {now / 2**20:8.1f} MiB ({(now - first) / 2**20:+.1f} MiB since run "
                  f"{args.every}), {time.monotonic() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
