// The one include for ONNX Runtime's headers. Only src/abi/ includes this file.
#pragma once

#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>
#undef ORT_API_MANUAL_INIT

namespace mlx_ep {

/** The ORT API version this plugin is built against and requests from the host. */
constexpr uint32_t kOrtApiVersion = ORT_API_VERSION;

/** The EP's registered name. */
constexpr const char* kEpName = "MLXExecutionProvider";

/** The plugin's version string. */
constexpr const char* kEpVersion = "0.1.0";

}  // namespace mlx_ep
