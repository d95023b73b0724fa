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
    // x * [cos, cos] + [x2, x1] * [-sin, sin]: the products and sums of real and imag below, in
    // one fused kernel per tensor (the casts inside it) where those take seven primitives; the
    // doubled cos and signed sin are the same arrays for Q, K and every layer of a step, so
    // mx::compile computes them once.
    const mx::array cos2 = mx::concatenate({cos, cos}, 3, s);
    const mx::array sin2 = mx::concatenate({mx::negative(sin, s), sin}, 3, s);
    const mx::array swapped = mx::concatenate({cut(x, half, rot), cut(x, 0, half)}, 3, s);
    const mx::array y = mx::add(mx::multiply(mx::astype(x, mx::float32, s), cos2, s),
                                mx::multiply(mx::astype(swapped, mx::float32, s), sin2, s), s);
    return mx::astype(y, x.dtype(), s);
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

}  // namespace mlx_ep
