#include "abi/compute_info.h"

#include "abi/status.h"
#include "runtime/memory.h"

namespace mlx_ep {

MlxNodeComputeInfo::MlxNodeComputeInfo(std::shared_ptr<PartitionRunner> runner)
    : OrtNodeComputeInfo{}, runner_(std::move(runner)) {
  ort_version_supported = kOrtApiVersion;
  CreateState = CreateStateImpl;
  Compute = ComputeImpl;
  ReleaseState = ReleaseStateImpl;
}

OrtStatus* ORT_API_CALL MlxNodeComputeInfo::CreateStateImpl(OrtNodeComputeInfo*, OrtNodeComputeContext*,
                                                            void** compute_state) noexcept {
  *compute_state = nullptr;  // all state lives in the runner
  return nullptr;
}

void ORT_API_CALL MlxNodeComputeInfo::ReleaseStateImpl(OrtNodeComputeInfo*, void*) noexcept {}

OrtStatus* ORT_API_CALL MlxNodeComputeInfo::ComputeImpl(OrtNodeComputeInfo* this_ptr, void*,
                                                        OrtKernelContext* kernel_context) noexcept {
  auto* self = static_cast<MlxNodeComputeInfo*>(this_ptr);
  MLX_EP_API_BEGIN
  self->RunPartition(kernel_context);
  return nullptr;
  MLX_EP_API_END("MLXExecutionProvider partition " + self->runner_->plan().name)
}

void MlxNodeComputeInfo::RunPartition(OrtKernelContext* kernel_context) {
  Ort::KernelContext ctx(kernel_context);
  const size_t num_inputs = ctx.GetInputCount();
  std::vector<InputTensor> inputs(num_inputs);
  for (size_t i = 0; i < num_inputs; ++i) {
    Ort::ConstValue v = ctx.GetInput(i);
    if (v == nullptr || !v.IsTensor())
      throw std::invalid_argument("input " + std::to_string(i) + " is missing or not a tensor");
    auto info = v.GetTensorTypeAndShapeInfo();
    inputs[i].type = static_cast<ElemType>(info.GetElementType());
    inputs[i].shape = info.GetShape();
    inputs[i].data = v.GetTensorRawData();
    if (DeviceMemoryEnabled()) {  // the CPU device never sees device memory
      auto memory = v.GetTensorMemoryInfo();
      inputs[i].device_memory = memory.GetDeviceType() != OrtMemoryInfoDeviceType_CPU &&
                                memory.GetDeviceMemoryType() != OrtDeviceMemoryType_HOST_ACCESSIBLE;
    }
  }
  runner_->Run(inputs, [&ctx](size_t k, const std::vector<int64_t>& shape, size_t bytes) -> void* {
    Ort::UnownedValue out = ctx.GetOutput(k, shape);
    if (out.GetTensorSizeInBytes() != bytes)
      throw std::logic_error("output " + std::to_string(k) + " has " + std::to_string(bytes) +
                             " bytes, ORT allocated " + std::to_string(out.GetTensorSizeInBytes()));
    return bytes ? out.GetTensorMutableRawData() : nullptr;
  });
}

}  // namespace mlx_ep
