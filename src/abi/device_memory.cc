#include "abi/device_memory.h"

#include <cstring>

#include "abi/status.h"
#include "runtime/cuda_prefetch.h"
#include "runtime/memory.h"

namespace mlx_ep {
namespace {

// Vendor id 0 (generic, as ORT's WebGPU uses). Not NVIDIA's, although MLX's memory is CUDA
// memory: ORT keeps one environment-wide allocator per memory device, and with onnxruntime-gpu
// installed the CUDA EP registers (GPU, NVIDIA, 0) too. Under NVIDIA's id, on the H200, a
// session of this EP then received CUDA EP tensors (cudaMalloc memory, which MLX cannot read)
// as inputs: "an input is in device memory that the EP did not allocate". Python names vendor 0
// GPU memory "webgpu" in every build (onnxruntime_ep_mlx.binding_device()); "gpu" means NVIDIA
// in onnxruntime-gpu's build (docs/gpu_memory.md).
constexpr uint32_t kVendorId = 0;
constexpr int32_t kDeviceId = 0;

const OrtMemoryInfo* MakeInfo(const char* name, OrtDeviceMemoryType type) {
  OrtMemoryInfo* info = nullptr;
  Ort::ThrowOnError(Ort::GetApi().CreateMemoryInfo_V2(name, OrtMemoryInfoDeviceType_GPU, kVendorId, kDeviceId,
                                                      type, /*alignment=*/0, OrtDeviceAllocator, &info));
  return info;
}

// An OrtAllocator over DeviceAlloc/DeviceFree (thread-safe: the registry locks).
struct MlxAllocator : OrtAllocator {
  explicit MlxAllocator(const OrtMemoryInfo* memory_info) : OrtAllocator{}, info(memory_info) {
    version = kOrtApiVersion;
    Alloc = AllocImpl;
    Free = FreeImpl;
    Info = InfoImpl;
    Reserve = AllocImpl;  // no arena: reserving is allocating
  }
  static void* ORT_API_CALL AllocImpl(OrtAllocator*, size_t size) noexcept {
    try {
      return DeviceAlloc(size);
    } catch (...) {
      return nullptr;  // ORT reports the failed allocation
    }
  }
  static void ORT_API_CALL FreeImpl(OrtAllocator*, void* p) noexcept {
    try {
      DeviceFree(p);
    } catch (...) {
    }
  }
  static const OrtMemoryInfo* ORT_API_CALL InfoImpl(const OrtAllocator* self) noexcept {
    return static_cast<const MlxAllocator*>(self)->info;
  }
  const OrtMemoryInfo* info;
};

// Copies between the EP's memory and the host. MLX memory lent to ORT is CUDA managed memory,
// which the host reads and writes directly, and MLX evaluation is synchronous (every partition's
// outputs are complete when Compute returns), so a copy is a memcpy on the host; the driver
// migrates the pages (docs/gpu_memory.md).
struct MlxDataTransfer : OrtDataTransferImpl {
  MlxDataTransfer() : OrtDataTransferImpl{} {
    ort_version_supported = kOrtApiVersion;
    Release = ReleaseImpl;
    CanCopy = CanCopyImpl;
    CopyTensors = CopyTensorsImpl;
  }
  static bool IsOurs(const OrtMemoryDevice* d) {
    const DeviceMemoryInfos& infos = GetDeviceMemoryInfos();
    const OrtEpApi& ep = Ort::GetEpApi();
    return ep.MemoryDevice_AreEqual(d, ep.MemoryInfo_GetMemoryDevice(infos.device)) ||
           ep.MemoryDevice_AreEqual(d, ep.MemoryInfo_GetMemoryDevice(infos.host_accessible));
  }
  static bool IsDeviceMemory(const OrtMemoryDevice* d) {  // MLX_GPU, not MLX_GPU_HOST
    return Ort::GetEpApi().MemoryDevice_AreEqual(
        d, Ort::GetEpApi().MemoryInfo_GetMemoryDevice(GetDeviceMemoryInfos().device));
  }
  static bool IsHost(const OrtMemoryDevice* d) {
    return Ort::GetEpApi().MemoryDevice_GetDeviceType(d) == OrtMemoryInfoDeviceType_CPU;
  }
  static void ORT_API_CALL ReleaseImpl(OrtDataTransferImpl*) noexcept {}
  static bool ORT_API_CALL CanCopyImpl(const OrtDataTransferImpl*, const OrtMemoryDevice* src,
                                       const OrtMemoryDevice* dst) noexcept {
    return (IsOurs(src) && (IsOurs(dst) || IsHost(dst))) || (IsHost(src) && IsOurs(dst));
  }
  static OrtStatus* ORT_API_CALL CopyTensorsImpl(OrtDataTransferImpl*, const OrtValue** src, OrtValue** dst,
                                                 OrtSyncStream**, size_t count) noexcept {
    MLX_EP_API_BEGIN
    const OrtApi& api = Ort::GetApi();
    const OrtEpApi& ep = Ort::GetEpApi();
    for (size_t i = 0; i < count; ++i) {
      const void* from = nullptr;
      void* to = nullptr;
      size_t bytes = 0, dst_bytes = 0;
      Ort::ThrowOnError(api.GetTensorData(src[i], &from));
      Ort::ThrowOnError(api.GetTensorMutableData(dst[i], &to));
      Ort::ThrowOnError(api.GetTensorSizeInBytes(src[i], &bytes));
      Ort::ThrowOnError(api.GetTensorSizeInBytes(dst[i], &dst_bytes));
      if (bytes != dst_bytes)
        return MakeStatus("MLXExecutionProvider CopyTensors", "source and destination sizes differ",
                          ORT_INVALID_ARGUMENT);
      // A host input in the EP's device memory: its pages move to the GPU now, by DMA, rather than
      // by page faults in the first kernel that reads it (runtime/cuda_prefetch.h): the copy made
      // by the driver (the default), or (=1) the host's copy prefetched.
      const OrtMemoryDevice* from_device = ep.Value_GetMemoryDevice(src[i]);
      const OrtMemoryDevice* to_device = ep.Value_GetMemoryDevice(dst[i]);
      const bool to_gpu =
          bytes && PrefetchInputsEnabled() && IsHost(from_device) && IsDeviceMemory(to_device);
      if (to_gpu && DriverCopiesInputs() && CopyToGpu(to, from, bytes)) {
        CountPrefetch(bytes);
      } else {
        if (bytes) std::memcpy(to, from, bytes);
        if (to_gpu && PrefetchToGpu(to, bytes)) CountPrefetch(bytes);
      }
      CountTransfer(!IsHost(from_device), !IsHost(to_device), bytes);
    }
    return nullptr;
    MLX_EP_API_END("MLXExecutionProvider CopyTensors")
  }
};

}  // namespace

const DeviceMemoryInfos& GetDeviceMemoryInfos() {
  // Never released: ORT and its sessions may hold them until the process ends.
  static const DeviceMemoryInfos infos{MakeInfo("MLX_GPU", OrtDeviceMemoryType_DEFAULT),
                                       MakeInfo("MLX_GPU_HOST", OrtDeviceMemoryType_HOST_ACCESSIBLE)};
  return infos;
}

OrtAllocator* CreateDeviceAllocator(const OrtMemoryInfo* info) {
  if (!DeviceMemoryEnabled() || !info) return nullptr;
  const DeviceMemoryInfos& infos = GetDeviceMemoryInfos();
  const OrtEpApi& ep = Ort::GetEpApi();
  const OrtMemoryDevice* want = ep.MemoryInfo_GetMemoryDevice(info);
  for (const OrtMemoryInfo* ours : {infos.device, infos.host_accessible})
    if (ep.MemoryDevice_AreEqual(want, ep.MemoryInfo_GetMemoryDevice(ours))) return new MlxAllocator(ours);
  return nullptr;
}

void ReleaseDeviceAllocator(OrtAllocator* allocator) { delete static_cast<MlxAllocator*>(allocator); }

OrtDataTransferImpl* GetDeviceDataTransfer() {
  if (!DeviceMemoryEnabled()) return nullptr;
  static MlxDataTransfer transfer;
  return &transfer;
}

}  // namespace mlx_ep
