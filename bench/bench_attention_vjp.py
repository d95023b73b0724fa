"""The over-budget AttentionVJP pullback on a GPU: the EP's custom CUDA kernels
(src/ops/attention_vjp_cuda.cc, ONNXRUNTIME_EP_MLX_ATTENTION_VJP_KERNEL=1) against the composed
query-blocked MLX ops (the default) and, for the Recompute form, mx::vjp of MLX's fused
SDPA (the score budget unset), on one AttentionVJP node of training-like shapes.

    python bench/bench_attention_vjp.py [--iters 5] [--json FILE]

Medians of interleaved runs (bench/timing.py), milliseconds, and the largest difference of the
kernels' gradients from the composed ops' relative to each gradient's largest magnitude (Y is
random for the AttentionVJP_ form: the gradients are not a real attention's, but both paths compute
the same function of the same inputs)."""
import argparse
import json
import os
import sys

import numpy as np
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python", "ops"))
import attention_vjp_models as avm  # noqa: E402
import onnxruntime_ep_mlx as mlx_ep  # noqa: E402
from timing import median_ms  # noqa: E402

LIMIT = "ONNXRUNTIME_EP_MLX_ATTENTION_VJP_DENSE_LIMIT_BYTES"
KERNEL = "ONNXRUNTIME_EP_MLX_ATTENTION_VJP_KERNEL"
VERBOSE = "ONNXRUNTIME_EP_MLX_VERBOSE"  # the kernels' session logs each node that takes them
# (config, batch, sequence length): score matrices of 128 MiB and 1 GiB, over the 64 MiB default.
CASES = [
    (avm.Config(rank=3, hq=8, hk=8, d=64, scale=0.125, causal=True), 1, 2048),
    (avm.Config(rank=3, hq=16, hk=4, d=128, scale=0.088, causal=True), 1, 4096),
    (avm.Config(rank=3, hq=16, hk=4, d=128, scale=0.088, causal=True, recompute=True), 1, 4096),
]


def feeds_of(c, batch, seq):
    rng = np.random.default_rng(0)
    qs, ks = avm.shapes(c, batch, seq, seq)
    feeds = {n: rng.uniform(-1, 1, s).astype(np.float32) for n, s in [("Q", qs), ("K", ks), ("V", ks), ("G", qs)]}
    if not c.recompute:
        feeds["Y"] = rng.uniform(-1, 1, qs).astype(np.float32)
    feeds["Mask"] = np.ones((1,), np.bool_)  # mask kind 0: ignored
    return feeds


def first_run(model, feeds, env):
    """An MLX session and its first run's outputs: that run (the trace, which reads the
    variables) runs under `env` (None: unset)."""
    with avm.scoped_env(**env):
        so = ort.SessionOptions()
        mlx_ep.append_to_session_options(so)
        sess = ort.InferenceSession(model.SerializeToString(), so)
        return sess, sess.run(None, feeds)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--json")
    parser.add_argument("--seq", type=int, help="every case at this sequence length (a quick try)")
    args = parser.parse_args()
    mlx_ep.register_execution_provider_library()
    rows = []
    for c, batch, seq in CASES:
        seq = args.seq or seq
        feeds = feeds_of(c, batch, seq)
        model = avm.model(c, feeds, (1, 0), seq, seq)
        budget = str(64 << 20)
        modes = {"kernel": {LIMIT: budget, KERNEL: "1", VERBOSE: "1"}, "composed": {LIMIT: budget, KERNEL: None}}
        if c.recompute:
            modes["fused_sdpa_vjp"] = {LIMIT: None, KERNEL: None}
        runs, outs = {}, {}
        for name, env in modes.items():
            sess, outs[name] = first_run(model, feeds, env)
            runs[name] = (lambda s: lambda: s.run(None, feeds))(sess)
        times = median_ms(list(runs.values()), warmup=1, iters=args.iters)
        diff = max(float(np.abs(a - b).max() / np.abs(b).max()) for a, b in zip(outs["kernel"], outs["composed"]))
        row = {"op_type": c.op_type()[:-17], "batch": batch, "seq": seq, "ms": dict(zip(runs, times)),
               "kernel_vs_composed": diff}
        rows.append(row)
        print(f"{row['op_type']} B={batch} S={seq}: " + ", ".join(f"{k} {v:.1f} ms" for k, v in row["ms"].items())
              + f"; kernel vs composed {diff:.1e} of scale", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
