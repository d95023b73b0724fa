"""What one small GPU kernel costs in MLX itself (no ORT, no EP), next to PyTorch eager and CUDA
graphs on the same GPU: evidence for how much of the EP's per-run time on small models is MLX's
(issue 7). A chain of `n` dependent small matmul+add+gelu steps on [batch, 256] activations, run
through `mx.compile` and evaluated once per call; per call and per step, microseconds, medians.

    python3 bench/mlx_launch_cost.py [--steps 8,32,128] [--iters 200]

Needs MLX's Python package (the mlx-cuda wheel carries it) and, for the peer, torch.
"""
import argparse
import statistics
import time


def median_us(fn, iters, warmup=20):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def mlx_chain(steps, width, batch):
    import mlx.core as mx

    ws = [mx.random.normal((width, width)) * (width ** -0.5) for _ in range(steps)]
    bs = [mx.zeros((width,)) for _ in range(steps)]
    x = mx.random.normal((batch, width))
    mx.eval(ws, bs, x)

    def chain(x):
        for w, b in zip(ws, bs):
            x = mx.tanh(x @ w + b)
        return x

    fn = mx.compile(chain)
    return lambda: mx.eval(fn(x))


def torch_chain(steps, width, batch, graph):
    import torch

    ws = [torch.randn(width, width, device="cuda") * width ** -0.5 for _ in range(steps)]
    bs = [torch.zeros(width, device="cuda") for _ in range(steps)]
    x = torch.randn(batch, width, device="cuda")

    def chain():
        y = x
        for w, b in zip(ws, bs):
            y = torch.tanh(y @ w + b)
        return y

    if not graph:
        def run():
            chain()
            torch.cuda.synchronize()
        return run
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            chain()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        chain()

    def replay():
        g.replay()
        torch.cuda.synchronize()
    return replay


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", default="8,32,128")
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--iters", type=int, default=200)
    args = p.parse_args()
    import mlx.core as mx

    print(f"MLX {mx.__version__} on {mx.default_device()}; chain of matmul+add+tanh on [{args.batch},{args.width}]")
    peers = {"mlx compile": lambda n: mlx_chain(n, args.width, args.batch)}
    try:
        import torch

        if torch.cuda.is_available():
            peers["torch eager"] = lambda n: torch_chain(n, args.width, args.batch, False)
            peers["torch cuda graph"] = lambda n: torch_chain(n, args.width, args.batch, True)
    except ImportError:
        pass
    print("| steps | " + " | ".join(f"{k} us/call | {k} us/step" for k in peers) + " |")
    print("|---|" + "---|---|" * len(peers))
    for n in [int(v) for v in args.steps.split(",")]:
        cells = []
        for make in peers.values():
            us = median_us(make(n), args.iters)
            cells += [f"{us:.0f}", f"{us / n:.1f}"]
        print(f"| {n} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
