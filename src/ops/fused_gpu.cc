// The switch of the fused GPU paths and the arrays they share (fused_gpu_internal.h).
#include <cstdlib>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "ops/fused_gpu_internal.h"

namespace mlx_ep {
namespace {

enum class FusedMode { kDefault, kOff, kForce, kForce32 };

/** Read at every call (translations run when a graph is traced, not per run), so that a test can
 *  switch it between sessions. */
FusedMode Mode() {
  const char* v = std::getenv(kFusedGpuPathsEnv);
  const std::string s = v ? v : "";
  if (s == "0") return FusedMode::kOff;
  if (s == "force") return FusedMode::kForce;
  if (s == "force32") return FusedMode::kForce32;
  return FusedMode::kDefault;
}

bool OnCpu() { return RuntimeDevice() == mx::Device(mx::Device::cpu); }

}  // namespace

bool UseFusedGpuPaths() {
  switch (Mode()) {
    case FusedMode::kOff:
      return false;
    case FusedMode::kForce:
    case FusedMode::kForce32:
      return true;
    default:
      return !OnCpu();
  }
}

bool FusedGpuPathsOnCpu() { return UseFusedGpuPaths() && OnCpu(); }

bool FusedGpuPathsFloat32() { return Mode() == FusedMode::kForce32; }

mx::array FastLayerNorm(const mx::array& x, const mx::array& w, const std::optional<mx::array>& b,
                        float eps, bool recenter, mx::Stream s) {
  if (!recenter) return mx::fast::layer_norm(x, w, b, eps, s);
  const mx::array shifted = mx::subtract(x, mx::mean(x, -1, /*keepdims=*/true, s), s);
  return mx::fast::layer_norm(shifted, w, b, eps, s);
}

mx::array SharedArange(int n) {
  static std::mutex mu;
  // Never destroyed: arrays must not outlive MLX's allocator at exit.
  static auto* cache = new std::map<int, mx::array>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find(n);
  if (it == cache->end()) {
    std::vector<int32_t> values(static_cast<size_t>(n));
    std::iota(values.begin(), values.end(), 0);
    it = cache->emplace(n, mx::array(values.begin(), {n}, mx::int32)).first;
  }
  return it->second;
}

mx::array StepArange(int n, mx::Stream s) {
  return UseFusedGpuPaths() ? SharedArange(n) : mx::arange(n, mx::int32, s);
}

}  // namespace mlx_ep
