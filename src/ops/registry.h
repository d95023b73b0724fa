// The op registry: one table of OpSpecs, filled by one Register*Ops function per op family.
#pragma once

#include <string>
#include <vector>

#include "ops/op.h"

namespace mlx_ep {

/** All registered ops. */
class OpRegistry {
 public:
  /** Adds an entry. Ranges of the same (domain, op) must not overlap. */
  void Add(OpSpec spec);
  /** The entry whose range holds `since_version`, or nullptr. An entry whose op_type ends in '*'
   *  matches every op type with that prefix (a family whose op type encodes its configuration,
   *  e.g. pkg.onnax AttentionVJP_*); exact entries are preferred. */
  const OpSpec* Find(const std::string& domain, const std::string& op_type, int since_version) const;
  /** Every entry, in registration order. */
  const std::vector<OpSpec>& specs() const { return specs_; }

  /** The process-wide registry with every op family registered. */
  static const OpRegistry& Get();

 private:
  std::vector<OpSpec> specs_;
};

// One function per op family (ops/<family>.cc).
void RegisterArithmeticOps(OpRegistry& r);     // Add Sub Mul Div Pow Mod Min Max Sum Mean
void RegisterLogicalOps(OpRegistry& r);        // comparisons, And Or Xor Not, Bitwise*, Where, IsNaN IsInf
void RegisterUnaryOps(OpRegistry& r);          // math, trig and hyperbolic functions, activations, Clip
void RegisterReductionOps(OpRegistry& r);      // Reduce*, ArgMax ArgMin
void RegisterMatmulOps(OpRegistry& r);         // MatMul Gemm
void RegisterConvOps(OpRegistry& r);           // Conv ConvTranspose
void RegisterNormalizationOps(OpRegistry& r);  // Softmax LogSoftmax LayerNormalization RMSNormalization
void RegisterRecurrentOps(OpRegistry& r);     // RNN GRU LSTM
void RegisterPoolOps(OpRegistry& r);           // MaxPool AveragePool LpPool Global*Pool MaxUnpool
void RegisterShapeOps(OpRegistry& r);  // Reshape Transpose Squeeze Unsqueeze Flatten Expand Shape Size Tile
void RegisterTensorOps(
    OpRegistry& r);  // Concat Split Slice Gather GatherElements Constant* Range Cast* Identity
void RegisterIndexingOps(OpRegistry& r);  // GatherND ScatterND ScatterElements Scatter OneHot
void RegisterEinsumOps(OpRegistry& r);    // Einsum
void RegisterAttentionOps(OpRegistry& r);  // Attention
void RegisterAttentionVjpOps(OpRegistry& r);  // pkg.onnax AttentionVJP* (training pullbacks)

void RegisterImageNormalizationOps(OpRegistry& r);  // BatchNorm InstanceNorm GroupNorm LpNorm LRN MVN
void RegisterExtraActivationOps(OpRegistry& r);     // PRelu ThresholdedRelu Celu Mish Shrink Hardmax Dropout
void RegisterResizeOps(OpRegistry& r);  // Resize Upsample GridSample AffineGrid
void RegisterGridSampleOps(OpRegistry& r);  // GridSample AffineGrid (grid_sample.cc), from RegisterResizeOps
void RegisterPadOps(OpRegistry& r);     // Pad
void RegisterSignalOps(OpRegistry& r);  // HannWindow HammingWindow BlackmanWindow MelWeightMatrix
void RegisterRotaryEmbeddingOps(OpRegistry& r);  // RotaryEmbedding
void RegisterQuantizedOps(OpRegistry& r);  // com.microsoft MatMulNBits GatherBlockQuantized
void RegisterGroupQueryAttentionOps(OpRegistry& r);  // com.microsoft GroupQueryAttention
void RegisterPagedAttentionOps(OpRegistry& r);  // com.microsoft PagedAttention
void RegisterContribAttentionOps(OpRegistry& r);  // com.microsoft MultiHeadAttention Attention
void RegisterControlFlowOps(OpRegistry& r);  // If Loop Scan (bodies traced inline)
void RegisterTensorMiscOps(
    OpRegistry& r);  // DepthToSpace SpaceToDepth Trilu CumSum CumProd TopK CenterCropPad EyeLike
void RegisterContribNormalizationOps(OpRegistry& r);  // (Skip)(Simplified)LayerNormalization contrib ops
void RegisterContribActivationOps(OpRegistry& r);  // Gelu BiasGelu FastGelu QuickGelu BiasAdd BiasSplitGelu
void RegisterContribMatmulOps(OpRegistry& r);      // FusedMatMul TransposeMatMul

}  // namespace mlx_ep
