// The library's only exported symbols: ORT's plugin entry points.
#include "abi/factory.h"
#include "abi/status.h"
#include "blas/blas.h"
#include "common/env.h"
#include "common/log.h"

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
  // MLX's CUDA backend multiplies float32 matrices in TF32 unless told otherwise, which is not
  // float32-exact; our claims promise float32 results. Users who want TF32 set MLX_ENABLE_TF32=1
  // themselves (read once by MLX, at its first GEMM, so this must happen before any MLX work).
  mlx_ep::SetEnvDefault("MLX_ENABLE_TF32", "0");
  MLX_EP_API_BEGIN
  mlx_ep::ConfigureBlasThreads();
  if (mlx_ep::EnvFlag(mlx_ep::env::kVerbose))
    mlx_ep::LogLine(mlx_ep::DescribeBlasBinding(mlx_ep::InspectBlasBinding()));
  if (max_factories < 1)
    return mlx_ep::MakeStatus("CreateEpFactories", "no room for a factory", ORT_INVALID_ARGUMENT);
  factories[0] = new mlx_ep::MlxEpFactory(registered_name, *default_logger);
  *num_factories = 1;
  return nullptr;
  MLX_EP_API_END("MLXExecutionProvider CreateEpFactories")
}

MLX_EP_EXPORT OrtStatus* ReleaseEpFactory(OrtEpFactory* factory) {
  delete static_cast<mlx_ep::MlxEpFactory*>(factory);
  return nullptr;
}

}  // extern "C"
