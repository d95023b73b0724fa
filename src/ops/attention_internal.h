// Helpers shared by the attention families (Attention, RotaryEmbedding and the com.microsoft
// attention ops): head splitting, grouped-query matmuls and the rotary rotation.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mlx/fast.h"
#include "ops/op.h"

namespace mlx_ep {

/** [B, S, heads * D] -> [B, heads, S, D]; fails when the hidden size is not a multiple of heads. */
mx::array SplitHeads(const OpContext& c, const mx::array& x, int heads, const char* what);

/** [B, heads, S, D] -> [B, S, heads * D]. */
mx::array MergeHeads(const mx::array& x, mx::Stream s);

/** a [B, H, S, D] times b [B, Hkv, D, L] (or [B, Hkv, L, Dv]) with query head h reading kv head
 *  h / (H / Hkv): a broadcast matmul over [B, Hkv, groups, ...] instead of repeating b. */
mx::array GroupedMatmul(const mx::array& a, const mx::array& b, int groups, mx::Stream s);

/** Rotates the first `rot` values of x's last axis by the angles whose cosines/sines `cos`/`sin`
 *  hold (float32, broadcastable to x[..., :rot / 2]); interleaved pairs (x[2i], x[2i+1]), else
 *  (x[i], x[i + rot / 2]). Computed in float32 and rounded once to x's dtype; the values past
 *  `rot` pass unchanged. x must be 4-D. */
mx::array ApplyRotary(const mx::array& x, const mx::array& cos, const mx::array& sin, int rot,
                      bool interleaved, mx::Stream s);

/** Where each (batch, token) row of GroupQueryAttention's query, key and value starts, as the EP's
 *  CUDA kernels read them in place: {QS, QO, KS, KO, VS, VO} (stride and offset, in elements; packed
 *  QKV [B, S, (H + 2 Hkv) * D] is one input read three times), or nullopt when the inputs are not
 *  [B, S, width] rows of the heads' widths. */
std::optional<std::array<int, 6>> QkvRowStarts(const mx::array& query, const std::optional<mx::array>& key,
                                               const std::optional<mx::array>& value, int heads, int kv_heads,
                                               int head_size);

/** QkvRowStarts' six numbers as a kernel's template constants QS, QO, KS, KO, VS, VO. */
std::vector<std::pair<std::string, mx::fast::TemplateArg>> QkvRowConstants(const std::array<int, 6>& starts);

}  // namespace mlx_ep
