"""CPU benchmark: the MLX EP (MLX's CPU backend) against ORT's CPU EP in one process, on the demo
encoder block, a 512x256x1024 MatMul and one-op models of each float op family. The two sessions'
runs are taken in alternating blocks (10 runs of one, 10 of the other, 3 rounds), so that load
from other processes on the machine falls on both alike. Prints medians and the ratio ORT CPU / MLX EP (above 1: the EP is faster).

    .venv/bin/python bench/bench_cpu.py                     # all cases, 3 x 10 timed runs each
    .venv/bin/python bench/bench_cpu.py --only erf,matmul   # a subset
    .venv/bin/python bench/bench_cpu.py --first-run         # adds the demo's first run with an
                                                            # empty MLX JIT cache (subprocess)
    .venv/bin/python bench/bench_cpu.py --json out.json

Set ONNXRUNTIME_EP_MLX_LIBRARY to compare another build of the EP (e.g. a copy of the old one).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "examples"))
import onnxruntime_ep_mlx as mlx_ep  # noqa: E402
from make_encoder_model import build_encoder  # noqa: E402

F = TensorProto.FLOAT
ELEMENTWISE_SHAPE = [4, 128, 1024]  # the demo's feed-forward activation


def one_op(op, shapes, attrs=None, inits=()):
    """A model with one node `op` over float inputs of `shapes` (plus constant initializers)."""
    names = [f"x{i}" for i in range(len(shapes))]
    init_names = [t.name for t in inits]
    node = helper.make_node(op, names + init_names, ["y"], **(attrs or {}))
    graph = helper.make_graph([node], op.lower(), [helper.make_tensor_value_info(n, F, s)
                                                   for n, s in zip(names, shapes)],
                              [helper.make_tensor_value_info("y", F, None)], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def const(name, array):
    return numpy_helper.from_array(np.asarray(array, dtype=np.float32), name)


def cases():
    """name -> (model, feeds)."""
    rng = np.random.default_rng(0)

    def feeds(*shapes):
        return {f"x{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}

    e = ELEMENTWISE_SHAPE
    ln_shape = [4, 128, 256]
    out = {
        "encoder (4,128,256,4,1024)": (build_encoder(), {"x": rng.standard_normal((4, 128, 256)).astype(np.float32)}),
        "matmul 512x256x1024": (one_op("MatMul", [[512, 256], [256, 1024]]), feeds([512, 256], [256, 1024])),
        "erf [4,128,1024]": (one_op("Erf", [e]), feeds(e)),
        "softmax [4,4,128,128]": (one_op("Softmax", [[4, 4, 128, 128]], {"axis": -1}), feeds([4, 4, 128, 128])),
        "layernorm [4,128,256]": (one_op("LayerNormalization", [ln_shape], {"axis": -1, "epsilon": 1e-5},
                                         [const("g", rng.standard_normal(256)), const("b", rng.standard_normal(256))]),
                                  feeds(ln_shape)),
        "exp [4,128,1024]": (one_op("Exp", [e]), feeds(e)),
        "tanh [4,128,1024]": (one_op("Tanh", [e]), feeds(e)),
        "sigmoid [4,128,1024]": (one_op("Sigmoid", [e]), feeds(e)),
        "add [4,128,1024]+[1024]": (one_op("Add", [e, [1024]]), feeds(e, [1024])),
    }
    return out


def block_medians(sessions, feeds, warmup, block, rounds):
    """Median ms of each session over `rounds` rounds of `block` runs each, the sessions' blocks
    taken in turn: load that comes and goes falls on both alike, while a session's runs follow
    each other as in real use (run for run alternation would time each session while the other's
    thread pool still spins)."""
    times = [[] for _ in sessions]
    for _ in range(rounds):
        for s, t in zip(sessions, times):
            for _ in range(warmup):
                s.run(None, feeds)
            for _ in range(block):
                t0 = time.perf_counter()
                s.run(None, feeds)
                t.append((time.perf_counter() - t0) * 1e3)
    return [statistics.median(t) for t in times]


FIRST_RUN = """
import sys, time, numpy as np, onnxruntime as ort
sys.path.insert(0, {python!r}); sys.path.insert(0, {examples!r})
import onnxruntime_ep_mlx as m
from make_encoder_model import build_encoder
m.register_execution_provider_library()
s = ort.InferenceSession(build_encoder().SerializeToString(), providers=[m.ep_name(), "CPUExecutionProvider"])
x = {{"x": np.random.default_rng(0).standard_normal((4, 128, 256)).astype(np.float32)}}
t0 = time.perf_counter(); s.run(None, x); first = (time.perf_counter() - t0) * 1e3
t0 = time.perf_counter(); s.run(None, x); second = (time.perf_counter() - t0) * 1e3
print(first, second)
"""


def first_run_ms(tmpdir):
    """The demo encoder's first and second run in a fresh process whose TMPDIR is `tmpdir`
    (MLX keeps its JIT-compiled CPU kernels in $TMPDIR/mlx/<version>/cpu)."""
    code = FIRST_RUN.format(python=os.path.join(ROOT, "python"), examples=os.path.join(ROOT, "examples"))
    env = {**os.environ, "TMPDIR": tmpdir}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    first, second = (float(v) for v in out.stdout.split()[-2:])
    return first, second


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--block", type=int, default=10, help="timed runs per block")
    ap.add_argument("--rounds", type=int, default=3, help="blocks per session")
    ap.add_argument("--warmup", type=int, default=2, help="untimed runs before each block")
    ap.add_argument("--only", help="comma-separated substrings of case names")
    ap.add_argument("--ort-threads", type=int, default=0, help="ORT intra-op threads (0: ORT's default)")
    ap.add_argument("--first-run", action="store_true", help="also time the encoder's first run, empty JIT cache")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()

    lib = mlx_ep.register_execution_provider_library()
    device = next(d.ep_metadata for d in mlx_ep.get_ep_devices())
    print(f"EP library {lib}\nMLX device {device.get('mlx_device')}, BLAS {device.get('blas', '?')}; "
          f"onnxruntime {ort.__version__}; load average {os.getloadavg()[0]:.1f}; "
          f"{args.rounds} rounds of {args.block} runs per session, median")
    print(f"{'case':<30}{'ORT CPU ms':>12}{'MLX EP ms':>12}{'CPU/MLX':>9}{'max|diff|':>11}")
    rows = []
    wanted = [w.strip() for w in args.only.split(",")] if args.only else None
    for name, (model, feeds) in cases().items():
        if wanted and not any(w in name for w in wanted):
            continue
        data = model.SerializeToString()
        so = ort.SessionOptions()
        if args.ort_threads:
            so.intra_op_num_threads = args.ort_threads
        cpu = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        mlx = ort.InferenceSession(data, so, providers=[mlx_ep.ep_name(), "CPUExecutionProvider"])
        diff = float(np.max(np.abs(cpu.run(None, feeds)[0] - mlx.run(None, feeds)[0])))
        cpu_ms, mlx_ms = block_medians([cpu, mlx], feeds, args.warmup, args.block, args.rounds)
        rows.append({"case": name, "ort_cpu_ms": cpu_ms, "mlx_ms": mlx_ms, "ratio": cpu_ms / mlx_ms,
                     "max_abs_diff": diff})
        print(f"{name:<30}{cpu_ms:>12.2f}{mlx_ms:>12.2f}{cpu_ms / mlx_ms:>9.2f}{diff:>11.1e}", flush=True)
    result = {"library": lib, "device": dict(device), "onnxruntime": ort.__version__, "rows": rows}
    if args.first_run:
        with tempfile.TemporaryDirectory() as cold:
            first, second = first_run_ms(cold)
        warm_first, _ = first_run_ms(tempfile.gettempdir())  # cache filled by the runs above
        print(f"encoder first run: empty JIT cache {first:.0f} ms, filled cache {warm_first:.0f} ms "
              f"(second run {second:.1f} ms)")
        result["first_run"] = {"empty_cache_ms": first, "filled_cache_ms": warm_first, "second_run_ms": second}
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)


if __name__ == "__main__":
    main()
