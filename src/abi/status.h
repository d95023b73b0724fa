// Exceptions inside, OrtStatus* at the boundary: every function ORT holds a pointer to wraps
// its body in MLX_EP_API_BEGIN / MLX_EP_API_END(context), so no exception crosses the C ABI.
// Each exception becomes the ORT code common/error.h lists for it.
#pragma once

#include <exception>
#include <new>
#include <string>

#include "abi/ort.h"
#include "common/error.h"

namespace mlx_ep {

/** The OrtErrorCode of an ErrorKind. */
inline OrtErrorCode ToOrtCode(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidArgument:
      return ORT_INVALID_ARGUMENT;
    case ErrorKind::kNotImplemented:
      return ORT_NOT_IMPLEMENTED;
    case ErrorKind::kRuntimeException:
      return ORT_RUNTIME_EXCEPTION;
    case ErrorKind::kInvalidGraph:
      return ORT_INVALID_GRAPH;
    case ErrorKind::kEpFail:
      return ORT_EP_FAIL;
    case ErrorKind::kFail:
      break;
  }
  return ORT_FAIL;
}

/** The ErrorKind of an exception (common/error.h has the table). */
inline ErrorKind KindOf(const std::exception& e) {
  if (auto* ep = dynamic_cast<const EpError*>(&e)) return ep->kind();
  if (dynamic_cast<const std::invalid_argument*>(&e)) return ErrorKind::kInvalidArgument;
  if (dynamic_cast<const std::bad_alloc*>(&e)) return ErrorKind::kFail;
  return ErrorKind::kRuntimeException;
}

/** Builds a status "context: message" with `code`. */
inline OrtStatus* MakeStatus(const std::string& context, const std::string& message,
                             OrtErrorCode code = ORT_FAIL) {
  return Ort::GetApi().CreateStatus(code, (context + ": " + message).c_str());
}

/** The status for the exception being handled (call only inside a catch block). */
inline OrtStatus* StatusFromCurrentException(const std::string& context) {
  try {
    throw;
  } catch (const Ort::Exception& e) {
    return MakeStatus(context, e.what(), e.GetOrtErrorCode());
  } catch (const std::bad_alloc& e) {
    return MakeStatus(context, std::string("Failed to allocate memory (") + e.what() + ")", ORT_FAIL);
  } catch (const std::exception& e) {
    return MakeStatus(context, e.what(), ToOrtCode(KindOf(e)));
  } catch (...) {
    return MakeStatus(context, "unknown exception", ORT_RUNTIME_EXCEPTION);
  }
}

}  // namespace mlx_ep

#define MLX_EP_API_BEGIN try {
#define MLX_EP_API_END(context)                           \
  }                                                       \
  catch (...) {                                           \
    return ::mlx_ep::StatusFromCurrentException(context); \
  }
