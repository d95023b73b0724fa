"""The BLAS thread policy, measured: an ORT CPU session and an MLX EP session in one process, with
OpenBLAS (under MLX) on 1 and on 2 threads. For each setting, in a fresh process:

    alone        each session's runs by themselves (the other session exists, idle)
    alternating  one run of ORT, one of MLX, in turn (two models of one pipeline)
    concurrent   two Python threads, one running each session, for a few seconds

and, as the reference, ORT's CPU session in a process where the EP was never loaded.
Medians in ms of the demo encoder (4,128,256) on both, and of a 512x256x1024 MatMul on MLX.

    .venv/bin/python bench/bench_threads.py [--threads 1,2] [--ort-threads N] [--no-spin] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

import numpy as np
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from make_encoder_model import build_encoder  # noqa: E402


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def median_of(fn, n, warmup=3):
    for _ in range(warmup):
        fn()
    return statistics.median(timed(fn) for _ in range(n))


NO_SPIN = "--no-spin" in sys.argv


def ort_options(ort_threads):
    so = ort.SessionOptions()
    if ort_threads:
        so.intra_op_num_threads = ort_threads
    if NO_SPIN:  # ORT's intra-op pool then sleeps when idle instead of spinning
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return so


def measure(with_ep, ort_threads, n):
    """Runs in the child process: one setting, all scenarios."""
    enc = build_encoder().SerializeToString()
    x = {"x": np.random.default_rng(0).standard_normal((4, 128, 256)).astype(np.float32)}
    cpu = ort.InferenceSession(enc, ort_options(ort_threads), providers=["CPUExecutionProvider"])
    run_cpu = lambda: cpu.run(None, x)  # noqa: E731
    if not with_ep:
        return {"ort_alone_no_ep": median_of(run_cpu, n)}
    import onnxruntime_ep_mlx as mlx_ep
    from bench_cpu import one_op

    mlx_ep.register_execution_provider_library()
    providers = [mlx_ep.ep_name(), "CPUExecutionProvider"]
    mlx = ort.InferenceSession(enc, ort_options(ort_threads), providers=providers)
    mm = ort.InferenceSession(one_op("MatMul", [[512, 256], [256, 1024]]).SerializeToString(),
                              ort_options(ort_threads), providers=providers)
    rng = np.random.default_rng(1)
    mm_feeds = {"x0": rng.standard_normal((512, 256)).astype(np.float32),
                "x1": rng.standard_normal((256, 1024)).astype(np.float32)}
    run_mlx = lambda: mlx.run(None, x)  # noqa: E731
    out = {"blas_threads": mlx_ep.get_ep_devices()[0].ep_metadata.get("blas_threads", "?"),
           "mlx_matmul_alone": median_of(lambda: mm.run(None, mm_feeds), n),
           "mlx_alone": median_of(run_mlx, n), "ort_alone": median_of(run_cpu, n)}
    a, b = [], []
    for _ in range(3):
        run_cpu(), run_mlx()
    for _ in range(n):
        a.append(timed(run_cpu))
        b.append(timed(run_mlx))
    out["ort_alternating"], out["mlx_alternating"] = statistics.median(a), statistics.median(b)
    times = {"ort": [], "mlx": []}
    stop = time.perf_counter() + 4.0

    def loop(name, fn):
        while time.perf_counter() < stop:
            times[name].append(timed(fn))

    threads = [threading.Thread(target=loop, args=("ort", run_cpu)), threading.Thread(target=loop, args=("mlx", run_mlx))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out["ort_concurrent"] = statistics.median(times["ort"][2:] or times["ort"])
    out["mlx_concurrent"] = statistics.median(times["mlx"][2:] or times["mlx"])
    return out


def child(args, env_threads):
    env = dict(os.environ)
    if env_threads is not None:
        env["ONNXRUNTIME_EP_MLX_BLAS_THREADS"] = str(env_threads)
    cmd = [sys.executable, __file__, "--child", "--n", str(args.n), "--ort-threads", str(args.ort_threads)]
    if args.no_spin:
        cmd.append("--no-spin")
    if env_threads is None:
        cmd.append("--no-ep")
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2", help="OpenBLAS thread counts to compare")
    ap.add_argument("--ort-threads", type=int, default=0, help="ORT intra-op threads (0: ORT's default)")
    ap.add_argument("--n", type=int, default=30, help="timed runs per scenario")
    ap.add_argument("--no-spin", action="store_true", help="session.intra_op.allow_spinning=0 for ORT")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--no-ep", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(not args.no_ep, args.ort_threads, args.n)))
        return
    print(f"load average {os.getloadavg()[0]:.1f}; ORT intra-op threads: {args.ort_threads or 'default'}"
          f"{', spinning off' if args.no_spin else ''}; "
          f"medians of {args.n} runs, ms")
    ref = child(args, None)["ort_alone_no_ep"]
    print(f"ORT CPU encoder, EP never loaded: {ref:.2f}")
    cols = ["mlx_matmul_alone", "mlx_alone", "ort_alone", "mlx_alternating", "ort_alternating",
            "mlx_concurrent", "ort_concurrent"]
    print(f"{'BLAS threads':<14}" + "".join(f"{c:>18}" for c in cols))
    rows = {"ort_alone_no_ep": ref}
    for t in [int(v) for v in args.threads.split(",")]:
        r = child(args, t)
        rows[str(t)] = r
        print(f"{r['blas_threads']:<14}" + "".join(f"{r[c]:>18.2f}" for c in cols), flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
