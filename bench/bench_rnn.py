"""Cost of the unrolled time loop of RNN/GRU/LSTM on the MLX EP, against ORT's CPU EP.

The EP unrolls the time axis when tracing (MLX has no loop primitive), so its graph grows linearly
with the sequence length. For each op and sequence length this prints:

  first run  - the first Run of a fresh session: tracing the unrolled graph, mx::compile, and one
               evaluation (the EP traces when it first sees the input shapes)
  run        - the median of the following runs (compiled graph, cache hit)
  ORT CPU    - the median run of ORT's CPU EP on the same model
  max |diff| - the largest absolute difference of Y between the two

Weights are constant initializers; X and sequence_lens (all full length, so the masks are in the
graph) are fed at run time.

    .venv/bin/python bench/bench_rnn.py                       # compiled (the default)
    .venv/bin/python bench/bench_rnn.py --eager               # also ONNXRUNTIME_EP_MLX_NO_COMPILE=1
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
import onnxruntime_ep_mlx as mlx_ep  # noqa: E402
from timing import median_ms  # noqa: E402

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def build(op, seq, batch, input_size, hidden, direction):
    """(model bytes, feeds) of one `op` node with constant W, R, B."""
    rng = np.random.default_rng(0)
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    scale = 1.0 / np.sqrt(hidden)
    inits = {"W": rng.uniform(-scale, scale, (dirs, g * hidden, input_size)).astype(np.float32),
             "R": rng.uniform(-scale, scale, (dirs, g * hidden, hidden)).astype(np.float32),
             "B": rng.uniform(-scale, scale, (dirs, 2 * g * hidden)).astype(np.float32)}
    outputs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, ["X", "W", "R", "B", "L"], outputs, hidden_size=hidden, direction=direction)
    graph = helper.make_graph(
        [node], "bench",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [seq, batch, input_size]),
         helper.make_tensor_value_info("L", TensorProto.INT32, [batch])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [onnx.numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    feeds = {"X": rng.uniform(-1, 1, (seq, batch, input_size)).astype(np.float32),
             "L": np.full((batch,), seq, np.int32)}
    return model.SerializeToString(), feeds


def session(model, mlx):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if mlx:
        mlx_ep.append_to_session_options(so)
        return ort.InferenceSession(model, so)
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def measure(op, seq, args):
    model, feeds = build(op, seq, args.batch, args.input, args.hidden, args.direction)
    cpu = session(model, mlx=False)
    ref = cpu.run(None, feeds)
    cpu_ms = median_ms([lambda: cpu.run(None, feeds)], 0, args.iters)[0]

    t0 = time.perf_counter()
    sess = session(model, mlx=True)
    create_ms = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    got = sess.run(None, feeds)
    first_ms = (time.perf_counter() - t0) * 1e3
    run_ms = median_ms([lambda: sess.run(None, feeds)], 0, args.iters)[0]
    diff = float(np.max(np.abs(got[0] - ref[0])))
    return {"op": op, "seq": seq, "create_ms": create_ms, "first_run_ms": first_ms, "run_ms": run_ms,
            "cpu_run_ms": cpu_ms, "max_abs_diff": diff}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", nargs="+", default=["LSTM", "GRU", "RNN"])
    ap.add_argument("--seqs", nargs="+", type=int, default=[16, 64, 256])
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--input", type=int, default=128)
    ap.add_argument("--direction", default="forward")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--eager", action="store_true", help="also run with ONNXRUNTIME_EP_MLX_NO_COMPILE=1")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()

    mlx_ep.register_execution_provider_library()
    device = next(d.ep_metadata.get("mlx_device", "?") for d in mlx_ep.get_ep_devices())
    mode = "eager (no mx::compile)" if os.environ.get("ONNXRUNTIME_EP_MLX_NO_COMPILE") == "1" else "compiled"
    print(f"MLX device: {device}, {mode}; onnxruntime {ort.__version__}; batch {args.batch}, input "
          f"{args.input}, hidden {args.hidden}, {args.direction}; median of {args.iters} runs")
    print(f"{'op':<6}{'seq':>5}{'session ms':>12}{'first run ms':>14}{'run ms':>9}{'ORT CPU ms':>12}"
          f"{'CPU/MLX':>9}{'max |diff|':>12}")
    rows = []
    for op in args.ops:
        for seq in args.seqs:
            r = measure(op, seq, args)
            rows.append(r)
            print(f"{op:<6}{seq:>5}{r['create_ms']:>12.1f}{r['first_run_ms']:>14.1f}{r['run_ms']:>9.2f}"
                  f"{r['cpu_run_ms']:>12.2f}{r['cpu_run_ms'] / r['run_ms']:>9.2f}{r['max_abs_diff']:>12.1e}",
                  flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device, "mode": mode, "rows": rows}, f, indent=1)
    if args.eager:
        argv = [a for a in sys.argv[1:] if a != "--eager"]
        if args.json:
            i = argv.index("--json")
            argv[i + 1] = os.path.splitext(args.json)[0] + "_eager.json"
        print()
        subprocess.run([sys.executable, os.path.abspath(__file__), *argv],
                       env={**os.environ, "ONNXRUNTIME_EP_MLX_NO_COMPILE": "1"}, check=True)


if __name__ == "__main__":
    main()
