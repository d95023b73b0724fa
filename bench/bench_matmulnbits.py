"""MatMulNBits (com.microsoft, int4/int8 weights from ORT's own quantizer): the MLX EP against ORT's
CPU EP in one process, interleaved medians (bench/timing.median_ms). Decode (few rows of A) and
prefill (128 rows) on K=N=2048 and on a 0.5B-model MLP shape (K=896, N=4864). Rows 1-4 take the
EP's mx::quantized_matmul path, more rows its dequantize + GEMM path (src/ops/quantized.cc), so
the rows sweep shows where the two cross. Prints medians and ORT CPU / MLX EP (above 1: the EP is
faster).

    .venv/bin/python bench/bench_matmulnbits.py
    .venv/bin/python bench/bench_matmulnbits.py --rows 1,4,8,128 --bits 4 --shapes 2048x2048
    .venv/bin/python bench/bench_matmulnbits.py --accuracy-level 4   # ORT's int8-A path (the EP declines it)
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


def sessions(model, threads):
    mlx_ep.register_execution_provider_library()
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    cpu = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    mlx = ort.InferenceSession(model, so, providers=["MLXExecutionProvider", "CPUExecutionProvider"])
    return cpu, mlx


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="2048x2048,896x4864", help="KxN list")
    p.add_argument("--rows", default="1,2,4,8,16,128")
    p.add_argument("--bits", default="4,8")
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--accuracy-level", type=int, default=0)
    p.add_argument("--threads", type=int, default=2, help="ORT CPU EP intra-op threads")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--json")
    args = p.parse_args()
    results = []
    print(f"{'case':<34} {'ORT CPU ms':>10} {'MLX EP ms':>10} {'CPU/MLX':>8}")
    for shape in args.shapes.split(","):
        K, N = map(int, shape.split("x"))
        for bits in map(int, args.bits.split(",")):
            cpu, mlx = sessions(nbits_model(K, N, bits, args.block_size, args.accuracy_level), args.threads)
            for rows in map(int, args.rows.split(",")):
                a = np.random.default_rng(1).standard_normal((rows, K)).astype(np.float32)
                feeds = {"A": a}
                ref, got = cpu.run(None, feeds)[0], mlx.run(None, feeds)[0]
                err = float(np.abs(ref - got).max() / np.abs(ref).max())
                iters = max(5, args.iters // (4 if rows >= 64 else 1))
                t_cpu, t_mlx = median_ms([lambda: cpu.run(None, feeds), lambda: mlx.run(None, feeds)],
                                         args.warmup, iters)
                name = f"K={K} N={N} int{bits} bs={args.block_size} M={rows}"
                print(f"{name:<34} {t_cpu:>10.3f} {t_mlx:>10.3f} {t_cpu / t_mlx:>8.3f}  (max diff {err:.1e} of max|y|)")
                results.append(dict(K=K, N=N, bits=bits, block_size=args.block_size, rows=rows,
                                    ort_cpu_ms=t_cpu, mlx_ep_ms=t_mlx, scaled_diff=err))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
