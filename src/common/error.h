// The EP's errors and the ORT error code each one stands for. Errors are exceptions inside the
// EP; src/abi/status.h maps them to an OrtStatus once, at the C ABI (MLX_EP_API_END):
//
//   what was thrown                                    ORT code
//   InvalidArgumentError, std::invalid_argument        ORT_INVALID_ARGUMENT (bad inputs or
//     (OpContext::Fail, failed runtime checks, MLX's     attributes at run time: ORT's CPU
//     shape errors while tracing)                        kernels say INVALID_ARGUMENT too)
//   NotImplementedError                                ORT_NOT_IMPLEMENTED (a type MLX lacks)
//   OutOfMemoryError, std::bad_alloc                   ORT_FAIL, as ORT's "Failed to allocate
//                                                        memory" (BFCArena) on its CPU EP
//   EpError(kind) for the rest of the kinds            that kind's code
//   anything else (MLX's runtime errors, the EP's      ORT_RUNTIME_EXCEPTION: what ORT's executor
//     internal errors)                                   makes of an exception from a kernel
//
// Compile (session creation) reports a plan that cannot be built as ORT_INVALID_GRAPH when the
// model's graph is at fault (an invalid_argument) and ORT_EP_FAIL otherwise (abi/ep.cc).
#pragma once

#include <stdexcept>
#include <string>

namespace mlx_ep {

/** The ORT error codes the EP reports (the OrtErrorCode of the same name). */
enum class ErrorKind { kFail, kInvalidArgument, kNotImplemented, kRuntimeException, kInvalidGraph, kEpFail };

/** An error that names its ORT code. */
class EpError : public std::runtime_error {
 public:
  EpError(ErrorKind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

/** A run's inputs or a node's attributes are invalid (ORT_INVALID_ARGUMENT). An
 *  std::invalid_argument too, so code that catches those (and MLX's own) sees it. */
struct InvalidArgumentError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

/** Something the EP does not implement, such as a dtype MLX lacks (ORT_NOT_IMPLEMENTED). */
struct NotImplementedError : EpError {
  explicit NotImplementedError(const std::string& what) : EpError(ErrorKind::kNotImplemented, what) {}
};

/** Memory could not be had (ORT_FAIL, as ORT's CPU EP reports a failed allocation). */
struct OutOfMemoryError : EpError {
  explicit OutOfMemoryError(const std::string& what) : EpError(ErrorKind::kFail, what) {}
};

}  // namespace mlx_ep
