// Op family: block-quantized weights, com.microsoft GatherBlockQuantized (MatMulNBits lives in
// quantized.cc).
//
// A Gather along axis 0 of a uint8 table whose last axis packs 8 / bits values per byte (low bits
// first) and is quantized in blocks of `block_size` along it: output = (q - zero_point) * scale in
// float32, rounded once to the scales' type (float or float16), as ORT's CPU kernel. Zero points
// are packed like the data (default 2^(bits - 1)). Rows are gathered while still packed, then only
// the gathered rows are unpacked. Out-of-range indices give zero rows (ORT's documented
// behaviour); negative ones count from the end.
// Declined: int4/uint4 data (no such element type in the EP), FP8/FP4 data, bfloat16 scales (ORT's
// CPU kernel has no bfloat16 output), gather_axis != 0 or quantize_axis != last (ORT rejects
// them for uint8 data).
#include <bit>

#include "ops/claim_util.h"
#include "ops/quantized_internal.h"
#include "ops/registry.h"

namespace mlx_ep {
namespace {

Claim ClaimGatherBlockQuantized(const NodeView& v) {
  const Node& n = v.node();
  if (v.input_type(0) != ElemType::kUInt8) return Claim::No(TypeReason(v, 0, "only uint8 packed data"));
  if (!IsOneOf(v.input_type(1), {ElemType::kInt32, ElemType::kInt64})) return Claim::No(TypeReason(v, 1));
  const ElemType t = v.input_type(2);
  if (!IsOneOf(t, {ElemType::kFloat, ElemType::kFloat16})) return Claim::No(TypeReason(v, 2, "scales"));
  if (v.output_type(0) != t) return Claim::No("output type differs from the scales");
  if (v.has_input(3) && v.input_type(3) != ElemType::kUInt8)
    return Claim::No("zero_points type differs from data");
  const int64_t bits = n.AttrInt("bits", 4);
  if (bits != 2 && bits != 4 && bits != 8) return Claim::No("bits=" + std::to_string(bits));
  const int64_t block = n.AttrInt("block_size", 128);
  if (block < 16 || !std::has_single_bit(static_cast<uint64_t>(block)))
    return Claim::No("block_size=" + std::to_string(block) + " is not a power of 2 >= 16");
  auto rank = v.input_rank(0);
  if (!rank || *rank < 1) return Claim::No("data rank unknown or 0");
  const int64_t gather_axis = n.AttrInt("gather_axis", 0), quantize_axis = n.AttrInt("quantize_axis", 1);
  if (gather_axis != 0 && gather_axis != -*rank) return Claim::No("gather_axis must be 0 for uint8 data");
  if (quantize_axis != *rank - 1 && quantize_axis != -1)
    return Claim::No("quantize_axis must be the last axis for uint8 data");
  if (*rank < 2) return Claim::No("data must have rank >= 2 (gather_axis and quantize_axis differ)");
  if (auto r = v.input_rank(2); r && *r != *rank) return Claim::No("scales rank differs from data");
  return Claim::Yes();
}

/** Per-element values of `blocks` ([..., n_blocks]) over a last axis of `length`. */
mx::array PerElement(const mx::array& blocks, int block, int length, mx::Stream s) {
  mx::array r = mx::repeat(blocks, block, static_cast<int>(blocks.ndim()) - 1, s);
  mx::Shape start(r.ndim(), 0), stop = r.shape();
  stop.back() = length;
  return mx::slice(r, start, stop, s);
}

std::vector<mx::array> TranslateGatherBlockQuantized(const OpContext& c) {
  const mx::Stream s = c.stream;
  const int bits = static_cast<int>(c.node.AttrInt("bits", 4));
  const int block = static_cast<int>(c.node.AttrInt("block_size", 128));
  const mx::array& data = c.input(0);
  const mx::array& scales = c.input(2);
  const int rows = data.shape(0);
  const int length = data.shape(-1) * (8 / bits);
  const int n_blocks = (length + block - 1) / block;
  mx::Shape scale_shape = data.shape();
  scale_shape.back() = n_blocks;
  if (scales.shape() != scale_shape) c.Fail("scales must match data with ceil(last / block_size) blocks");
  if (c.has_input(3)) {
    mx::Shape zp_shape = scale_shape;
    zp_shape.back() = (n_blocks * bits + 7) / 8;
    if (c.input(3).shape() != zp_shape) c.Fail("zero_points must be packed like data");
  }

  // Negative indices count from the end; out-of-range ones read row 0 and are zeroed below.
  const mx::array& idx = c.input(1);
  const mx::array n = mx::array(rows, idx.dtype());
  const mx::array wrapped =
      mx::where(mx::less(idx, mx::array(0, idx.dtype()), s), mx::add(idx, n, s), idx, s);
  const mx::array valid =
      mx::logical_and(mx::greater_equal(wrapped, mx::array(0, idx.dtype()), s), mx::less(wrapped, n, s), s);
  const mx::array safe = mx::where(valid, wrapped, mx::array(0, idx.dtype()), s);

  const mx::array q = mx::astype(UnpackBits(mx::take(data, safe, 0, s), bits, s), mx::float32, s);
  const mx::array scale = mx::astype(mx::take(scales, safe, 0, s), mx::float32, s);
  mx::array zp = mx::array(static_cast<float>(1 << (bits - 1)));
  if (c.has_input(3)) {
    mx::array z = UnpackBits(mx::take(c.input(3), safe, 0, s), bits, s);
    mx::Shape start(z.ndim(), 0), stop = z.shape();
    stop.back() = n_blocks;
    zp = PerElement(mx::astype(mx::slice(z, start, stop, s), mx::float32, s), block, length, s);
  }
  mx::array y =
      mx::multiply(mx::subtract(q, zp, s), PerElement(scale, block, length, s), s);  // q - zp is exact
  mx::Shape mask_shape = valid.shape();
  mask_shape.insert(mask_shape.end(), data.ndim() - 1, 1);
  y = mx::where(mx::reshape(valid, mask_shape, s), y, mx::array(0.f), s);
  return {mx::astype(y, scales.dtype(), s)};
}

}  // namespace

void RegisterQuantizedGatherOps(OpRegistry& r) {
  r.Add({"com.microsoft", "GatherBlockQuantized", 1, 1, ClaimGatherBlockQuantized,
         TranslateGatherBlockQuantized});
}

}  // namespace mlx_ep
