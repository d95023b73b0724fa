#include "ops/attention_internal.h"

#include <string>

namespace mlx_ep {

mx::array SplitHeads(const OpContext& c, const mx::array& x, int heads, const char* what) {
  if (heads <= 0) c.Fail(std::string(what) + " number of heads must be greater than 0");
  if (x.shape(2) % heads != 0)
    c.Fail(std::string(what) + " hidden size " + std::to_string(x.shape(2)) + " is not divisible by " +
           std::to_string(heads) + " heads");
  const mx::array r = mx::reshape(x, {x.shape(0), x.shape(1), heads, x.shape(2) / heads}, c.stream);
  return mx::transpose(r, {0, 2, 1, 3}, c.stream);
}

mx::array MergeHeads(const mx::array& x, mx::Stream s) {
  return mx::reshape(mx::transpose(x, {0, 2, 1, 3}, s), {x.shape(0), x.shape(2), x.shape(1) * x.shape(3)}, s);
}

mx::array GroupedMatmul(const mx::array& a, const mx::array& b, int groups, mx::Stream s) {
  if (groups == 1) return mx::matmul(a, b, s);
  const int B = a.shape(0), H = a.shape(1);
  const mx::array a5 = mx::reshape(a, {B, H / groups, groups, a.shape(2), a.shape(3)}, s);
  const mx::array b5 = mx::expand_dims(b, 2, s);
  const mx::array y = mx::matmul(a5, b5, s);
  return mx::reshape(y, {B, H, y.shape(3), y.shape(4)}, s);
}

mx::array ApplyRotary(const mx::array& x, const mx::array& cos, const mx::array& sin, int rot,
                      bool interleaved, mx::Stream s) {
  const int half = rot / 2;
  const int head_size = x.shape(3);
  const mx::Shape lead(x.shape().begin(), x.shape().end() - 1);
  auto cut = [&](const mx::array& a, int from, int to) {
    mx::Shape start(4, 0), stop = a.shape();
    start[3] = from;
    stop[3] = to;
    return mx::slice(a, start, stop, s);
  };
  if (!interleaved && rot == head_size) {
    // Viewed as [..., 2, half], y = x1 * [cos; sin] + x2 * [-sin; cos]: one fused kernel per
    // tensor where a Concatenate of the swapped halves came first. Every elementwise step (the
    // casts, the two-row selects, not a stack: no copy kernel) comes after the views, so all of
    // it is inside that kernel; its output is contiguous, so the reshape back is free.
    const mx::array first_row(std::initializer_list<bool>{true, false}, {2, 1});
    const mx::array cos_row = mx::expand_dims(cos, 3, s), sin_row = mx::expand_dims(sin, 3, s);
    const mx::array x1 = mx::astype(mx::expand_dims(cut(x, 0, half), 3, s), mx::float32, s);
    const mx::array x2 = mx::astype(mx::expand_dims(cut(x, half, rot), 3, s), mx::float32, s);
    const mx::array y =
        mx::add(mx::multiply(x1, mx::where(first_row, cos_row, sin_row, s), s),
                mx::multiply(x2, mx::where(first_row, mx::negative(sin_row, s), cos_row, s), s), s);
    return mx::reshape(mx::astype(y, x.dtype(), s), x.shape(), s);
  }
  const mx::array rotated = mx::astype(cut(x, 0, rot), mx::float32, s);
  mx::array x1 = rotated, x2 = rotated;
  if (interleaved) {
    mx::Shape pairs = lead;
    pairs.insert(pairs.end(), {half, 2});
    const mx::array p = mx::reshape(rotated, pairs, s);
    x1 = mx::squeeze(mx::slice(p, {0, 0, 0, 0, 0}, {pairs[0], pairs[1], pairs[2], half, 1}, s), 4, s);
    x2 = mx::squeeze(mx::slice(p, {0, 0, 0, 0, 1}, {pairs[0], pairs[1], pairs[2], half, 2}, s), 4, s);
  } else {
    x1 = cut(rotated, 0, half);
    x2 = cut(rotated, half, rot);
  }
  const mx::array real = mx::subtract(mx::multiply(cos, x1, s), mx::multiply(sin, x2, s), s);
  const mx::array imag = mx::add(mx::multiply(sin, x1, s), mx::multiply(cos, x2, s), s);
  mx::array y = interleaved ? mx::reshape(mx::stack({real, imag}, 4, s), rotated.shape(), s)
                            : mx::concatenate({real, imag}, 3, s);
  y = mx::astype(y, x.dtype(), s);
  if (rot < head_size) y = mx::concatenate({y, cut(x, rot, head_size)}, 3, s);
  return y;
}

std::optional<std::array<int, 6>> QkvRowStarts(const mx::array& query, const std::optional<mx::array>& key,
                                               const std::optional<mx::array>& value, int heads, int kv_heads,
                                               int head_size) {
  if (query.ndim() != 3) return std::nullopt;
  const int batch = query.shape(0), seq = query.shape(1);
  const int q_width = heads * head_size, kv_width = kv_heads * head_size;
  auto is_rows = [&](const mx::array& a, int width) {
    return a.ndim() == 3 && a.shape(0) == batch && a.shape(1) == seq && a.shape(2) == width;
  };
  if (!key) {
    const int all = q_width + 2 * kv_width;
    if (value || !is_rows(query, all)) return std::nullopt;
    return std::array<int, 6>{all, 0, all, q_width, all, q_width + kv_width};
  }
  if (!value || !is_rows(query, q_width) || !is_rows(*key, kv_width) || !is_rows(*value, kv_width))
    return std::nullopt;
  return std::array<int, 6>{q_width, 0, kv_width, 0, kv_width, 0};
}

std::vector<std::pair<std::string, mx::fast::TemplateArg>> QkvRowConstants(const std::array<int, 6>& starts) {
  const auto& [qs, qo, ks, ko, vs, vo] = starts;
  return {{"QS", qs}, {"QO", qo}, {"KS", ks}, {"KO", ko}, {"VS", vs}, {"VO", vo}};
}

}  // namespace mlx_ep
