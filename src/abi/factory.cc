#include "abi/factory.h"

#include <cctype>
#include <memory>
#include <string>

#include "abi/device_memory.h"
#include "abi/ep.h"
#include "abi/status.h"
#include "blas/blas.h"
#include "ops/op.h"
#include "runtime/device.h"
#include "runtime/memory.h"
#include "runtime/precision.h"

namespace mlx_ep {
namespace {

/** The provider options a session gave the EP (ORT keeps them as session config entries named
 *  "ep.mlxexecutionprovider.<option>"): "" when applied, else why not. Only `use_tf32` exists
 *  (runtime/precision.h); any other is an error rather than a typo silently ignored. */
std::string ApplyProviderOptions(const OrtSessionOptions* session_options) {
  if (!session_options) return "";
  std::string prefix = std::string("ep.") + kEpName + ".";
  for (char& ch : prefix) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  OrtKeyValuePairs* raw = nullptr;
  Ort::ThrowOnError(Ort::GetApi().GetSessionOptionsConfigEntries(session_options, &raw));
  const Ort::KeyValuePairs entries(raw);
  for (const auto& [key, value] : entries.GetKeyValuePairs()) {
    if (key.rfind(prefix, 0) != 0) continue;
    const std::string option = key.substr(prefix.size());
    if (option != kUseTf32Option)
      return "unknown provider option \"" + option + "\" (the EP has one: " + kUseTf32Option + ")";
    if (std::string error = RequestTf32(value); !error.empty()) return error;
  }
  return "";
}

}  // namespace

MlxEpFactory::MlxEpFactory(const char* registered_name, const OrtLogger& default_logger)
    : OrtEpFactory{},
      registered_name_(registered_name ? registered_name : kEpName),
      default_logger_(default_logger) {
  ort_version_supported = kOrtApiVersion;
  GetName = GetNameImpl;
  GetVendor = GetVendorImpl;
  GetVendorId = GetVendorIdImpl;
  GetVersion = GetVersionImpl;
  GetSupportedDevices = GetSupportedDevicesImpl;
  CreateEp = CreateEpImpl;
  ReleaseEp = ReleaseEpImpl;
  ValidateCompiledModelCompatibilityInfo = ValidateCompiledModelCompatibilityInfoImpl;
  CreateAllocator = CreateAllocatorImpl;
  ReleaseAllocator = ReleaseAllocatorImpl;
  CreateDataTransfer = CreateDataTransferImpl;
  IsStreamAware = IsStreamAwareImpl;
  CreateSyncStreamForDevice = CreateSyncStreamForDeviceImpl;
  GetHardwareDeviceIncompatibilityDetails = nullptr;
  CreateExternalResourceImporterForDevice = nullptr;
  GetNumCustomOpDomains = GetNumCustomOpDomainsImpl;
  GetCustomOpDomains = GetCustomOpDomainsImpl;
  InitGraphicsInterop = nullptr;
  DeinitGraphicsInterop = nullptr;
}

const char* ORT_API_CALL MlxEpFactory::GetNameImpl(const OrtEpFactory*) noexcept { return kEpName; }
const char* ORT_API_CALL MlxEpFactory::GetVendorImpl(const OrtEpFactory*) noexcept {
  return "onnxruntime-ep-mlx";
}
uint32_t ORT_API_CALL MlxEpFactory::GetVendorIdImpl(const OrtEpFactory*) noexcept { return 0; }
const char* ORT_API_CALL MlxEpFactory::GetVersionImpl(const OrtEpFactory*) noexcept { return kEpVersion; }

// Offers one device: ORT's GPU when MLX computes on a GPU, otherwise ORT's CPU. On a GPU the
// device also carries the EP's memory (abi/device_memory.h), so ORT allocates MLX partitions'
// tensors there; on the CPU ORT's host memory serves them (no allocator is registered).
OrtStatus* ORT_API_CALL MlxEpFactory::GetSupportedDevicesImpl(OrtEpFactory* this_ptr,
                                                              const OrtHardwareDevice* const* devices,
                                                              size_t num_devices, OrtEpDevice** ep_devices,
                                                              size_t max_ep_devices,
                                                              size_t* num_ep_devices) noexcept {
  MLX_EP_API_BEGIN
  *num_ep_devices = 0;
  const bool mlx_gpu = RuntimeDevice() == mx::Device(mx::Device::gpu);
  const OrtApi& api = Ort::GetApi();
  const OrtHardwareDevice* chosen = nullptr;
  for (size_t i = 0; i < num_devices && !chosen; ++i)
    if (api.HardwareDevice_Type(devices[i]) ==
        (mlx_gpu ? OrtHardwareDeviceType_GPU : OrtHardwareDeviceType_CPU))
      chosen = devices[i];
  for (size_t i = 0; i < num_devices && !chosen; ++i)
    if (api.HardwareDevice_Type(devices[i]) == OrtHardwareDeviceType_CPU) chosen = devices[i];
  if (!chosen || max_ep_devices == 0) return nullptr;

  Ort::KeyValuePairs metadata;
  metadata.Add("mlx_device", mlx_gpu ? "gpu" : "cpu");
  metadata.Add("mlx_version", mx::version());
  metadata.Add("mlx_backend", MlxBackendName());
  // Which library libmlx's cblas_sgemm runs in ("python -m onnxruntime_ep_mlx info" shows it;
  // the tests assert it is OpenBLAS on Linux).
  const BlasBinding blas = InspectBlasBinding();
  metadata.Add("blas", blas.kind.c_str());
  if (!blas.sgemm_library.empty()) metadata.Add("blas_sgemm_library", blas.sgemm_library.c_str());
  if (blas.kind == "openblas") {
    metadata.Add("blas_library", blas.backend.c_str());
    metadata.Add("blas_threads", std::to_string(blas.threads).c_str());
  }
  if (!blas.note.empty()) metadata.Add("blas_note", blas.note.c_str());
  OrtEpDevice* ep_device = nullptr;
  Ort::ThrowOnError(Ort::GetEpApi().CreateEpDevice(this_ptr, chosen, metadata, nullptr, &ep_device));
  if (DeviceMemoryEnabled()) {
    const DeviceMemoryInfos& infos = GetDeviceMemoryInfos();
    Ort::ThrowOnError(Ort::GetEpApi().EpDevice_AddAllocatorInfo(ep_device, infos.device));
    Ort::ThrowOnError(Ort::GetEpApi().EpDevice_AddAllocatorInfo(ep_device, infos.host_accessible));
  }
  ep_devices[0] = ep_device;
  *num_ep_devices = 1;
  return nullptr;
  MLX_EP_API_END("MLXExecutionProvider GetSupportedDevices")
}

OrtStatus* ORT_API_CALL MlxEpFactory::CreateEpImpl(OrtEpFactory* this_ptr, const OrtHardwareDevice* const*,
                                                   const OrtKeyValuePairs* const*, size_t num_devices,
                                                   const OrtSessionOptions* session_options,
                                                   const OrtLogger* logger, OrtEp** ep) noexcept {
  MLX_EP_API_BEGIN
  *ep = nullptr;
  if (num_devices != 1)
    return MakeStatus("MLXExecutionProvider CreateEp", "expected exactly one device", ORT_INVALID_ARGUMENT);
  if (std::string error = ApplyProviderOptions(session_options); !error.empty())
    return MakeStatus("MLXExecutionProvider CreateEp", error, ORT_INVALID_ARGUMENT);
  auto* factory = static_cast<MlxEpFactory*>(this_ptr);
  auto created = std::make_unique<MlxEp>(*factory, logger ? *logger : factory->default_logger_);
  *ep = created.release();
  return nullptr;
  MLX_EP_API_END("MLXExecutionProvider CreateEp")
}

void ORT_API_CALL MlxEpFactory::ReleaseEpImpl(OrtEpFactory*, OrtEp* ep) noexcept {
  delete static_cast<MlxEp*>(ep);  // ~MlxEp does not throw
}

OrtStatus* ORT_API_CALL MlxEpFactory::ValidateCompiledModelCompatibilityInfoImpl(
    OrtEpFactory*, const OrtHardwareDevice* const*, size_t, const char*,
    OrtCompiledModelCompatibility* model_compatibility) noexcept {
  *model_compatibility = OrtCompiledModelCompatibility_EP_NOT_APPLICABLE;  // we write no EPContext models
  return nullptr;
}

// MLX memory for the memory infos registered on a GPU device; nullptr (ORT's CPU allocator)
// otherwise.
OrtStatus* ORT_API_CALL MlxEpFactory::CreateAllocatorImpl(OrtEpFactory*, const OrtMemoryInfo* memory_info,
                                                          const OrtKeyValuePairs*,
                                                          OrtAllocator** allocator) noexcept {
  MLX_EP_API_BEGIN
  *allocator = CreateDeviceAllocator(memory_info);
  return nullptr;
  MLX_EP_API_END("MLXExecutionProvider CreateAllocator")
}

void ORT_API_CALL MlxEpFactory::ReleaseAllocatorImpl(OrtEpFactory*, OrtAllocator* allocator) noexcept {
  ReleaseDeviceAllocator(allocator);
}

// Copies between MLX memory and the host on a GPU device; none needed on the CPU device.
OrtStatus* ORT_API_CALL MlxEpFactory::CreateDataTransferImpl(OrtEpFactory*,
                                                             OrtDataTransferImpl** data_transfer) noexcept {
  MLX_EP_API_BEGIN
  *data_transfer = GetDeviceDataTransfer();
  return nullptr;
  MLX_EP_API_END("MLXExecutionProvider CreateDataTransfer")
}

bool ORT_API_CALL MlxEpFactory::IsStreamAwareImpl(const OrtEpFactory*) noexcept { return false; }

OrtStatus* ORT_API_CALL MlxEpFactory::CreateSyncStreamForDeviceImpl(OrtEpFactory*, const OrtMemoryDevice*,
                                                                    const OrtKeyValuePairs*,
                                                                    OrtSyncStreamImpl** stream) noexcept {
  *stream = nullptr;
  return nullptr;
}

OrtStatus* ORT_API_CALL MlxEpFactory::GetNumCustomOpDomainsImpl(OrtEpFactory*, size_t* num_domains) noexcept {
  *num_domains = 0;
  return nullptr;
}

OrtStatus* ORT_API_CALL MlxEpFactory::GetCustomOpDomainsImpl(OrtEpFactory*, OrtCustomOpDomain**,
                                                             size_t) noexcept {
  return nullptr;
}

}  // namespace mlx_ep
