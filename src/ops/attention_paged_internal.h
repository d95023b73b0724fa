// Shared by the two files of com.microsoft PagedAttention: attention_contrib_paged.cc (claim,
// Q/K preparation, attention) and attention_contrib_paged_cache.cc (the paged cache: where the
// new rows go, what attention reads, the cache outputs).
#pragma once

#include <utility>

#include "ops/op.h"

namespace mlx_ep::paged {

enum Input : size_t {
  kQuery,
  kKey,
  kValue,
  kKeyCache,
  kValueCache,
  kCumulative,
  kPastLengths,
  kBlockTable,
  kCos,
  kSin,
  kSlotMapping,
  kHeadSink,
  kQNorm,
  kKNorm,
  kKScale,
  kVScale,
  kMetadata,
};

/** The static sizes of a node: tokens, heads, head size, cache and block-table geometry. */
struct Geometry {
  int tokens, heads, kv_heads, head_size, blocks, block_size, batch, blocks_per_seq;
  int capacity() const { return blocks_per_seq * block_size; }  ///< positions a sequence can hold
  int slots() const { return blocks * block_size; }
  int width() const { return kv_heads * head_size; }  ///< elements of one cache slot
};

/** Where each token belongs, as int32 arrays [T]: its sequence, its row within the sequence's new
 *  tokens, and its position in the sequence (past_seqlens + row). */
struct TokenPlaces {
  mx::array seq, row, position;
};

/** Slot of each token's K/V row in the flat cache [num_blocks * block_size, ...], or slots() (one
 *  past the cache) where ORT skips the write. */
mx::array WriteSlots(const OpContext& c, const Geometry& g, const TokenPlaces& at);

/** Which token writes each slot: [slots() + 1] int32, -1 for none (the last entry collects the
 *  skipped writes). Where several tokens name one slot, one of them wins (MLX's scatter order),
 *  for the cache outputs and for what attention reads alike. */
mx::array Writers(const OpContext& c, const Geometry& g, const mx::array& slots);

/** Per sequence, the slot of each of its positions [B, L] (0 where the block is unmapped) and
 *  whether the block is mapped [B, L]. */
std::pair<mx::array, mx::array> SequenceSlots(const OpContext& c, const Geometry& g);

/** The updated cache (input `cache`, the new `rows` [T, Hkv, D] written as `writers` says) at
 *  `slot_rows` [n, L], as attention reads it: [n, Hkv, L, D] float32. Reads the input cache and
 *  the new rows, never the updated cache itself. */
mx::array ReadCache(const OpContext& c, const Geometry& g, size_t cache, const mx::array& rows,
                    const mx::array& writers, const mx::array& slot_rows);

/** Output `output`: input `cache` with the new `rows` written (complete), declared an in-place
 *  update of the input (OpContext::UpdateInPlace) when ORT hands over the input's own buffer. */
mx::array CacheOutput(const OpContext& c, const Geometry& g, size_t output, size_t cache,
                      const mx::array& rows, const mx::array& writers, const mx::array& slots);

}  // namespace mlx_ep::paged
