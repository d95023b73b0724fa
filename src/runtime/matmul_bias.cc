// MatMul + Add of a bias as one product (matmul_bias.h).
#include "runtime/matmul_bias.h"

#include "common/env.h"
#include "mlx/ops.h"
#include "ops/matmul_rows_cuda.h"

namespace mlx_ep {

bool MatmulBiasEnabled() {
  static const bool on = EnvString(env::kMatmulBias) != "0";
  return on;
}

std::unordered_map<size_t, MatmulBias> FindMatmulBiases(const Graph& graph, const std::vector<std::string>& outputs) {
  std::unordered_map<size_t, MatmulBias> found;
  if (!MatmulBiasEnabled()) return found;
  std::unordered_map<std::string, int> readers = graph.ReaderCounts(outputs);
  std::unordered_map<std::string, size_t> reader;  // a node reading each value (the one, where one)
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    for (const std::string& in : graph.nodes[i].AllInputs()) reader[in] = i;
  auto onnx_op = [](const Node& n, const char* op) {
    return n.op_type == op && (n.domain.empty() || n.domain == "ai.onnx");
  };
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& mm = graph.nodes[i];
    if (!onnx_op(mm, "MatMul") || mm.inputs.size() != 2 || mm.outputs.size() != 1) continue;
    const std::string& product = mm.outputs[0];
    if (readers[product] != 1) continue;
    const Node& add = graph.nodes[reader[product]];
    if (!onnx_op(add, "Add") || add.since_version < 7 || add.inputs.size() != 2) continue;
    const std::string& bias = add.inputs[0] == product ? add.inputs[1] : add.inputs[0];
    const ValueInfo* b = graph.Value(bias);
    const ValueInfo* p = graph.Value(product);
    if (!b || !b->constant || !p || b->constant->type != p->type || b->constant->shape.size() != 1) continue;
    if (p->type != ElemType::kFloat && p->type != ElemType::kFloat16 && p->type != ElemType::kBFloat16) continue;
    found[i] = MatmulBias{reader[product], bias};
  }
  return found;
}

std::optional<mx::array> BiasedProduct(const mx::array& a, const mx::array& b, const mx::array& bias, mx::Stream s) {
  const mx::Dtype t = a.dtype();
  if ((t != mx::float32 && t != mx::float16 && t != mx::bfloat16) || b.dtype() != t || bias.dtype() != t)
    return std::nullopt;
  if (a.ndim() < 2 || b.ndim() != 2 || bias.ndim() != 1 || a.shape(-1) != b.shape(0) || bias.shape(0) != b.shape(1))
    return std::nullopt;
  if (a.size() == 0 || b.size() == 0) return std::nullopt;  // NumpyMatmul's zeros, then the Add
  const size_t rows = a.size() / static_cast<size_t>(a.shape(-1));
  if (std::optional<mx::array> y = RowsProductByKernel(a, b, bias, s)) return y;  // 2-8 rows on a GPU
  if (s.device == mx::Device::gpu && rows == 1) return std::nullopt;  // MLX's GEMV kernel, then the Add
  return mx::addmm(bias, a, b, 1.0f, 1.0f, s);
}

}  // namespace mlx_ep
