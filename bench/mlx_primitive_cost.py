"""What one MLX primitive of each kind a decode step evaluates costs MLX itself on this device
(no ORT, no EP): evidence for which primitives bound the EP's GPU decode (issue 7).

For each kind, a chain of `n` dependent primitives on decode-shaped arrays (batch 1, hidden
2048, float16) is built and evaluated once per call (mx.eval, not compiled: one primitive per op);
the cost per primitive is the slope between two chain lengths (which cancels the fixed cost of
an eval and its synchronisation), medians of `--iters` calls, microseconds. "build" is the
Python-side graph construction, "eval" what mx.eval takes.

Kinds: a one-row product with the weight [K, N] row-major (cuBLASLt on MLX's CUDA backend) and
with the weight a transposed view of an [N, K] array (MLX's own gemv kernel), an elementwise add,
rms_norm, an int4 quantized one-row product, a concatenation of a KV block, a custom kernel
(mx.fast.cuda_kernel / metal_kernel, an add), masked attention (cuDNN's path on CUDA), and views (reshape + slice).

    python3 bench/mlx_primitive_cost.py [--kinds ...] [--lengths 20,100] [--iters 30] [--json FILE]
"""
import argparse
import json
import statistics
import time


def median(values):
    return statistics.median(values)


def make_kinds(mx, hidden, dtype):
    """name -> (step(x) -> x, x0): each step one primitive (two where the name says so)."""
    k = hidden
    x0 = mx.random.normal((1, k)).astype(dtype)
    w_kn = (mx.random.normal((k, k)) * k ** -0.5).astype(dtype)  # [K, N] row-major
    w_nk = mx.contiguous(w_kn.T)  # [N, K] row-major; .T is a [K, N] view (gemv on CUDA)
    ones = mx.ones((1, k), dtype=dtype)
    gamma = mx.ones((k,), dtype=dtype)
    wq, scales, biases = mx.quantize(w_nk, group_size=32, bits=4)
    # the EP's MatMulNBits: float32 activations and scales (exact against ORT's dequantization)
    wq32, scales32, biases32 = mx.quantize(w_nk.astype(mx.float32), group_size=32, bits=4)
    x32 = x0.astype(mx.float32)
    kv = mx.random.normal((1, 4, 1024, 64)).astype(dtype)
    mx.eval(x0, w_kn, w_nk, ones, gamma, wq, scales, biases, kv, wq32, scales32, biases32, x32)
    q = mx.random.normal((1, 32, 2, 64)).astype(dtype)
    k_cache = mx.random.normal((1, 4, 1025, 64)).astype(dtype)
    mask = mx.zeros((1, 1, 2, 1025), dtype=dtype)
    row = mx.random.normal((1, 4, 1, 64)).astype(dtype)
    mx.eval(q, k_cache, mask, row)
    kinds = {
        "matmul_kn": (lambda x: x @ w_kn, x0),
        "matmul_nk_view": (lambda x: x @ w_nk.T, x0),
        "add": (lambda x: x + ones, x0),
        "rms_norm": (lambda x: mx.fast.rms_norm(x, gamma, 1e-5), x0),
        "qmm_int4": (lambda x: mx.quantized_matmul(x, wq, scales, biases, transpose=True, group_size=32, bits=4), x0),
        "qmm_int4_f32": (lambda x: mx.quantized_matmul(x, wq32, scales32, biases32, transpose=True, group_size=32,
                                                       bits=4), x32),
        # the cache grows by a row and loses its first: one Concatenate and one Slice view a step
        "concat_kv+slice": (lambda c: mx.concatenate([c, row], axis=2)[:, :, 1:], kv),
        "sdpa_masked": (lambda x: mx.fast.scaled_dot_product_attention(x, k_cache, k_cache, scale=0.125, mask=mask), q),
        "reshape+slice": (lambda x: x.reshape(1, 1, k)[:, 0, :], x0),
    }
    custom = make_custom_add(mx)
    if custom is not None:
        kinds["custom_kernel"] = (lambda x: custom(x, ones), x0)
    return kinds


def make_custom_add(mx):
    # launched with exactly one thread per element (the benchmark's sizes are multiples of 256)
    source = "unsigned int i = threadIdx.x + blockIdx.x * blockDim.x; out[i] = a[i] + b[i];"
    try:
        if mx.cuda.is_available():
            kernel = mx.fast.cuda_kernel(name="bench_add", input_names=["a", "b"], output_names=["out"],
                                         source=source)
        else:
            return None
    except AttributeError:
        return None

    def run(a, b):
        return kernel(inputs=[a, b], grid=(a.size, 1, 1), threadgroup=(256, 1, 1),
                      output_shapes=[a.shape], output_dtypes=[a.dtype])[0]
    return run


def time_chain(mx, step, x0, n, iters, warmup=5):
    builds, evals = [], []
    for i in range(warmup + iters):
        t0 = time.perf_counter()
        x = x0
        for _ in range(n):
            x = step(x)
        t1 = time.perf_counter()
        mx.eval(x)
        t2 = time.perf_counter()
        if i >= warmup:
            builds.append((t1 - t0) * 1e6)
            evals.append((t2 - t1) * 1e6)
    return median(builds), median(evals)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kinds", default="")
    p.add_argument("--lengths", default="20,100")
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--json")
    args = p.parse_args()
    import mlx.core as mx

    lo, hi = (int(v) for v in args.lengths.split(","))
    kinds = make_kinds(mx, args.hidden, mx.float16)
    wanted = [k for k in args.kinds.split(",") if k] or list(kinds)
    print(f"MLX {mx.__version__} on {mx.default_device()}; float16, hidden {args.hidden}, chains of {lo} and {hi}")
    print("| primitive | eval us/primitive | build us/primitive | eval of the short chain us |")
    print("|---|---:|---:|---:|")
    rows = {}
    for name in wanted:
        step, x0 = kinds[name]
        b_lo, e_lo = time_chain(mx, step, x0, lo, args.iters)
        b_hi, e_hi = time_chain(mx, step, x0, hi, args.iters)
        per_eval, per_build = (e_hi - e_lo) / (hi - lo), (b_hi - b_lo) / (hi - lo)
        rows[name] = {"eval_us": per_eval, "build_us": per_build, "eval_short_us": e_lo}
        print(f"| {name} | {per_eval:.1f} | {per_build:.1f} | {e_lo:.0f} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"mlx": mx.__version__, "device": str(mx.default_device()), "lengths": [lo, hi],
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
