// The switch of the fused GPU paths and the arrays they share (fused_gpu_internal.h).
#include <cstdlib>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/log.h"
#include "mlx/backend/cuda/cuda.h"
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

bool CudaKernelsRun(mx::Stream s) {
  // Read at every call, as Mode(): "0" is the A/B switch against MLX's own operations.
  const char* own = std::getenv(env::kOwnKernels);
  if (s.device != mx::Device::gpu || (own && std::string(own) == "0")) return false;
  try {
    return mx::cu::is_available();
  } catch (...) {
    return false;
  }
}

const std::string& CheckedOnce(const std::string& name, const std::function<std::string()>& check) {
  static std::mutex mu;
  static auto* results = new std::map<std::string, std::string>();  // never destroyed, as below
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = results->find(name); it != results->end()) return it->second;
  std::string error;
  try {
    error = check();
  } catch (const std::exception& e) {
    error = name + " failed to build: " + e.what();
  }
  if (!error.empty()) LogLine(error + "; MLX's own operations run instead", LogSeverity::kWarning);
  return results->emplace(name, std::move(error)).first->second;
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
