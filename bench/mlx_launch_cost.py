"""What one small GPU kernel costs in MLX itself (no ORT, no EP), next to PyTorch eager and CUDA
graphs on the same GPU: evidence for how much of the EP's per-run time on small models is MLX's
(issue 7). A chain of `n` dependent small matmul+add+gelu steps on [batch, 256] activations, run
through `mx.compile` and evaluated once per call; per call and per step, microseconds, medians.

    python3 bench/mlx_launch_cost.py [--steps 8,32,128] [--iters 200]
    python3 bench/mlx_launch_cost.py --what norms     # a built-in kernel's launch against a custom one's

`--what norms`: chains of row normalizations of one [1, 2048] float16 row, one launch a step where
MLX allows it: MLX's rms_norm on the row; the EP's path today (rms_norm on float32 values, the
casts around it); a custom kernel (mx.fast.cuda_kernel) of the same work with its constants in
the source; the same reading eps from a kept params array; and from a params array made per call
(as the write kernels' params were before 2bf5597). The twelfth session's custom norm kernel lost
its A/B against MLX's path by ~20-40 us a launch (docs/performance.md); per-step times here say
whether a custom kernel's launch costs more than a built-in one's, and what a params array adds.

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


NORM_ROW = 2048

# One block a row: the row's mean square, then x / sqrt(ms + eps) * w (the work of the EP's norm
# kernel, src/ops/normalization_cuda.cc, without its options). EPS_SOURCE is how eps is read.
NORM_SOURCE = """
  __shared__ float partial[32];
  const int row = blockIdx.x, tid = threadIdx.x;
  float acc = 0.f;
  for (int i = tid; i < N; i += blockDim.x) {
    const float v = static_cast<float>(x[row * N + i]);
    acc += v * v;
  }
  for (int m = 16; m > 0; m >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, m);
  if ((tid & 31) == 0) partial[tid >> 5] = acc;
  __syncthreads();
  float total = 0.f;
  for (int k = 0; k < static_cast<int>(blockDim.x / 32); ++k) total += partial[k];
  const float denom = sqrtf(total / N + EPS_SOURCE);
  for (int i = tid; i < N; i += blockDim.x)
    y[row * N + i] = static_cast<T>(static_cast<float>(x[row * N + i]) / denom * static_cast<float>(w[i]));
"""


def norm_chains():
    """name -> make(steps) for the --what norms peers (see the module's docstring)."""
    import mlx.core as mx

    x = mx.random.normal((1, NORM_ROW)).astype(mx.float16)
    w16, w32 = mx.ones((NORM_ROW,), mx.float16), mx.ones((NORM_ROW,), mx.float32)
    kept = mx.array([1e-5], mx.float32)
    mx.eval(x, w16, w32, kept)
    const = mx.fast.cuda_kernel("bench_norm_const", ["x", "w"], ["y"], NORM_SOURCE.replace("EPS_SOURCE", "1e-5f"))
    params = mx.fast.cuda_kernel("bench_norm_params", ["x", "w", "params"], ["y"],
                                 NORM_SOURCE.replace("EPS_SOURCE", "params[0]"))

    def custom(kernel, a, *extra):
        return kernel(inputs=[a, w16, *extra], template=[("T", mx.float16), ("N", NORM_ROW)],
                      grid=(256 * a.shape[0], 1, 1), threadgroup=(256, 1, 1), output_shapes=[a.shape],
                      output_dtypes=[a.dtype])[0]

    steps_of = {
        "mlx rms_norm f16": lambda a, p: mx.fast.rms_norm(a, w16, 1e-5),
        "EP today: f32 rms_norm + casts": lambda a, p: mx.fast.rms_norm(a.astype(mx.float32), w32, 1e-5).astype(
            mx.float16),
        "custom, constants": lambda a, p: custom(const, a),
        "custom, kept params": lambda a, p: custom(params, a, kept),
        "custom, params per call": lambda a, p: custom(params, a, p),
    }

    def make(step, per_call):
        def chain(n):
            def run_chain(a, p):
                for _ in range(n):
                    a = step(a, p)
                return a
            fn = mx.compile(run_chain)
            if per_call:
                return lambda: mx.eval(fn(x, mx.array([1e-5], mx.float32)))
            return lambda: mx.eval(fn(x, kept))
        return chain

    return {name: make(step, name.endswith("per call")) for name, step in steps_of.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", default="8,32,128")
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--what", choices=["chain", "norms"], default="chain")
    args = p.parse_args()
    import mlx.core as mx

    if args.what == "norms":
        print(f"MLX {mx.__version__} on {mx.default_device()}; chains of row norms of one [1, {NORM_ROW}] float16 row")
        peers = norm_chains()
        print("| steps | " + " | ".join(f"{k} us/call | us/step" for k in peers) + " |")
        print("|---|" + "---|---|" * len(peers))
        for n in [int(v) for v in args.steps.split(",")]:
            cells = []
            for name, make in peers.items():
                try:
                    us = median_us(make(n), args.iters)
                    cells += [f"{us:.0f}", f"{us / n:.1f}"]
                except Exception as e:  # no CUDA back-end: the custom kernels cannot run
                    cells += [f"n/a ({type(e).__name__})", ""]
            print(f"| {n} | " + " | ".join(cells) + " |", flush=True)
        return

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
