// OrtNodeComputeInfo for one fused partition: Compute binds ORT's tensors and runs the partition.
#pragma once

#include <memory>

#include "abi/ort.h"
#include "runtime/runner.h"

namespace mlx_ep {

/** Owns the runner of one fused node; ORT releases it through ReleaseNodeComputeInfos. */
class MlxNodeComputeInfo : public OrtNodeComputeInfo {
 public:
  explicit MlxNodeComputeInfo(std::shared_ptr<PartitionRunner> runner);

 private:
  static OrtStatus* ORT_API_CALL CreateStateImpl(OrtNodeComputeInfo* this_ptr,
                                                 OrtNodeComputeContext* compute_context,
                                                 void** compute_state) noexcept;
  static OrtStatus* ORT_API_CALL ComputeImpl(OrtNodeComputeInfo* this_ptr, void* compute_state,
                                             OrtKernelContext* kernel_context) noexcept;
  static void ORT_API_CALL ReleaseStateImpl(OrtNodeComputeInfo* this_ptr, void* compute_state) noexcept;

  void RunPartition(OrtKernelContext* kernel_context);

  std::shared_ptr<PartitionRunner> runner_;
};

}  // namespace mlx_ep
