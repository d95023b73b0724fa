// Exceptions inside, OrtStatus* at the boundary: every function ORT holds a pointer to wraps
// its body in MLX_EP_API_BEGIN / MLX_EP_API_END(context), so no exception crosses the C ABI.
#pragma once

#include <exception>
#include <string>

#include "abi/ort.h"

namespace mlx_ep {

/** Builds an ORT_FAIL status "context: message". */
inline OrtStatus* MakeStatus(const std::string& context, const std::string& message) {
  return Ort::GetApi().CreateStatus(ORT_FAIL, (context + ": " + message).c_str());
}

}  // namespace mlx_ep

#define MLX_EP_API_BEGIN try {
#define MLX_EP_API_END(context)                                                          \
  }                                                                                      \
  catch (const Ort::Exception& e) {                                                      \
    return Ort::GetApi().CreateStatus(e.GetOrtErrorCode(),                               \
                                      (std::string(context) + ": " + e.what()).c_str()); \
  }                                                                                      \
  catch (const std::exception& e) {                                                      \
    return ::mlx_ep::MakeStatus(context, e.what());                                      \
  }                                                                                      \
  catch (...) {                                                                          \
    return ::mlx_ep::MakeStatus(context, "unknown exception");                           \
  }
