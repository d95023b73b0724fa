"""The demo: generates the bundled encoder-block model, runs it on ORT's CPU EP and on MLX
(+ CPU fallback), and prints the claim summary, the largest difference and median latencies."""
import argparse
import os
import statistics
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
import onnxruntime_ep_mlx as mlx_ep  # noqa: E402
from make_encoder_model import build_encoder  # noqa: E402


def median_ms(sess, feeds, warmup, iters):
    for _ in range(warmup):
        sess.run(None, feeds)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()

    out_dir = os.path.join(os.path.dirname(HERE), "build", "demo")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "encoder_block.onnx")
    onnx.save(build_encoder(), path)
    model = onnx.load(path)
    x = np.random.default_rng(1).standard_normal((args.batch, args.seq, 256)).astype(np.float32)
    feeds = {"x": x}

    report = mlx_ep.claim_report(path)
    g = report["graphs"][0]
    print(f"model: {path} ({len(model.graph.node)} nodes, input {list(x.shape)})")
    device = mlx_ep.get_ep_devices()[0].ep_metadata.get("mlx_device", "?")
    print(f"MLX device: {device}; claimed {g['nodes_claimed']}/{g['nodes_total']} nodes "
          f"in {len(g['partitions'])} partition(s)")
    for d in g["declined"]:
        print(f"  declined {d['node']} ({d['op_type']}): {d['reason']}")

    cpu = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    mlx_ep.register_execution_provider_library()
    mlx = ort.InferenceSession(path, providers=[mlx_ep.ep_name(), "CPUExecutionProvider"])
    ref = cpu.run(None, feeds)[0]
    t0 = time.perf_counter()
    got = mlx.run(None, feeds)[0]
    first_ms = (time.perf_counter() - t0) * 1e3
    diff = float(np.max(np.abs(got - ref)))
    rel = diff / float(np.max(np.abs(ref)))
    cpu_ms = median_ms(cpu, feeds, 3, args.iters)
    mlx_ms = median_ms(mlx, feeds, 3, args.iters)
    print(f"max |MLX - CPU| = {diff:.3e} (relative to max |CPU| = {rel:.3e})")
    # The first run traces the graph and compiles it; on MLX's CPU backend that includes building
    # the fused kernels with the system C++ compiler, which MLX caches in $TMPDIR/mlx/<version>/cpu
    # (seconds with an empty cache, much less once filled). The medians below are warm runs.
    print(f"MLX EP first run (trace + compile): {first_ms:.0f} ms")
    print(f"median latency over {args.iters} warm runs: ORT CPU EP {cpu_ms:.2f} ms, MLX EP {mlx_ms:.2f} ms "
          f"(CPU/MLX = {cpu_ms / mlx_ms:.2f}x)")
    if not np.allclose(got, ref, rtol=1e-4, atol=1e-4):
        print("FAIL: MLX output differs from the CPU EP")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
