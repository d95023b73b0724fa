#include "runtime/precision.h"

#include <atomic>
#include <mutex>
#include <string>

#include "common/env.h"
#include "runtime/device.h"

namespace mlx_ep {
namespace {

constexpr const char* kMlxTf32Env = "MLX_ENABLE_TF32";

std::mutex& Mutex() {
  static std::mutex mu;
  return mu;
}

std::atomic<bool>& Started() {
  static std::atomic<bool> started{false};
  return started;
}

/** What MLX uses or will use: its variable, whose default (MLX's) is on. */
bool Tf32Now() { return EnvString(kMlxTf32Env, "1") != "0"; }

}  // namespace

void SetMlxDefaults() {
  SetEnvDefault(kMlxTf32Env, "0");
  // Only for CUDA: Metal reads the same variable for its command buffers, with defaults per chip
  // that nothing here was measured against.
  if (MlxBuiltWithCuda()) SetEnvDefault("MLX_MAX_OPS_PER_BUFFER", kCudaOpsPerGraph);
}

std::string RequestTf32(const std::string& value) {
  if (value != "0" && value != "1")
    return std::string("provider option ") + kUseTf32Option + " must be \"0\" or \"1\", not \"" + value +
           "\"";
  const bool on = value == "1";
  std::lock_guard<std::mutex> lock(Mutex());
  if (on == Tf32Now()) return "";
  if (Started())
    return std::string("provider option ") + kUseTf32Option + "=" + value + ": MLX reads " + kMlxTf32Env +
           " once per process and this process has run MLX with TF32 " + (on ? "off" : "on") +
           "; give the option to the process's first MLX session (it applies process-wide)";
  SetEnv(kMlxTf32Env, on ? "1" : "0");
  return "";
}

void NoteMlxStarted() {
  if (Started().load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(Mutex());  // no RequestTf32 half-way through its setenv
  Started() = true;
}

}  // namespace mlx_ep
