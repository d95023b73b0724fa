// GroupQueryAttention (com.microsoft 1) between its two files: the claim
// (attention_contrib_gqa_claim.cc) and the translation (attention_contrib_gqa.cc, whose header
// comment defines the semantics).
#pragma once

#include <cstddef>

#include "ops/op.h"

namespace mlx_ep {

/** The node's inputs, by position. */
enum GqaInput : size_t {
  kQuery,
  kKey,
  kValue,
  kPastKey,
  kPastValue,
  kSeqlensK,
  kTotalLength,
  kCos,
  kSin,
  kPositionIds,
  kBias,
  kHeadSink,
  kKScale,
  kVScale,
  kQNorm,
  kKNorm,
};

/** Whether the EP takes the node (attributes, types, optional inputs and outputs). */
Claim ClaimGroupQueryAttention(const NodeView& v);

}  // namespace mlx_ep
