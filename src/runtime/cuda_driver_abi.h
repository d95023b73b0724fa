// The few CUDA driver API declarations runtime/cuda_prefetch.cc calls through dlopen, as cuda.h
// (CUDA 12.2 and later) declares them: ABI only (handles are pointers, CUresult an int-sized enum,
// the location a two-int struct passed by value), so the EP needs no CUDA headers to build.
// tests/cpp/cuda_prefetch_test.cc checks them against cuda.h where CUDA's headers are.
#pragma once

#include <cstddef>

namespace mlx_ep::cuda_driver {

using Result = int;                    // CUresult; CUDA_SUCCESS = 0
using Context = void*;                 // CUcontext
using Stream = void*;                  // CUstream
using DevicePtr = unsigned long long;  // CUdeviceptr
struct MemLocation {                   // CUmemLocation
  int type;
  int id;
};
constexpr int kMemLocationTypeDevice = 1;   // CU_MEM_LOCATION_TYPE_DEVICE
constexpr unsigned kStreamNonBlocking = 1;  // CU_STREAM_NON_BLOCKING

// The symbols dlsym looks up: what cuda.h's macros make of cuMemPrefetchAsync, cuCtxPushCurrent
// and cuCtxPopCurrent.
constexpr const char* kMemPrefetchAsyncSymbol = "cuMemPrefetchAsync_v2";
constexpr const char* kCtxPushCurrentSymbol = "cuCtxPushCurrent_v2";
constexpr const char* kCtxPopCurrentSymbol = "cuCtxPopCurrent_v2";
constexpr const char* kDevicePrimaryCtxRetainSymbol = "cuDevicePrimaryCtxRetain";
constexpr const char* kStreamCreateSymbol = "cuStreamCreate";
constexpr const char* kMemcpyHtoDSymbol = "cuMemcpyHtoD_v2";

using MemPrefetchAsync = Result (*)(DevicePtr, size_t, MemLocation, unsigned, Stream);
using DevicePrimaryCtxRetain = Result (*)(Context*, int);
using CtxPushCurrent = Result (*)(Context);
using CtxPopCurrent = Result (*)(Context*);
using StreamCreate = Result (*)(Stream*, unsigned);
using MemcpyHtoD = Result (*)(DevicePtr, const void*, size_t);

}  // namespace mlx_ep::cuda_driver
