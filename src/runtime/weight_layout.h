// Constant MatMul weights in the layout MLX's CUDA one-row product reads as a kernel of its own.
//
// ONNX stores MatMul's B as [K, N], row-major. MLX's CUDA backend computes a product with one
// row (a decode step's projections) with its gemv kernel only when B is a transposed view of an
// [N, K] array (mlx/backend/cuda/gemms/gemv.cu, can_use_gemv: M == 1 && b_transposed);
// otherwise through cuBLASLt, which it calls inside a CUDA stream capture with a fresh matmul
// descriptor and algorithm heuristic query each run (mlx/backend/cuda/cublas_utils.cpp), host
// work a plain kernel does not pay. Both accumulate in float32 and round once. So on a GPU a
// constant 2-D B that only MatMuls (and Gemms with transB=0) read is held as [N, K] and handed to
// them as its [K, N] view: the same values, the bytes once (transposed on the host while they are
// copied to the device anyway); products of 2-8 rows go to the EP's few-rows kernel where it is
// on (ops/matmul_rows_cuda.h), more rows to cuBLASLt as before, with B marked transposed.
//
// Measured on the H200 (docs/performance.md, thirteenth session): a TinyLlama fp16 decode step
// 9.04 -> 6.77 ms; but BERT-base fp16 8 x 128, whose products have 1,024 rows, 4.72 -> 5.48 ms
// (cuBLASLt with B transposed; why it costs more host time there was not established). Hence
// by default only graphs that decode a token at a time take the layout: those with a KV-cache
// attention op (DecodesTokens).
//
// ONNXRUNTIME_EP_MLX_GEMV_WEIGHTS: unset or "auto": as above, on a GPU; "1": every graph on a
// GPU; "0": off (A/B); "force": every graph, on MLX's CPU device too (tests of the layout).
#pragma once

#include <string>
#include <unordered_set>

#include "graph/graph.h"
#include "mlx/array.h"

namespace mlx_ep {

namespace mx = mlx::core;

/** True when `graph` holds an attention op with a KV cache (com.microsoft GroupQueryAttention,
 *  PagedAttention, DecoderMaskedMultiHeadAttention, MultiHeadAttention with past_key, ai.onnx
 *  Attention with past_key): a decoder whose steps multiply one row per sequence. */
bool DecodesTokens(const Graph& graph);

/** True when the constant MatMul weights of `graph` take the transposed layout (see the top). */
bool GemvWeightsFor(const Graph& graph);

/** The constants of `graph` that are 2-D float16/bfloat16/float32 and read only as input B of
 *  ai.onnx MatMul nodes and Gemm nodes with transB=0 (not by other ops, bodies or as graph
 *  outputs). */
std::unordered_set<std::string> ProductOnlyWeights(const Graph& graph);

/** `t` ([K, N]) transposed: the [N, K] array that the plan holds (made off MLX's threads, so
 *  no op yet); ConstantView gives the trace its [K, N] view. */
mx::array GemvLayout(const Tensor& t);

}  // namespace mlx_ep
