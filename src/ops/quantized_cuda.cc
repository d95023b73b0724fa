// MatMulNBits' few-row products (decode) as one MLX custom CUDA kernel (quantized_internal.h).
//
// Why a kernel of our own: mx::quantized_matmul on a GPU accumulates sub-byte products in A's
// type when A is float16/bfloat16 (MLX's qmv keeps `T` partial sums for bits < 8), which is not
// ORT's CPU EP's float32 result, so the EP cast A to float32 and the result back around it; it
// takes MLX's group sizes only (32/64/128), and past 2 rows the EP dequantized all of B every run
// (a batch-8 int4 decode step of TinyLlama: 32.5 ms on the H200; 15.9 with this kernel). At one
// row it saves the casts (1,046 -> 1,006 primitives a TinyLlama int4 step; eval 5.98 -> 5.83 ms,
// inside that machine's run-to-run spread). This kernel computes what ORT's CPU EP computes for
// accuracy_level 0-3: A widened to float32, w = (q - zero_point) * scale in float32 (for float
// zero points q * scale + (-(scale * zero_point)), ORT's formula there), float32 sums, the bias
// added in float32 and one rounding to A's type. It reads ORT's packed bytes in place, so any
// block size the op allows (MLX's qmm takes 32/64/128 only) and up to kNBitsKernelMaxRows rows.
//
// Layout: one warp per output column n; lane l reads the 32-bit words l, l + 32, ... of B's row
// n (little-endian: value v of a word at bits [bits * v, bits * (v + 1)), as ORT packs a byte low
// bits first), each inside one block of K (block_size >= 16 >= the 16 values of a 2-bit word).
#include <algorithm>
#include <string>

#include "common/env.h"
#include "mlx/fast.h"
#include "mlx/ops.h"
#include "ops/quantized_internal.h"
#include "runtime/device.h"

namespace mlx_ep {
namespace {

constexpr int kThreadsPerBlock = 128;  // four columns a block
constexpr int kWarp = 32;

// Device helpers, templates so that `if constexpr` discards what a zero-point kind does not use
// (the kernel body itself is not a template: MLX generates it).
constexpr const char* kHeader = R"(
namespace mlx_ep_nbits {

// ZP: 0 none (ORT's default 2^(bits-1)), 1 packed uint8 [N, ceil(k_blocks * bits / 8)],
// 2 A's float type [N, k_blocks].
template <int BITS, int ZP, typename Z>
__device__ __forceinline__ float zero_point(const Z* zp, int64_t col, int kb, int blk) {
  if constexpr (ZP == 0) {
    return static_cast<float>(1 << (BITS - 1));
  } else if constexpr (ZP == 1) {
    constexpr int per_byte = 8 / BITS;
    const int64_t zb = (static_cast<int64_t>(kb) * BITS + 7) / 8;
    const uint32_t byte = zp[col * zb + blk / per_byte];
    return static_cast<float>((byte >> ((blk % per_byte) * BITS)) & ((1u << BITS) - 1));
  } else {
    return static_cast<float>(zp[col * kb + blk]);
  }
}

// 2^23 as a float's bits: OR-ing an integer q < 2^23 into its mantissa gives the float 2^23 + q
// exactly, so (2^23 + q) - (2^23 + z) is q - z exactly (both operands exact, Sterbenz) without
// the integer-to-float conversion, which runs at a sixteenth of an SM's FP32 rate on sm_80/sm_90
// (16 a clock): at 8 values a word that conversion alone bounded int4's decode kernel near
// 0.4 ms a TinyLlama step.
constexpr uint32_t kMagicBits = 0x4B000000u;
constexpr float kMagic = 8388608.f;

// One block of B's row `col` dequantized as ORT's CPU EP computes it: w = (q - zero_point) *
// scale in float32, for float zero points q * scale + (-(scale * zero_point)); each operation
// rounded on its own (no fused multiply-add in the weight).
template <int BITS, int ZP>
struct BlockWeights {
  float s, magic_z, neg_sz;  // magic_z: 2^23 + zero point (exact: integer zero points < 2^8)
  // Value v of a 32-bit word of the block (bits [BITS * v, BITS * (v + 1))).
  __device__ __forceinline__ float operator()(uint32_t word, int v) const {
    const uint32_t q = (word >> (BITS * v)) & ((1u << BITS) - 1);
    const float magic_q = __int_as_float(static_cast<int>(kMagicBits | q));
    if constexpr (ZP == 2) return __fadd_rn(__fmul_rn(__fsub_rn(magic_q, kMagic), s), neg_sz);
    return __fmul_rn(__fsub_rn(magic_q, magic_z), s);
  }
};

// A function, not a constructor: nvcc's host pass compiles constructor bodies and finds no
// __fmul_rn there.
template <int BITS, int ZP, typename T, typename Z>
__device__ __forceinline__ BlockWeights<BITS, ZP> block_weights(const T* scales, const Z* zp, int64_t col, int kb,
                                                                int blk) {
  const float s = static_cast<float>(scales[col * kb + blk]);
  const float z = zero_point<BITS, ZP>(zp, col, kb, blk);
  return {s, ZP == 2 ? 0.f : __fadd_rn(kMagic, z), -__fmul_rn(s, z)};
}

// Four 32-bit words of B, one 16-byte load.
struct alignas(16) Words4 {
  uint32_t w[4];
};

// The N values of x one word of B multiplies, in loads of up to 16 bytes.
template <typename T, int N>
struct alignas(sizeof(T) * N < 16 ? sizeof(T) * N : 16) XValues {
  T v[N];
};

// WIDE (the default; ONNXRUNTIME_EP_MLX_NBITS_WIDE=0 turns it off): each lane reads 16 bytes of B's
// row at a time (four words, lane l the l-th 16 bytes of each 512 a warp reads) where the row is a
// whole number of them and B 16-byte aligned, else the words one at a time; and, where K is a whole
// number of words and x aligned for it, a word's VALS values of x in loads of 16 bytes (one load
// where there were 8 for int4 and float16). The sums' order differs from the one-word loop's, not
// their terms.
template <int BITS, int BLOCK, int ROWS, int ZP, bool HAS_BIAS, bool WIDE, typename T, typename Z>
__device__ __forceinline__ void rows_product(const T* x, const uint8_t* b, const T* scales,
                                             const Z* zp, const T* bias, T* y, int K, int N, int kb) {
  constexpr int kWarp = 32;
  constexpr int VALS = 32 / BITS;  // values in one 32-bit word
  const int lane = threadIdx.x & (kWarp - 1);
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  if (col >= N) return;  // the whole warp: one column a warp
  const int words = kb * (BLOCK / VALS);
  const uint32_t* row = reinterpret_cast<const uint32_t*>(b) + col * words;
  float acc[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) acc[r] = 0.f;
  using Weights = BlockWeights<BITS, ZP>;
  // Word i of the row: its VALS values times x's columns i * VALS + v, with its block's weights.
  auto take = [&](uint32_t word, int i, const Weights& weight) {
    const int k0 = i * VALS;
#pragma unroll
    for (int v = 0; v < VALS; ++v) {
      const int k = k0 + v;
      if (k < K) {  // past K: the padding of the last block
        const float w = weight(word, v);
#pragma unroll
        for (int r = 0; r < ROWS; ++r) acc[r] = fmaf(static_cast<float>(x[r * K + k]), w, acc[r]);
      }
    }
  };
  // A word inside K (K a whole number of words): its weights first, then each row's x values in
  // one vector, each acc[r] summed in k's order as `take` sums it.
  auto take_vector = [&](uint32_t word, int i, const Weights& weight) {
    const int k0 = i * VALS;
    if (k0 >= K) return;  // the padding of the last block: whole words when K % VALS == 0
    float w[VALS];
#pragma unroll
    for (int v = 0; v < VALS; ++v) w[v] = weight(word, v);
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const XValues<T, VALS> xv = *reinterpret_cast<const XValues<T, VALS>*>(x + r * K + k0);
#pragma unroll
      for (int v = 0; v < VALS; ++v) acc[r] = fmaf(static_cast<float>(xv.v[v]), w[v], acc[r]);
    }
  };
  const bool wide = WIDE && words % 4 == 0 && (reinterpret_cast<unsigned long long>(b) & 15) == 0;
  const bool vector_x =
      K % VALS == 0 && reinterpret_cast<unsigned long long>(x) % alignof(XValues<T, VALS>) == 0;
  auto weights_of = [&](int word) {
    return block_weights<BITS, ZP>(scales, zp, col, kb, word * VALS / BLOCK);
  };
  // The row 16 bytes a lane, each of their four words to `take_word`. Where a block is a whole
  // number of 16 bytes (int4 blocks of 32 values and more) the four words share one block: its
  // weights are read and prepared once, not once a word (the same values either way).
  auto wide_loop = [&](auto take_word) {
    constexpr bool kShared = (BLOCK / VALS) % 4 == 0;
    const Words4* row4 = reinterpret_cast<const Words4*>(row);
#pragma unroll 2
    for (int i = lane; i < words / 4; i += kWarp) {
      const Words4 four = row4[i];
      if constexpr (kShared) {
        const Weights shared = weights_of(4 * i);
#pragma unroll
        for (int j = 0; j < 4; ++j) take_word(four.w[j], 4 * i + j, shared);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) take_word(four.w[j], 4 * i + j, weights_of(4 * i + j));
      }
    }
  };
  if (wide && vector_x) {
    wide_loop(take_vector);
  } else if (wide) {
    wide_loop(take);
  } else {
#pragma unroll 4
    for (int i = lane; i < words; i += kWarp) take(row[i], i, weights_of(i));
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
    for (int o = kWarp / 2; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
  if (lane != 0) return;
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    float v = acc[r];
    if constexpr (HAS_BIAS) v += static_cast<float>(bias[col]);
    y[r * N + col] = static_cast<T>(v);
  }
}

// A word's VALS values of the dequantized weight, stored in pieces of up to 16 bytes.
template <typename O, int N>
struct alignas(sizeof(O) * N < 16 ? sizeof(O) * N : 16) OutValues {
  O v[N];
};

template <typename V>
__device__ __forceinline__ bool aligned_for(const void* p) {
  return reinterpret_cast<unsigned long long>(p) % alignof(V) == 0;
}

// Past kNBitsKernelMaxRows rows (a prefill) B dequantized for a GEMM, one thread a 32-bit word.
// OUT: 0 the float32 weight [N, K]; 1 it rounded to T [N, K]; 2 hi and lo in T side by side
// [N, 2K], hi = w rounded and lo = (w - hi) rounded (quantized.cc, HalfPrefillProduct).
// WIDE (the default; ONNXRUNTIME_EP_MLX_NBITS_WIDE=0 turns it off): a word inside K writes its
// values in stores of up to 16 bytes where their address allows (a warp's stores then cover whole
// sectors; one value a store wrote 2 bytes of every 16 for int4's float16 hi / lo, and an int4
// TinyLlama's 512-token prefill spent 11.5 of its 19.3 ms here on the thirtieth session's H200);
// the same values.
template <int BITS, int BLOCK, int K, int ZP, int OUT, bool WIDE, typename T, typename Z, typename O>
__device__ __forceinline__ void dequantize(const uint8_t* b, const T* scales, const Z* zp, O* out, int N, int kb) {
  constexpr int VALS = 32 / BITS;
  const int words = kb * (BLOCK / VALS);
  const int64_t total = static_cast<int64_t>(N) * words;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += step) {
    const int64_t col = t / words;
    const int k0 = static_cast<int>(t - col * words) * VALS;
    const uint32_t word = reinterpret_cast<const uint32_t*>(b)[t];
    const BlockWeights<BITS, ZP> weight = block_weights<BITS, ZP>(scales, zp, col, kb, k0 / BLOCK);
    using Values = OutValues<O, VALS>;
    O* first = out + col * (OUT == 2 ? 2 * K : K) + k0;
    Values w_out, lo;  // w_out: the weight (OUT 0, 1) or its hi part (2); lo (2)
#pragma unroll
    for (int v = 0; v < VALS; ++v) {
      const float w = weight(word, v);
      w_out.v[v] = static_cast<O>(w);
      if constexpr (OUT == 2) lo.v[v] = static_cast<O>(__fsub_rn(w, static_cast<float>(w_out.v[v])));
    }
    if (WIDE && k0 + VALS <= K && aligned_for<Values>(first) && (OUT != 2 || aligned_for<Values>(first + K))) {
      *reinterpret_cast<Values*>(first) = w_out;
      if constexpr (OUT == 2) *reinterpret_cast<Values*>(first + K) = lo;
      continue;
    }
#pragma unroll
    for (int v = 0; v < VALS; ++v) {
      if (k0 + v >= K) break;  // the padding of the last block
      first[v] = w_out.v[v];
      if constexpr (OUT == 2) first[K + v] = lo.v[v];
    }
  }
}

}  // namespace mlx_ep_nbits
)";

constexpr const char* kSource = R"(
  mlx_ep_nbits::rows_product<BITS, BLOCK, ROWS, ZP, HAS_BIAS, WIDE>(
      x, b, scales, zp, bias, y, x_shape[x_ndim - 1], b_shape[0], b_shape[1]);
)";

constexpr const char* kDequantizeSource = R"(
  mlx_ep_nbits::dequantize<BITS, BLOCK, K, ZP, OUT, WIDE>(b, scales, zp, w, b_shape[0], b_shape[1]);
)";

constexpr int kDequantizeThreads = 256;
constexpr int64_t kDequantizeMaxThreads = int64_t{1} << 22;  // a grid-stride loop covers the rest

const mx::fast::CustomKernelFunction& DequantizeKernel() {
  static const mx::fast::CustomKernelFunction kernel = mx::fast::cuda_kernel(
      "mlx_ep_nbits_dequantize", {"b", "scales", "zp"}, {"w"}, kDequantizeSource, kHeader,
      /*ensure_row_contiguous=*/true);
  return kernel;
}

const mx::fast::CustomKernelFunction& RowsKernel() {
  static const mx::fast::CustomKernelFunction kernel =
      mx::fast::cuda_kernel("mlx_ep_nbits_rows", {"x", "b", "scales", "zp", "bias"}, {"y"}, kSource, kHeader,
                            /*ensure_row_contiguous=*/true);
  return kernel;
}

}  // namespace

const char* NBitsKernelSourceForTests() {
  static const std::string text = std::string(kHeader) + "\n// kernel body:\n" + kSource;
  return text.c_str();
}

const char* NBitsDequantizeSourceForTests() { return kDequantizeSource; }

bool NBitsWideLoads() {
  // The default since the thirty-second session's H100 split passed the file's parity with it
  // (six shards) and the prefill dequantization's three modes: the one-word loads (=0) had read an
  // int4 TinyLlama's 0.71 GB of weights at 0.6 TB/s (1,210 us a decode step, twenty-second
  // session), where MLX's fp16 gemv read its weights at 3.1 TB/s.
  static const bool on = !EnvOff(env::kNbitsWide);
  return on;
}

bool NBitsKernelWanted(int64_t rows, mx::Stream s) {
  static const bool enabled =
      !std::getenv(env::kNbitsKernel) || EnvFlag(env::kNbitsKernel) || EnvString(env::kNbitsKernel) == "all";
  return enabled && rows >= 1 && rows <= kNBitsKernelMaxRows && CudaKernelsAvailable(s);
}

bool NBitsDequantizeKernelWanted(mx::Stream s) {
  // The default since the sixteenth session's H200 run (TinyLlama int4 prefill of 512 tokens
  // 45.5 -> 26.0 ms); "1" keeps the decode kernel only, "0" neither.
  static const bool enabled = !std::getenv(env::kNbitsKernel) || EnvString(env::kNbitsKernel) == "all";
  return enabled && CudaKernelsAvailable(s);
}

mx::array NBitsDequantizeKernel(const mx::array& b, const mx::array& scales,
                                const std::optional<mx::array>& zero_points, int K, int bits, int block_size,
                                NBitsDequantized out, mx::Stream s) {
  const int N = b.shape(0);
  const int64_t words = static_cast<int64_t>(b.shape(1)) * block_size * bits / 32;
  const int zp_kind = !zero_points ? 0 : zero_points->dtype() == mx::uint8 ? 1 : 2;
  const mx::array zp = zero_points ? *zero_points : b;  // not read (see NBitsRowsKernel)
  const int threads = static_cast<int>(std::clamp<int64_t>(N * words, 1, kDequantizeMaxThreads));
  const mx::Shape shape = {N, out == NBitsDequantized::kSplit ? 2 * K : K};
  const mx::Dtype dtype = out == NBitsDequantized::kFloat32 ? mx::float32 : scales.dtype();
  return DequantizeKernel()({b, scales, zp}, {shape}, {dtype}, {threads, 1, 1}, {kDequantizeThreads, 1, 1},
                            {{"BITS", bits},
                             {"BLOCK", block_size},
                             {"K", K},
                             {"ZP", zp_kind},
                             {"OUT", static_cast<int>(out)},
                             {"WIDE", NBitsWideLoads()}},
                            std::nullopt, false, s)[0];
}

mx::array NBitsRowsKernel(const mx::array& x, const mx::array& b, const mx::array& scales,
                          const std::optional<mx::array>& zero_points, const std::optional<mx::array>& bias,
                          int bits, int block_size, mx::Stream s) {
  const int K = x.shape(-1);
  const int rows = static_cast<int>(x.size() / K);
  const int N = b.shape(0);
  const int zp_kind = !zero_points ? 0 : zero_points->dtype() == mx::uint8 ? 1 : 2;
  // MLX's kernels take a fixed list of inputs: an absent one is an array of its type already
  // there (no Full primitive a run), which the kernel never reads.
  const mx::array zp = zero_points ? *zero_points : b;
  const mx::array bias_or_zero = bias ? *bias : scales;
  mx::Shape out_shape = x.shape();
  out_shape.back() = N;
  return RowsKernel()({x, b, scales, zp, bias_or_zero}, {out_shape}, {x.dtype()}, {N * kWarp, 1, 1},
                      {kThreadsPerBlock, 1, 1},
                      {{"BITS", bits},
                       {"BLOCK", block_size},
                       {"ROWS", rows},
                       {"ZP", zp_kind},
                       {"HAS_BIAS", bias.has_value()},
                       {"WIDE", NBitsWideLoads()}},
                      std::nullopt, false, s)[0];
}

}  // namespace mlx_ep
