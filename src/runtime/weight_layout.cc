// Constant MatMul weights in the layout of MLX's CUDA gemv (weight_layout.h).
#include "runtime/weight_layout.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <unordered_map>

#include "common/env.h"
#include "ops/op.h"
#include "runtime/device.h"

namespace mlx_ep {
namespace {

constexpr int64_t kTile = 64;  // elements: a tile of each side stays in cache while it is copied

/** dst[n * K + k] = src[k * N + n] for elements of `size` bytes (bit-exact copies; a memcpy of a
 *  constant size compiles to one load and store). */
template <size_t size>
void Transpose(const uint8_t* src, uint8_t* dst, int64_t K, int64_t N) {
  for (int64_t k0 = 0; k0 < K; k0 += kTile)
    for (int64_t n0 = 0; n0 < N; n0 += kTile)
      for (int64_t k = k0; k < std::min(K, k0 + kTile); ++k)
        for (int64_t n = n0; n < std::min(N, n0 + kTile); ++n)
          std::memcpy(dst + (n * K + k) * size, src + (k * N + n) * size, size);
}

}  // namespace

bool DecodesTokens(const Graph& graph) {
  auto has_input = [](const Node& n, size_t i) { return n.inputs.size() > i && !n.inputs[i].empty(); };
  for (const Node& n : graph.nodes) {
    if (n.domain == "com.microsoft") {
      if (n.op_type == "GroupQueryAttention" || n.op_type == "PagedAttention" ||
          n.op_type == "DecoderMaskedMultiHeadAttention")
        return true;
      if (n.op_type == "MultiHeadAttention" && has_input(n, 6)) return true;  // past_key
    } else if ((n.domain.empty() || n.domain == "ai.onnx") && n.op_type == "Attention" && has_input(n, 4)) {
      return true;  // past_key (opset 23)
    }
  }
  return false;
}

bool GemvWeightsFor(const Graph& graph) {
  static const std::string mode = EnvString(env::kGemvWeights, "auto");
  if (mode == "force") return true;
  if (mode == "0" || RuntimeDevice() == mx::Device(mx::Device::cpu)) return false;
  return mode == "1" || DecodesTokens(graph);
}

std::unordered_set<std::string> ProductOnlyWeights(const Graph& graph) {
  std::unordered_map<std::string, bool> only_b;  // constant -> read only as a product's B so far
  auto see = [&](const std::string& name, bool as_b) {
    const ValueInfo* v = graph.Value(name);
    if (!v || !v->constant) return;
    auto [it, fresh] = only_b.emplace(name, as_b);
    if (!fresh) it->second = it->second && as_b;
  };
  for (const Node& n : graph.nodes) {
    const bool onnx = n.domain.empty() || n.domain == "ai.onnx";
    // Gemm's B untransposed is [K, N] as MatMul's is (ORT's MatMulAddFusion makes such Gemms).
    const bool product =
        onnx && (n.op_type == "MatMul" || (n.op_type == "Gemm" && n.AttrInt("transB", 0) == 0));
    const std::vector<std::string> all = n.AllInputs();
    for (size_t i = 0; i < all.size(); ++i) see(all[i], product && i == 1);
  }
  for (const std::string& out : graph.outputs) see(out, false);
  std::unordered_set<std::string> weights;
  for (const auto& [name, ok] : only_b) {
    const Tensor& t = *graph.Value(name)->constant;
    const bool floating =
        t.type == ElemType::kFloat16 || t.type == ElemType::kBFloat16 || t.type == ElemType::kFloat;
    if (ok && floating && t.shape.size() == 2 && t.shape[0] > 1 && t.shape[1] > 1) weights.insert(name);
  }
  return weights;
}

mx::array GemvLayout(const Tensor& t) {
  const int64_t K = t.shape.at(0), N = t.shape.at(1);
  const size_t size = ElemSize(t.type);
  auto* nk = new uint8_t[t.bytes.size()];
  if (size == 2) {
    Transpose<2>(t.bytes.data(), nk, K, N);
  } else {
    Transpose<4>(t.bytes.data(), nk, K, N);  // ProductOnlyWeights: 2- or 4-byte types only
  }
  // On a GPU MLX copies host memory into its own and frees `nk` at once; on MLX's CPU device
  // (tests) the array keeps it.
  return mx::array(nk, {static_cast<int>(N), static_cast<int>(K)}, *ToMlxDtype(t.type),
                   [](void* p) { delete[] static_cast<uint8_t*>(p); });
}

}  // namespace mlx_ep
