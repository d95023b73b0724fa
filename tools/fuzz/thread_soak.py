"""Thread soak: T threads x R runs on one shared MLX session and on one session per thread, a few
input shapes in turn, every result checked bit-identical to a single-threaded MLX run and close
to ORT's CPU EP (rtol 1e-5). The long version of tests/python/test_threads.py.

    .venv/bin/python tools/fuzz/thread_soak.py [--threads 8] [--runs 10000]

Prints the runs, the wrong results (must be 0) and the runs/s of each scenario.
"""
import argparse
import os
import sys
import threading
import time

import numpy as np
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(ROOT, "tests", "python"), os.path.join(ROOT, "python")]
from harness import mlx_session  # noqa: E402
from test_threads import dense_model  # noqa: E402


def soak(sessions, inputs, want, runs):
    """Thread t runs sessions[t] `runs` times over `inputs`; returns (wrong, seconds)."""
    wrong = [0] * len(sessions)

    def work(t):
        for i in range(runs):
            k = (t + i) % len(inputs)
            wrong[t] += not np.array_equal(sessions[t].run(None, {"x": inputs[k]})[0], want[k])

    threads = [threading.Thread(target=work, args=(t,)) for t in range(len(sessions))]
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return sum(wrong), time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--runs", type=int, default=10000, help="runs per thread")
    args = ap.parse_args()
    data = dense_model()
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((n, 64)).astype(np.float32) for n in (1, 3, 16, 33, 64)]
    single = mlx_session(data)
    want = [single.run(None, {"x": x})[0] for x in inputs]
    cpu = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for x, y in zip(inputs, want):
        np.testing.assert_allclose(y, cpu.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
    shared = mlx_session(data)
    for name, sessions in (("one shared session", [shared] * args.threads),
                           ("one session per thread", [mlx_session(data) for _ in range(args.threads)])):
        wrong, seconds = soak(sessions, inputs, want, args.runs)
        total = args.threads * args.runs
        print(f"{name}: {args.threads} threads x {args.runs} runs = {total}, wrong {wrong}, "
              f"{total / seconds:.0f} runs/s")
        if wrong:
            sys.exit(1)


if __name__ == "__main__":
    main()
