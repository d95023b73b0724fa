// runtime/cuda_prefetch.h: the driver API declarations it calls through dlopen against CUDA's own
// cuda.h (where CUDA's headers are: the GPU image, and this project's development machine), and
// the no-driver path every CPU and Metal process takes. That the prefetch moves a GPU step's
// inputs is for a GPU to show (tools/gpu/lease_env.sh: an A/B of ONNXRUNTIME_EP_MLX_PREFETCH_INPUTS).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "host_program.h"
#include "runtime/cuda_prefetch.h"

namespace mlx_ep {
namespace {

// A host program with cuda.h and the EP's declarations side by side: the functions' shapes as
// cuda.h declares them under the names it gives them (its macros: cuMemPrefetchAsync is
// cuMemPrefetchAsync_v2 since CUDA 13), the types' sizes and layouts, the constants' values.
TEST(CudaPrefetch, DeclarationsMatchCudaH) {
  if (!std::filesystem::exists("/usr/local/cuda/include/cuda.h"))
    GTEST_SKIP() << "no cuda.h (the CUDA toolkit)";
  const std::filesystem::path src = std::filesystem::path(MLX_EP_TEST_SOURCE_DIR) / ".." / ".." / "src";
  const std::string program = R"(#include <cuda.h>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include "runtime/cuda_driver_abi.h"
namespace cu = mlx_ep::cuda_driver;
#define NAME(f) #f
#define SYMBOL(f) NAME(f)
static_assert(std::is_same_v<decltype(&cuMemPrefetchAsync),
                             CUresult (*)(CUdeviceptr, size_t, CUmemLocation, unsigned int, CUstream)>);
static_assert(std::is_same_v<decltype(&cuDevicePrimaryCtxRetain), CUresult (*)(CUcontext*, CUdevice)>);
static_assert(std::is_same_v<decltype(&cuCtxPushCurrent), CUresult (*)(CUcontext)>);
static_assert(std::is_same_v<decltype(&cuCtxPopCurrent), CUresult (*)(CUcontext*)>);
static_assert(std::is_same_v<decltype(&cuStreamCreate), CUresult (*)(CUstream*, unsigned int)>);
static_assert(std::is_same_v<decltype(&cuMemcpyHtoD), CUresult (*)(CUdeviceptr, const void*, size_t)>);
static_assert(sizeof(CUresult) == sizeof(cu::Result) && CUDA_SUCCESS == 0);
static_assert(sizeof(CUdevice) == sizeof(int) && std::is_same_v<CUdeviceptr, cu::DevicePtr>);
static_assert(sizeof(CUcontext) == sizeof(cu::Context) && sizeof(CUstream) == sizeof(cu::Stream));
static_assert(sizeof(CUmemLocation) == sizeof(cu::MemLocation) && sizeof(CUmemLocationType) == sizeof(int));
static_assert(offsetof(CUmemLocation, type) == offsetof(cu::MemLocation, type));
static_assert(offsetof(CUmemLocation, id) == offsetof(cu::MemLocation, id));
static_assert(CU_MEM_LOCATION_TYPE_DEVICE == cu::kMemLocationTypeDevice);
static_assert(CU_STREAM_NON_BLOCKING == cu::kStreamNonBlocking);
int main() {
  const char* pairs[][2] = {{SYMBOL(cuMemPrefetchAsync), cu::kMemPrefetchAsyncSymbol},
                            {SYMBOL(cuDevicePrimaryCtxRetain), cu::kDevicePrimaryCtxRetainSymbol},
                            {SYMBOL(cuCtxPushCurrent), cu::kCtxPushCurrentSymbol},
                            {SYMBOL(cuCtxPopCurrent), cu::kCtxPopCurrentSymbol},
                            {SYMBOL(cuStreamCreate), cu::kStreamCreateSymbol},
                            {SYMBOL(cuMemcpyHtoD), cu::kMemcpyHtoDSymbol}};
  int wrong = 0;
  for (auto& p : pairs)
    if (std::strcmp(p[0], p[1]) != 0) wrong += std::printf("cuda.h names %s, the EP looks up %s\n", p[0], p[1]) > 0;
  return wrong;
}
)";
  EXPECT_EQ(BuildAndRun("mlx_ep_cuda_prefetch_abi", program, "g++",
                        "-std=c++17 -I/usr/local/cuda/include -I" + src.string()),
            "");
}

// Without a CUDA driver in the process (this one runs MLX's CPU backend) nothing is asked and
// nothing throws; nor for an empty or null range anywhere.
TEST(CudaPrefetch, NothingWithoutADriver) {
  std::vector<float> host(1024, 1.f);
  EXPECT_FALSE(PrefetchToGpu(nullptr, 16));
  EXPECT_FALSE(PrefetchToGpu(host.data(), 0));
  EXPECT_FALSE(PrefetchToGpu(host.data(), host.size() * sizeof(float)));
  std::vector<float> other(1024, 2.f);
  EXPECT_FALSE(CopyToGpu(other.data(), host.data(), host.size() * sizeof(float)));
  EXPECT_FALSE(CopyToGpu(nullptr, host.data(), 16));
  EXPECT_EQ(other[1023], 2.f);  // nothing written where no driver copied
  EXPECT_EQ(host[1023], 1.f);
}

}  // namespace
}  // namespace mlx_ep
