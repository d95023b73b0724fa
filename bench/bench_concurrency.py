"""Concurrent runs: throughput (runs/s) of 1/2/4/8 Python threads on one shared session and on
one session per thread, MLX EP against ORT's CPU EP, small and medium models.

    .venv/bin/python bench/bench_concurrency.py [--threads 1,2,4,8] [--seconds 1.5]
        [--mlx-threads 1,4] [--models small,medium] [--json FILE]

Each value of --mlx-threads (the EP's MLX worker pool, ONNXRUNTIME_EP_MLX_THREADS; "default"
leaves it unset) runs in a fresh process. ORT's sessions get one intra-op thread, so that the
concurrency measured is the callers' (both EPs alike). Every thread first checks that its
session gives the bytes a single-threaded run gave (MLX: also close to ORT's CPU EP); a wrong
result aborts the benchmark. ONNXRUNTIME_EP_MLX_LIBRARY selects another build of the EP (e.g.
the one before a change).

On a machine with C cores, T > C threads can only show that nothing serialises needlessly
(throughput stays flat instead of dropping); scaling is bounded by C.
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
import onnxruntime_ep_mlx as mlx_ep  # noqa: E402


def small_model():
    """The outside tester's model: 3 elementwise nodes on [8, 64] (one MLX partition)."""
    c = helper.make_tensor("c", TensorProto.FLOAT, [64], np.full(64, 0.5, np.float32))
    nodes = [helper.make_node("Add", ["x", "c"], ["a"]), helper.make_node("Mul", ["a", "c"], ["m"]),
             helper.make_node("Relu", ["m"], ["y"])]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 64])], [c])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), [8, 64]


def medium_model():
    """A 2-layer MLP block on [32, 256]: MatMul, Add, Gelu-like Tanh, MatMul, Add, Softmax
    (~8 MFLOP per run)."""
    rng = np.random.default_rng(1)
    w1 = helper.make_tensor("w1", TensorProto.FLOAT, [256, 512], rng.standard_normal((256, 512)).astype(np.float32) * 0.05)
    w2 = helper.make_tensor("w2", TensorProto.FLOAT, [512, 256], rng.standard_normal((512, 256)).astype(np.float32) * 0.05)
    b1 = helper.make_tensor("b1", TensorProto.FLOAT, [512], rng.standard_normal(512).astype(np.float32))
    b2 = helper.make_tensor("b2", TensorProto.FLOAT, [256], rng.standard_normal(256).astype(np.float32))
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Tanh", ["hb"], ["t"]), helper.make_node("MatMul", ["t", "w2"], ["u"]),
             helper.make_node("Add", ["u", "b2"], ["ub"]), helper.make_node("Softmax", ["ub"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "medium", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 256])], [w1, w2, b1, b2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), [32, 256]


MODELS = {"small": small_model, "medium": medium_model}


def make_session(data, mlx):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    if mlx:
        mlx_ep.append_to_session_options(so)
        return ort.InferenceSession(data, so)
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def runs_per_second(sessions, feeds, want, seconds):
    """Each session in `sessions` is run by its own thread (the same session may appear several
    times) for `seconds`; returns the total runs per second. Each thread's first result must be
    bit-identical to `want`."""
    stop = threading.Event()
    start = threading.Barrier(len(sessions) + 1)
    counts = [0] * len(sessions)
    wrong = []

    def work(t, sess):
        if not np.array_equal(sess.run(None, feeds)[0], want):
            wrong.append(t)
        start.wait()
        n = 0
        while not stop.is_set():
            sess.run(None, feeds)
            n += 1
        counts[t] = n

    threads = [threading.Thread(target=work, args=(t, s)) for t, s in enumerate(sessions)]
    for th in threads:
        th.start()
    start.wait()
    t0 = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for th in threads:
        th.join()
    elapsed = time.perf_counter() - t0
    if wrong:
        raise SystemExit(f"threads {wrong} got results that differ from a single-threaded run")
    return sum(counts) / elapsed


def measure(args):
    """In the child process: every model, scenario and thread count, CPU EP and MLX EP."""
    mlx_ep.register_execution_provider_library()
    rows = []
    for name in args.models.split(","):
        model, shape = MODELS[name]()
        data = model.SerializeToString()
        feeds = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
        for mlx in (False, True):
            base = make_session(data, mlx)
            want = base.run(None, feeds)[0]
            if mlx:
                np.testing.assert_allclose(want, make_session(data, False).run(None, feeds)[0], rtol=1e-5, atol=1e-6)
            for scenario in ("shared", "separate"):
                for t in args.threads:
                    sessions = [base] * t if scenario == "shared" else [make_session(data, mlx) for _ in range(t)]
                    rate = runs_per_second(sessions, feeds, want, args.seconds)
                    rows.append({"model": name, "ep": "mlx" if mlx else "cpu", "scenario": scenario,
                                 "threads": t, "runs_per_s": rate})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2,4,8")
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--mlx-threads", default="1,default", help="EP worker pool sizes, one process each")
    ap.add_argument("--models", default="small,medium")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.threads = [int(t) for t in args.threads.split(",")]
    if args.child:
        print(json.dumps(measure(args)))
        return

    results = {}
    for workers in args.mlx_threads.split(","):
        env = dict(os.environ)
        env.pop("ONNXRUNTIME_EP_MLX_THREADS", None)
        if workers != "default":
            env["ONNXRUNTIME_EP_MLX_THREADS"] = workers
        cmd = [sys.executable, os.path.abspath(__file__), "--child", "--threads", ",".join(map(str, args.threads)),
               "--seconds", str(args.seconds), "--models", args.models]
        out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
        results[workers] = json.loads(out.strip().splitlines()[-1])

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"{cores} CPUs; onnxruntime {ort.__version__}; runs/s, total over threads "
          f"(x: relative to 1 thread of the same column)")
    header = f"{'model':<8}{'sessions':<10}{'threads':>8}{'ORT CPU':>16}"
    header += "".join(f"{'MLX, ' + w + ' workers':>22}" for w in results)
    print(header)
    first = next(iter(results.values()))
    for row in first:
        if row["ep"] != "mlx":
            continue
        key = (row["model"], row["scenario"])

        def cell(rows, ep):
            r = next(x for x in rows if (x["model"], x["scenario"], x["threads"], x["ep"]) == key + (row["threads"], ep))
            one = next(x for x in rows if (x["model"], x["scenario"], x["threads"], x["ep"]) == key + (args.threads[0], ep))
            return f"{r['runs_per_s']:.0f} ({r['runs_per_s'] / one['runs_per_s']:.2f}x)"

        line = f"{row['model']:<8}{row['scenario']:<10}{row['threads']:>8}{cell(first, 'cpu'):>16}"
        line += "".join(f"{cell(rows, 'mlx'):>22}" for rows in results.values())
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpus": cores, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
