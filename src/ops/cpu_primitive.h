// The eval_cpu of the EP's own MLX primitives (MatMulNBits' kernels, GroupQueryAttention's, the
// row normalizations), which run loops of ours on MLX's CPU stream.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "mlx/allocator.h"
#include "mlx/array.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/ops.h"

// Loops of the primitives' tasks that should vectorize: built three times on x86-64 with GCC, for
// AVX-512 (x86-64-v4), AVX2 + FMA (v3) and the baseline, the loader picking one (target_clones);
// the helpers they call are MLX_EP_INLINE, so that each clone gets its own copy. The v4 clone
// computes the same values as v3 (the same double-precision steps, FMA in both; no reduction
// changes order): its eight double lanes took the exp-family loops from 1.34 to 0.93 ns a value
// (SigmoidRange alone, this machine), NudeNet 29.8 -> 28.7 ms, Magika 17.3 -> 16.7 ms.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MLX_EP_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MLX_EP_CLONES
#endif
#if defined(__GNUC__)
#define MLX_EP_INLINE inline __attribute__((always_inline))
#else
#define MLX_EP_INLINE inline
#endif

namespace mlx_ep {

namespace mx = mlx::core;

// The primitives take their inputs in any layout: DispatchCpuTask copies one that is not
// row-contiguous when the task runs (RowMajor), which real graphs rarely give. An mx::contiguous
// on every computed input, as before, was a primitive of its own that every run evaluates: 7 a
// layer of a Qwen2-0.5B decode step (168 of its 944), and before that MatMulNBits' Flatten and
// Contiguous of B and scales (242 of 2,566).

/** `n` values of `item` bytes from `src` (`stride` items apart) to consecutive `dst`. */
inline void CopyStridedRow(const uint8_t* src, uint8_t* dst, int64_t n, int64_t stride, size_t item) {
  if (stride == 1) {
    std::memcpy(dst, src, static_cast<size_t>(n) * item);
    return;
  }
  // A memcpy of a constant size is one load and one store (no type punning of the values).
  auto copy = [&](auto size) {
    constexpr int64_t kSize = decltype(size)::value;
    for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * kSize, src + i * stride * kSize, kSize);
  };
  switch (item) {
    case 1:
      return copy(std::integral_constant<int64_t, 1>{});
    case 2:
      return copy(std::integral_constant<int64_t, 2>{});
    case 4:
      return copy(std::integral_constant<int64_t, 4>{});
    case 8:
      return copy(std::integral_constant<int64_t, 8>{});
    default:
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(dst + i * item, src + i * stride * static_cast<int64_t>(item), item);
  }
}

/** `a`'s dims as (size, stride) pairs for a row-major walk: size-1 dims dropped and neighbours
 *  that step through memory as one dim merged, so the innermost is as long as it can be (a
 *  transposed (N, C, H, 1) array walked by its last dim of 1 was a row a value: 2.7% of Magika). */
inline std::vector<std::pair<int64_t, int64_t>> WalkDims(const mx::array& a) {
  std::vector<std::pair<int64_t, int64_t>> dims;
  for (size_t d = 0; d < a.ndim(); ++d) {
    if (a.shape(d) == 1) continue;
    if (!dims.empty() && dims.back().second == a.strides(d) * a.shape(d))
      dims.back() = {dims.back().first * a.shape(d), a.strides(d)};
    else
      dims.push_back({a.shape(d), a.strides(d)});
  }
  if (dims.empty()) dims.push_back({1, 1});
  return dims;
}

/** `a` as a row-contiguous array: `a` itself, or a copy of its elements in row-major order (any
 *  strides, broadcasts and negative strides included), a row of the innermost walked dim at a time.
 *  Called by a primitive's task, when `a`'s data is there. (It copied one element at a time through
 *  memcpy before: 9% of PP-OCR's detector.) */
inline mx::array RowMajor(const mx::array& a) {
  if (a.flags().row_contiguous) return a;
  mx::array out(mx::allocator::malloc(a.nbytes()), a.shape(), a.dtype());
  if (a.size() == 0) return out;
  const size_t item = a.itemsize();
  const std::vector<std::pair<int64_t, int64_t>> dims = WalkDims(a);
  const int nd = static_cast<int>(dims.size());
  const auto [inner, inner_stride] = dims.back();
  const size_t rows = a.size() / static_cast<size_t>(inner);
  const auto* src = static_cast<const uint8_t*>(a.data<void>());
  auto* dst = static_cast<uint8_t*>(out.data<void>());
  std::vector<int64_t> at(nd, 0);  // the row's coordinates in the outer dims, last fastest
  int64_t offset = 0;              // its first element's offset in `a`, in elements
  for (size_t r = 0; r < rows; ++r) {
    CopyStridedRow(src + offset * static_cast<int64_t>(item), dst + r * inner * item, inner, inner_stride,
                   item);
    for (int d = nd - 2; d >= 0; --d) {
      offset += dims[d].second;
      if (++at[d] < dims[d].first) break;
      offset -= dims[d].second * dims[d].first;
      at[d] = 0;
    }
  }
  return out;
}

/** Registers `inputs` and `outputs` with `stream`'s CPU command encoder, as MLX's own CPU
 *  primitives do, and dispatches `compute(inputs, outputs)`: the encoder holds the arrays until
 *  the task has run; the task gets weak copies, row-major (RowMajor). */
template <typename Compute>
void DispatchCpuTask(mx::Stream stream, const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs,
                     Compute compute) {
  for (mx::array& out : outputs) out.set_data(mx::allocator::malloc(out.nbytes()));
  auto& encoder = mx::cpu::get_command_encoder(stream);
  std::vector<mx::array> in, out;
  for (const mx::array& a : inputs) {
    encoder.set_input_array(a);
    in.push_back(mx::array::unsafe_weak_copy(a));
  }
  for (mx::array& a : outputs) {
    encoder.set_output_array(a);
    out.push_back(mx::array::unsafe_weak_copy(a));
  }
  encoder.dispatch([in = std::move(in), out = std::move(out), compute = std::move(compute)]() mutable {
    for (mx::array& a : in) a = RowMajor(a);
    compute(in, out);
  });
}

/** DispatchCpuTask for a primitive of one output. */
template <typename Compute>
void DispatchCpuKernel(const char*, mx::Stream stream, const std::vector<mx::array>& inputs, mx::array& out,
                       Compute compute) {
  std::vector<mx::array> outputs = {out};
  DispatchCpuTask(
      stream, inputs, outputs,
      [compute = std::move(compute)](const std::vector<mx::array>& in, std::vector<mx::array>& outs) mutable {
        compute(in, outs[0]);
      });
}

}  // namespace mlx_ep
