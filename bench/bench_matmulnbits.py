"""MatMulNBits (com.microsoft, int4/int8 weights from ORT's own quantizer): the MLX EP against ORT's
CPU EP in one process, interleaved medians (bench/timing.median_ms). Default: the projections of a
Qwen2-0.5B layer (hidden 896, intermediate 4864, q/o 896x896, k/v 896x128, gate/up 896x4864,
down 4864x896), decode (1 row of A) and prefill (128 rows), int4 blocks of 32 and 128,
accuracy_level 0 (float32 math) and 4 (ORT's CPU EP quantizes A to int8 per block; the EP
reproduces that on MLX's CPU device). On MLX's CPU stream up to 16 rows take the EP's nbits_cpu
kernel (src/ops/quantized_cpu*.cc), more rows (level 0) one BLAS GEMM per panel of dequantized columns.
Prints medians, ORT CPU / MLX EP (above 1: the EP is faster), and per (bits, block, level, rows)
the sum over one layer's projections times 24 layers: the MatMulNBits time of a forward pass.

    .venv/bin/python bench/bench_matmulnbits.py
    .venv/bin/python bench/bench_matmulnbits.py --rows 1,4,8,128 --bits 4 --shapes 2048x2048
    .venv/bin/python bench/bench_matmulnbits.py --accuracy-levels 4 --block-sizes 32
"""
import argparse
import json
import os
import sys

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.capi._pybind_state import quantize_matmul_4bits, quantize_matmul_8bits

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import onnxruntime_ep_mlx as mlx_ep  # noqa: E402
from timing import median_ms  # noqa: E402


def nbits_model(K, N, bits, block_size, accuracy_level, seed=0):
    """One MatMulNBits node with A [rows, K] (rows symbolic) and ORT-quantized weights."""
    rng = np.random.default_rng(seed)
    kb = -(-K // block_size)
    w = np.pad(rng.standard_normal((K, N)).astype(np.float32), ((0, kb * block_size - K), (0, 0)))
    packed = np.zeros((N, kb, block_size * bits // 8), np.uint8)
    scales = np.zeros((N, kb), np.float32)
    zp = np.zeros((N, -(-kb * bits // 8)), np.uint8)
    quantize = quantize_matmul_4bits if bits == 4 else quantize_matmul_8bits
    quantize(packed, w, scales, zp, block_size, N, K, False)
    inits = [numpy_helper.from_array(packed, "B"), numpy_helper.from_array(scales, "scales"),
             numpy_helper.from_array(zp, "zp")]
    node = helper.make_node("MatMulNBits", ["A", "B", "scales", "zp"], ["Y"], domain="com.microsoft", K=K, N=N,
                            bits=bits, block_size=block_size, accuracy_level=accuracy_level)
    graph = helper.make_graph([node], "nbits", [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["rows", K])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["rows", N])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model.SerializeToString()


def sessions(model, threads, spin):
    mlx_ep.register_execution_provider_library()
    out = []
    for providers in (["CPUExecutionProvider"], ["MLXExecutionProvider", "CPUExecutionProvider"]):
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        if not spin:  # ORT's intra-op threads spin after each run unless told not to
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        out.append(ort.InferenceSession(model, so, providers=providers))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="896x896,896x128,896x4864,4864x896",
                   help="KxN list (default: Qwen2-0.5B's q/o, k/v, gate/up, down projections)")
    p.add_argument("--layer", default="896x896:2,896x128:2,896x4864:2,4864x896:1",
                   help="KxN:count of one layer's projections, for the per-token sum ('' to skip)")
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--rows", default="1,128")
    p.add_argument("--bits", default="4")
    p.add_argument("--block-sizes", default="32,128")
    p.add_argument("--accuracy-levels", default="0,4")
    p.add_argument("--threads", type=int, default=2, help="ORT CPU EP intra-op threads")
    p.add_argument("--spin", action="store_true", help="let ORT's intra-op threads spin (its default)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--json")
    args = p.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}, ORT threads {args.threads}, "
          f"spinning {'on' if args.spin else 'off'}")
    results = []
    print(f"{'case':<44} {'ORT CPU ms':>10} {'MLX EP ms':>10} {'CPU/MLX':>8}")
    for level in map(int, args.accuracy_levels.split(",")):
        for bs in map(int, args.block_sizes.split(",")):
            for bits in map(int, args.bits.split(",")):
                for shape in args.shapes.split(","):
                    K, N = map(int, shape.split("x"))
                    cpu, mlx = sessions(nbits_model(K, N, bits, bs, level), args.threads, args.spin)
                    for rows in map(int, args.rows.split(",")):
                        a = np.random.default_rng(1).standard_normal((rows, K)).astype(np.float32)
                        feeds = {"A": a}
                        ref, got = cpu.run(None, feeds)[0], mlx.run(None, feeds)[0]
                        err = float(np.abs(ref - got).max() / np.abs(ref).max())
                        iters = max(5, args.iters // (4 if rows >= 64 else 1))
                        t_cpu, t_mlx = median_ms([lambda: cpu.run(None, feeds), lambda: mlx.run(None, feeds)],
                                                 args.warmup, iters)
                        name = f"K={K} N={N} int{bits} bs={bs} acc={level} M={rows}"
                        print(f"{name:<44} {t_cpu:>10.3f} {t_mlx:>10.3f} {t_cpu / t_mlx:>8.3f}  "
                              f"(max diff {err:.1e} of max|y|)", flush=True)
                        results.append(dict(K=K, N=N, bits=bits, block_size=bs, accuracy_level=level, rows=rows,
                                            ort_cpu_ms=t_cpu, mlx_ep_ms=t_mlx, scaled_diff=err))
    if args.layer:
        layer = [(tuple(map(int, kn.split("x"))), int(c)) for kn, c in (e.split(":") for e in args.layer.split(","))]
        print(f"\nMatMulNBits of one forward pass (M tokens), {args.layers} layers of {args.layer}:")
        groups = sorted({(r["bits"], r["block_size"], r["accuracy_level"], r["rows"]) for r in results})
        for g in groups:
            rows = {(r["K"], r["N"]): r for r in results if (r["bits"], r["block_size"], r["accuracy_level"], r["rows"]) == g}
            if not all(kn in rows for kn, _ in layer):
                continue
            t_cpu = args.layers * sum(c * rows[kn]["ort_cpu_ms"] for kn, c in layer)
            t_mlx = args.layers * sum(c * rows[kn]["mlx_ep_ms"] for kn, c in layer)
            print(f"  int{g[0]} bs={g[1]} acc={g[2]} M={g[3]}: ORT CPU {t_cpu:.2f} ms, MLX EP {t_mlx:.2f} ms, "
                  f"CPU/MLX {t_cpu / t_mlx:.3f}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
