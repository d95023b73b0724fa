// What the GroupQueryAttention decode step's two CUDA kernels share: the per-head kernel's header
// text and planning (attention_gqa_cuda.cc) and the grouped kernel (attention_gqa_grouped_cuda.cc).
#pragma once

#include <optional>
#include <string>

#include "mlx/fast.h"
#include "ops/cuda_rows.h"

namespace mlx_ep {

/** The per-head kernel's header (block reduction, rotation, StepShape, the 16-byte chunks), which
 *  the grouped kernel's text extends. */
const std::string& GqaDecodeHeader();

/** True with ONNXRUNTIME_EP_MLX_DECODE_GROUPED=1: the grouped kernel where it takes the step. */
bool DecodeGroupedEnabled();

/** `launch`, PlanDecodeStep's inputs, outputs and shared constants (no NT, LCAP or SPLITS yet),
 *  made the grouped kernel's: blocks of 256 threads, one per (batch entry, KV head, split), the
 *  KV heads' counters as one more input and the splits' parts (float32) as one more output, the
 *  constants ROWS, SPLITS and NT; nullopt where its shared memory would not fit. */
std::optional<KernelLaunch> PlanGroupedDecodeStep(KernelLaunch launch, int batch, int heads, int kv_heads,
                                                  int D, int past);

/** The grouped kernel as MLX's cuda_kernel (the inputs above, counters last; outputs out, k_row,
 *  v_row, parts). */
const mx::fast::CustomKernelFunction& GroupedStepKernel();

}  // namespace mlx_ep
