// The library's only exported symbols: ORT's plugin entry points.
#include "abi/factory.h"
#include "abi/status.h"
#include "blas/blas.h"
#include "common/env.h"
#include "common/log.h"
#include "runtime/precision.h"

namespace {

bool OrtWouldLogImpl(const OrtLogger* logger, mlx_ep::LogSeverity severity) {
  OrtLoggingLevel level = ORT_LOGGING_LEVEL_FATAL;
  if (OrtStatus* status = Ort::GetApi().Logger_GetLoggingSeverityLevel(logger, &level)) {
    Ort::GetApi().ReleaseStatus(status);
    return false;
  }
  return static_cast<int>(severity) >= static_cast<int>(level);
}

bool OrtLogImpl(const OrtLogger* logger, mlx_ep::LogSeverity severity, const std::string& line) {
  OrtStatus* status = Ort::GetApi().Logger_LogMessage(logger, static_cast<OrtLoggingLevel>(severity),
                                                      line.c_str(), ORT_TSTR("onnxruntime_ep_mlx"), 0, "");
  if (!status) return true;
  Ort::GetApi().ReleaseStatus(status);
  return false;
}

// ORT's logging while a factory lives (common/log.h): its default logger is the environment's.
mlx_ep::OrtLogging ort_logging;

}  // namespace

extern "C" {

#if defined(_WIN32)
#define MLX_EP_EXPORT __declspec(dllexport)
#else
#define MLX_EP_EXPORT __attribute__((visibility("default")))
#endif

MLX_EP_EXPORT OrtStatus* CreateEpFactories(const char* registered_name, const OrtApiBase* ort_api_base,
                                           const OrtLogger* default_logger, OrtEpFactory** factories,
                                           size_t max_factories, size_t* num_factories) {
  *num_factories = 0;
  const OrtApi* api = ort_api_base->GetApi(mlx_ep::kOrtApiVersion);
  if (!api) return nullptr;  // no status can be built: the host is older than API 27; offer nothing
  Ort::InitApi(api);
  MLX_EP_API_BEGIN
  // MLX's CUDA backend multiplies float32 matrices in TF32 unless told otherwise, which is not
  // float32-exact; our claims promise float32 results (use_tf32=1 or MLX_ENABLE_TF32=1 for TF32).
  // And on CUDA, smaller CUDA graphs. MLX reads both once: before any MLX work (runtime/precision.h).
  mlx_ep::SetMlxDefaults();
  ort_logging = mlx_ep::OrtLogging{OrtWouldLogImpl, OrtLogImpl, default_logger};
  mlx_ep::InstallOrtLogging(&ort_logging);
  mlx_ep::ConfigureBlasThreads();
  const bool verbose = mlx_ep::EnvFlag(mlx_ep::env::kVerbose);
  if (verbose || mlx_ep::OrtWouldLog(mlx_ep::LogSeverity::kInfo))
    mlx_ep::LogLine(mlx_ep::DescribeBlasBinding(mlx_ep::InspectBlasBinding()), mlx_ep::LogSeverity::kInfo,
                    nullptr, verbose);
  if (max_factories < 1)
    return mlx_ep::MakeStatus("CreateEpFactories", "no room for a factory", ORT_INVALID_ARGUMENT);
  factories[0] = new mlx_ep::MlxEpFactory(registered_name, *default_logger);
  *num_factories = 1;
  return nullptr;
  MLX_EP_API_END("MLXExecutionProvider CreateEpFactories")
}

MLX_EP_EXPORT OrtStatus* ReleaseEpFactory(OrtEpFactory* factory) {
  mlx_ep::InstallOrtLogging(nullptr);  // the default logger goes with the environment
  delete static_cast<mlx_ep::MlxEpFactory*>(factory);
  return nullptr;
}

}  // extern "C"
