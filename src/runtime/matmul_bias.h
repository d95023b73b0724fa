// A MatMul whose one reader is an Add of a 1-D constant (a Linear layer's bias: torch's exporters
// write MatMul + Add) traced as one product with its bias, mx::addmm. On a GPU that is cuBLASLt's
// GEMM with its bias epilogue (mlx/backend/cuda/matmul.cpp, AddMM::eval_gpu: beta 1 and a bias
// vector), one kernel where the Add was a kernel of its own (host encoding, not arithmetic, bounds
// BERT on the H200: docs/performance.md); on MLX's CPU device one primitive where there were two
// (the bias copied into the output, BLAS adding the product to it). The sum is rounded once where
// the product was rounded and then the sum: in float32 the same to within BLAS's summation order,
// in float16 / bfloat16 closer to the exact value. The Add then passes the product on. Where MLX
// runs a GEMV (a product of one row on a GPU, whose AddMM would take cuBLASLt) the two stay apart.
//
// ONNXRUNTIME_EP_MLX_MATMUL_BIAS=0 keeps every Add (A/B).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/graph.h"
#include "mlx/array.h"
#include "mlx/stream.h"

namespace mlx_ep {

namespace mx = mlx::core;

/** The Add of a MatMul's bias: its node index in Graph::nodes and the bias constant's name. */
struct MatmulBias {
  size_t add = 0;
  std::string bias;
};

/** True unless ONNXRUNTIME_EP_MLX_MATMUL_BIAS=0. */
bool MatmulBiasEnabled();

/** By MatMul node index: the ai.onnx MatMuls of `graph` whose output only an ai.onnx Add (opset
 *  7+) reads, once, the Add's other input being a 1-D constant of the MatMul's floating type, and
 *  which is not a graph output nor one of `outputs`. Nothing unless MatmulBiasEnabled. */
std::unordered_map<size_t, MatmulBias> FindMatmulBiases(const Graph& graph, const std::vector<std::string>& outputs);

/** a @ b + bias as one mx::addmm, or nullopt where the trace keeps the MatMul and the Add apart:
 *  other dtypes than float32/float16/bfloat16 or mixed ones, a of rank < 2, b not 2-D, bias not
 *  [N], an empty product, or one row on a GPU. */
std::optional<mx::array> BiasedProduct(const mx::array& a, const mx::array& b, const mx::array& bias, mx::Stream s);

}  // namespace mlx_ep
