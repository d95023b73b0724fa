// PagedAttention's paged cache (see attention_contrib_paged.cc): the slots the new K/V rows go to,
// the cache as attention reads it after the write, and the cache outputs.
//
//  - One map says which token writes each slot (Writers, int32 per slot: the size of the cache
//    over Hkv * D * 2 bytes). Attention reads the input cache and the new rows through it, never
//    the updated cache, so that array is only evaluated when ORT's output buffer is not the input's.
//  - ORT's CUDA EP hands the cache outputs the inputs' own buffers. The new rows of one step sit
//    in few blocks, a contiguous run in each (a sequence's positions are consecutive), so the
//    update is declared as S rows per block (OpContext::UpdateInPlace, axis 1 of [num_blocks,
//    block_size, Hkv, D]) at the block's first written offset: S = 1 when the step is
//    decode-shaped (tokens <= sequences, as ORT's backend choice), else min(tokens, block_size).
//    Blocks without a write rewrite S rows with their own values. Where a block's writes do not
//    fit its S rows (two new tokens of one sequence in one block on a decode-shaped step,
//    slot_mapping scattering them), the offsets are -1: the runner then writes the whole output.
#include <algorithm>

#include "ops/attention_paged_internal.h"

namespace mlx_ep::paged {

mx::array WriteSlots(const OpContext& c, const Geometry& g, const TokenPlaces& at) {
  const mx::Stream s = c.stream;
  mx::array slot = mx::array(0, mx::int32);
  if (c.has_input(kSlotMapping)) {
    slot = c.input(kSlotMapping);
    if (slot.ndim() != 1 || slot.shape(0) != g.tokens) c.Fail("slot_mapping must be [tokens]");
  } else {
    const mx::array bs(g.block_size, mx::int32);
    const mx::array index =
        mx::minimum(mx::floor_divide(at.position, bs, s), mx::array(g.blocks_per_seq - 1, mx::int32), s);
    const mx::array flat = mx::add(mx::multiply(at.seq, mx::array(g.blocks_per_seq, mx::int32), s), index, s);
    const mx::array block = mx::take(mx::reshape(c.input(kBlockTable), {-1}, s), flat, 0, s);
    const mx::array mapped = mx::logical_and(mx::greater_equal(block, mx::array(0, mx::int32), s),
                                             mx::less(block, mx::array(g.blocks, mx::int32), s), s);
    slot = mx::where(mapped, mx::add(mx::multiply(block, bs, s), mx::remainder(at.position, bs, s), s),
                     mx::array(-1, mx::int32), s);
  }
  const mx::array inside = mx::logical_and(mx::greater_equal(slot, mx::array(0, mx::int32), s),
                                           mx::less(slot, mx::array(g.slots(), mx::int32), s), s);
  return mx::where(inside, slot, mx::array(g.slots(), mx::int32), s);
}

mx::array Writers(const OpContext& c, const Geometry& g, const mx::array& slots) {
  const mx::Stream s = c.stream;
  const mx::array none = mx::full({g.slots() + 1}, -1, mx::int32, s);
  const mx::array tokens = mx::reshape(mx::arange(g.tokens, mx::int32, s), {g.tokens, 1}, s);
  return mx::scatter(none, {slots}, tokens, {0}, s);
}

std::pair<mx::array, mx::array> SequenceSlots(const OpContext& c, const Geometry& g) {
  const mx::Stream s = c.stream;
  const int L = g.capacity();
  const mx::array j = mx::arange(L, mx::int32, s);
  const mx::array bs(g.block_size, mx::int32);
  const mx::array block = mx::take(c.input(kBlockTable), mx::floor_divide(j, bs, s), 1, s);  // [B, L]
  const mx::array mapped = mx::logical_and(mx::greater_equal(block, mx::array(0, mx::int32), s),
                                           mx::less(block, mx::array(g.blocks, mx::int32), s), s);
  const mx::array slot =
      mx::add(mx::multiply(block, bs, s), mx::reshape(mx::remainder(j, bs, s), {1, L}, s), s);
  return {mx::where(mapped, slot, mx::array(0, mx::int32), s), mapped};
}

namespace {

/** The updated cache at `slots` (any shape, values in [0, slots())), [..., Hkv * D] in the
 *  cache's type: the writing token's new row, else the input cache's. */
mx::array UpdatedRows(const OpContext& c, const Geometry& g, size_t cache, const mx::array& rows,
                      const mx::array& writers, const mx::array& slots) {
  const mx::Stream s = c.stream;
  const mx::array flat = mx::reshape(c.input(cache), {g.slots(), g.width()}, s);
  const mx::array fresh = mx::reshape(rows, {g.tokens, g.width()}, s);
  const mx::array index = mx::reshape(slots, {-1}, s);
  const mx::array writer = mx::take(writers, index, 0, s);
  const mx::array written = mx::take(fresh, mx::maximum(writer, mx::array(0, mx::int32), s), 0, s);
  const mx::array kept = mx::take(flat, index, 0, s);
  const mx::array updated = mx::where(
      mx::reshape(mx::greater_equal(writer, mx::array(0, mx::int32), s), {-1, 1}, s), written, kept, s);
  mx::Shape shape = slots.shape();
  shape.push_back(g.width());
  return mx::reshape(updated, shape, s);
}

/** Per block, the offset of its S rows that hold every write into it ([num_blocks] int32), or -1
 *  everywhere when some block's writes do not fit S rows. */
mx::array BlockOffsets(const OpContext& c, const Geometry& g, const mx::array& slots, int rows) {
  const mx::Stream s = c.stream;
  const mx::array bs(g.block_size, mx::int32);
  const mx::array block = mx::floor_divide(slots, bs, s);  // num_blocks for the skipped writes
  const mx::array at = mx::reshape(mx::remainder(slots, bs, s), {g.tokens, 1}, s);
  const std::vector<mx::array> index = {block};
  const mx::array first =
      mx::slice(mx::scatter_min(mx::full({g.blocks + 1}, g.block_size, mx::int32, s), index, at, {0}, s), {0},
                {g.blocks}, s);
  const mx::array last = mx::slice(
      mx::scatter_max(mx::full({g.blocks + 1}, -1, mx::int32, s), index, at, {0}, s), {0}, {g.blocks}, s);
  const mx::array written = mx::greater_equal(last, mx::array(0, mx::int32), s);
  const mx::array offset = mx::where(
      written, mx::minimum(first, mx::array(g.block_size - rows, mx::int32), s), mx::array(0, mx::int32), s);
  const mx::array fits =
      mx::all(mx::logical_or(mx::logical_not(written, s),
                             mx::less(last, mx::add(offset, mx::array(rows, mx::int32), s), s), s),
              s);
  return mx::where(fits, offset, mx::array(-1, mx::int32), s);
}

}  // namespace

mx::array ReadCache(const OpContext& c, const Geometry& g, size_t cache, const mx::array& rows,
                    const mx::array& writers, const mx::array& slot_rows) {
  const mx::Stream s = c.stream;
  const int n = slot_rows.shape(0), L = slot_rows.shape(1);
  const mx::array k =
      mx::reshape(UpdatedRows(c, g, cache, rows, writers, slot_rows), {n, L, g.kv_heads, g.head_size}, s);
  return mx::astype(mx::transpose(k, {0, 2, 1, 3}, s), mx::float32, s);
}

mx::array CacheOutput(const OpContext& c, const Geometry& g, size_t output, size_t cache,
                      const mx::array& rows, const mx::array& writers, const mx::array& slots) {
  const mx::Stream s = c.stream;
  const mx::Shape shape = c.input(cache).shape();
  const mx::array all = mx::arange(g.slots(), mx::int32, s);
  const mx::array whole = mx::reshape(UpdatedRows(c, g, cache, rows, writers, all), shape, s);
  const int run = g.tokens <= g.batch ? 1 : std::min(g.tokens, g.block_size);
  const mx::array offsets = BlockOffsets(c, g, slots, run);
  // Slots block * block_size + offset + i, i < run: each block's rows, [num_blocks, run].
  const mx::array first =
      mx::add(mx::multiply(mx::arange(g.blocks, mx::int32, s), mx::array(g.block_size, mx::int32), s),
              mx::maximum(offsets, mx::array(0, mx::int32), s), s);
  const mx::array at = mx::add(mx::reshape(first, {g.blocks, 1}, s),
                               mx::reshape(mx::arange(run, mx::int32, s), {1, run}, s), s);
  const mx::array block_rows =
      mx::reshape(UpdatedRows(c, g, cache, rows, writers, at), {g.blocks, run, g.kv_heads, g.head_size}, s);
  c.UpdateInPlace(output, cache, 1, block_rows, offsets);
  return whole;
}

}  // namespace mlx_ep::paged
