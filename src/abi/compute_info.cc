#include "abi/compute_info.h"

#include <cstring>

#include "abi/status.h"

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
  }
  std::vector<mx::array> outputs = runner_->Run(inputs);
  for (size_t k = 0; k < outputs.size(); ++k) {
    const mx::array& a = outputs[k];
    std::vector<int64_t> shape(a.shape().begin(), a.shape().end());
    Ort::UnownedValue out = ctx.GetOutput(k, shape);
    if (a.nbytes() == 0) continue;
    if (out.GetTensorSizeInBytes() != a.nbytes())
      throw std::logic_error("output " + std::to_string(k) + " size mismatch");
    std::memcpy(out.GetTensorMutableRawData(), a.data<uint8_t>(), a.nbytes());
  }
}

}  // namespace mlx_ep
