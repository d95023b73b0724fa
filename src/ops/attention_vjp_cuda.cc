// The tiled AttentionVJP pullback as two MLX custom CUDA kernels (mx::fast::cuda_kernel), a
// FlashAttention-2 style backward that never materialises the [Sq, Sk] score matrix:
//
//  1. rows: one warp per query row (b, h, i). Pass A streams over the keys with an online softmax:
//     the row's logsumexp (lse) and, for the recompute form, Y = sum_j P_ij V_j; then
//     delta_i = G_i . Y_i (Y the input for AttentionVJP_, the recomputed one for the Recompute
//     form). Pass B streams over the keys again: dQ_i = scale sum_j P_ij (G_i . V_j - delta_i) K_j.
//  2. keys: one warp per key row (b, hk, j), streaming over the query heads of its group and their
//     query rows: dV_j = sum P_ij G_i, dK_j = scale sum P_ij (G_i . V_j - delta_i) Q_i. Each key row
//     is owned by one warp, so no atomics are needed.
//
// P_ij = exp(scale Q_i . K_j + bias_ij - lse_i) where key j is allowed (bias != -inf, and j <= i
// when causal: ONNX's top-left alignment); a row that allows no key has lse = -inf and contributes
// nothing (zero dQ, and skipped by the keys kernel). Lane l of a warp holds features l, l + 32, ...
// (D <= 256: 8 per lane); dot products are warp shuffle sums. Everything is float32.
//
// The kernels' source depends on nothing but the input dtypes (all float32): sizes come from the
// arrays' shapes and the node's constants (causal, has Y, dQ wanted, scale) from a small int32
// input, so MLX compiles each kernel once per process, whatever the shapes, masks or widths.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>

#include "mlx/backend/cuda/cuda.h"
#include "ops/attention_vjp_internal.h"
#include "runtime/device.h"

namespace mlx_ep::attention_vjp {
namespace {

constexpr int kWarp = 32;
constexpr int kThreadsPerBlock = 128;

/** Device helpers shared by both kernels (compiled with --device-as-default-execution-space). */
constexpr const char* kHeader = R"(
namespace mlx_ep_vjp {

constexpr int kWarp = 32;
constexpr int kPerLane = 8;  // features per lane: D <= 256

__device__ inline float neg_inf() { return -__int_as_float(0x7f800000); }

__device__ inline float warp_sum(float x) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffff, x, offset);
  return x;
}

// Lane `lane`'s features of row `row` (D floats), zero past D.
__device__ inline void load_row(const float* row, int d, int lane, float* out) {
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const int f = lane + kWarp * t;
    out[t] = f < d ? row[f] : 0.f;
  }
}

__device__ inline float dot_row(const float* a, const float* row, int d, int lane) {
  float partial = 0.f;
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const int f = lane + kWarp * t;
    if (f < d) partial += a[t] * row[f];
  }
  return warp_sum(partial);
}

// The additive mask of score (b, h, i, j): mask is 4-D, row-contiguous, each dim 1 (broadcast) or
// full; its last axis may be shorter than Sk (keys past it are masked) unless it is 1.
__device__ inline float mask_bias(const float* mask, const mlx::core::cu::Shape& ms, int b, int h, int i, int j) {
  const int mk = ms[3];
  if (mk != 1 && j >= mk) return neg_inf();
  const long long bb = ms[0] == 1 ? 0 : b, hh = ms[1] == 1 ? 0 : h, ii = ms[2] == 1 ? 0 : i;
  const long long jj = mk == 1 ? 0 : j;
  return mask[((bb * ms[1] + hh) * ms[2] + ii) * mk + jj];
}

}  // namespace mlx_ep_vjp
)";

/** Inputs q, k, v, g, y, mask, params; outputs dq [B, Hq, Sq, D], lse_out, delta_out [B, Hq, Sq]. */
constexpr const char* kRowsSource = R"(
  using namespace mlx_ep_vjp;
  const int batch = q_shape[0], q_heads = q_shape[1], q_len = q_shape[2], d = q_shape[3];
  const int kv_heads = k_shape[1], k_len = k_shape[2];
  const bool causal = params[0] != 0, has_y = params[1] != 0, want_dq = params[2] != 0;
  const float scale = __int_as_float(params[3]);
  const long long row = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= static_cast<long long>(batch) * q_heads * q_len) return;  // whole warps leave
  const int i = row % q_len, h = (row / q_len) % q_heads, b = row / (static_cast<long long>(q_len) * q_heads);
  const long long kv_offset = (static_cast<long long>(b) * kv_heads + h / (q_heads / kv_heads)) * k_len * d;
  const float* keys = k + kv_offset;
  const float* values = v + kv_offset;
  float qv[kPerLane], gv[kPerLane], yv[kPerLane], acc[kPerLane];
  load_row(q + row * d, d, lane, qv);
  load_row(g + row * d, d, lane, gv);
  const int stop = causal ? min(k_len, i + 1) : k_len;

  // Pass A: the row's max and sum of exponentials (online), and Y when it is not an input.
  float m = neg_inf(), l = 0.f;
  for (int t = 0; t < kPerLane; ++t) yv[t] = 0.f;
  for (int j = 0; j < stop; ++j) {
    const float bias = mask_bias(mask, mask_shape, b, h, i, j);
    if (bias == neg_inf()) continue;
    const float s = scale * dot_row(qv, keys + static_cast<long long>(j) * d, d, lane) + bias;
    const float m_new = fmaxf(m, s);
    const float correction = expf(m - m_new), p = expf(s - m_new);
    l = l * correction + p;
    if (!has_y) {
      for (int t = 0; t < kPerLane; ++t) {
        const int f = lane + kWarp * t;
        yv[t] = yv[t] * correction + (f < d ? p * values[static_cast<long long>(j) * d + f] : 0.f);
      }
    }
    m = m_new;
  }
  const bool attends = l > 0.f;
  const float lse = attends ? m + logf(l) : neg_inf();
  if (has_y) {
    load_row(y + row * d, d, lane, yv);
  } else {
    for (int t = 0; t < kPerLane; ++t) yv[t] = attends ? yv[t] / l : 0.f;
  }
  float partial = 0.f;
  for (int t = 0; t < kPerLane; ++t) partial += gv[t] * yv[t];
  const float delta = attends ? warp_sum(partial) : 0.f;

  // Pass B: dQ.
  for (int t = 0; t < kPerLane; ++t) acc[t] = 0.f;
  if (attends && want_dq) {
    for (int j = 0; j < stop; ++j) {
      const float bias = mask_bias(mask, mask_shape, b, h, i, j);
      if (bias == neg_inf()) continue;
      const float* key = keys + static_cast<long long>(j) * d;
      const float p = expf(scale * dot_row(qv, key, d, lane) + bias - lse);
      const float ds = p * (dot_row(gv, values + static_cast<long long>(j) * d, d, lane) - delta);
      for (int t = 0; t < kPerLane; ++t) {
        const int f = lane + kWarp * t;
        if (f < d) acc[t] += ds * key[f];
      }
    }
  }
  for (int t = 0; t < kPerLane; ++t) {
    const int f = lane + kWarp * t;
    if (f < d) dq[row * d + f] = scale * acc[t];
  }
  if (lane == 0) {
    lse_out[row] = lse;
    delta_out[row] = delta;
  }
)";

/** Inputs q, k, v, g, mask, lse, delta, params; outputs dk, dv [B, Hk, Sk, D]. */
constexpr const char* kKeysSource = R"(
  using namespace mlx_ep_vjp;
  const int batch = q_shape[0], q_heads = q_shape[1], q_len = q_shape[2], d = q_shape[3];
  const int kv_heads = k_shape[1], k_len = k_shape[2];
  const int groups = q_heads / kv_heads;
  const bool causal = params[0] != 0;
  const float scale = __int_as_float(params[3]);
  const long long row = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= static_cast<long long>(batch) * kv_heads * k_len) return;  // whole warps leave
  const int j = row % k_len, hk = (row / k_len) % kv_heads, b = row / (static_cast<long long>(k_len) * kv_heads);
  float kv[kPerLane], vv[kPerLane], dk_acc[kPerLane], dv_acc[kPerLane];
  load_row(k + row * d, d, lane, kv);
  load_row(v + row * d, d, lane, vv);
  for (int t = 0; t < kPerLane; ++t) dk_acc[t] = dv_acc[t] = 0.f;
  for (int r = 0; r < groups; ++r) {
    const int h = hk * groups + r;
    const long long head = static_cast<long long>(b) * q_heads + h;
    // Query i attends key j only when j <= i (causal).
    for (int i = causal ? j : 0; i < q_len; ++i) {
      const float row_lse = lse[head * q_len + i];
      if (row_lse == neg_inf()) continue;  // a fully masked row: no gradient
      const float bias = mask_bias(mask, mask_shape, b, h, i, j);
      if (bias == neg_inf()) continue;
      const float* query = q + (head * q_len + i) * d;
      const float* cotangent = g + (head * q_len + i) * d;
      const float p = expf(scale * dot_row(kv, query, d, lane) + bias - row_lse);
      const float ds = p * (dot_row(vv, cotangent, d, lane) - delta[head * q_len + i]);
      for (int t = 0; t < kPerLane; ++t) {
        const int f = lane + kWarp * t;
        if (f < d) {
          dv_acc[t] += p * cotangent[f];
          dk_acc[t] += ds * query[f];
        }
      }
    }
  }
  for (int t = 0; t < kPerLane; ++t) {
    const int f = lane + kWarp * t;
    if (f < d) {
      dk[row * d + f] = scale * dk_acc[t];
      dv[row * d + f] = dv_acc[t];
    }
  }
)";

const mx::fast::CustomKernelFunction& RowsKernel() {
  static const mx::fast::CustomKernelFunction kernel = mx::fast::cuda_kernel(
      "mlx_ep_attention_vjp_rows", {"q", "k", "v", "g", "y", "mask", "params"},
      {"dq", "lse_out", "delta_out"}, kRowsSource, kHeader, /*ensure_row_contiguous=*/true);
  return kernel;
}

const mx::fast::CustomKernelFunction& KeysKernel() {
  static const mx::fast::CustomKernelFunction kernel = mx::fast::cuda_kernel(
      "mlx_ep_attention_vjp_keys", {"q", "k", "v", "g", "mask", "lse", "delta", "params"}, {"dk", "dv"},
      kKeysSource, kHeader, /*ensure_row_contiguous=*/true);
  return kernel;
}

/** The mask as a 4-D float32 bias (-inf where masked; 0 everywhere for mask kind 0). */
mx::array BiasOf(const Contract& c, const HeadTensors& t, mx::Stream s) {
  if (c.mask == MaskKind::kNone) return mx::zeros({1, 1, 1, 1}, mx::float32, s);
  mx::array bias = c.mask == MaskKind::kBool ? mx::where(*t.mask, mx::array(0.f), mx::array(-INFINITY), s)
                                             : mx::astype(*t.mask, mx::float32, s);
  mx::Shape shape = bias.shape();
  while (shape.size() < 4) shape.insert(shape.begin(), 1);
  return mx::reshape(bias, shape, s);
}

mx::array Params(const Contract& c, bool has_y, mx::Stream s) {
  int32_t scale_bits;
  std::memcpy(&scale_bits, &c.scale, sizeof scale_bits);
  const bool want_dq = std::find(c.outputs.begin(), c.outputs.end(), 0) != c.outputs.end();
  const std::vector<int32_t> values = {c.causal ? 1 : 0, has_y ? 1 : 0, want_dq ? 1 : 0, scale_bits};
  return mx::array(values.begin(), {static_cast<int>(values.size())}, mx::int32);
}

/** Threads for one warp per row, or nullopt when that overflows the launch's int grid. */
std::optional<int> WarpThreads(int64_t rows) {
  if (rows > std::numeric_limits<int>::max() / kWarp) return std::nullopt;
  return static_cast<int>(rows * kWarp);
}

}  // namespace

bool KernelPullbackFits(const HeadTensors& t) {
  const int64_t query_rows = static_cast<int64_t>(t.q.shape(0)) * t.q.shape(1) * t.q.shape(2);
  const int64_t key_rows = static_cast<int64_t>(t.k.shape(0)) * t.k.shape(1) * t.k.shape(2);
  return WarpThreads(query_rows) && WarpThreads(key_rows) && t.q.shape(3) <= 256;
}

std::vector<mx::array> KernelPullback(const Contract& c, const HeadTensors& t, mx::Stream s) {
  const mx::array bias = BiasOf(c, t, s);
  const mx::array params = Params(c, t.y.has_value(), s);
  const mx::array y = t.y ? *t.y : mx::zeros({1}, mx::float32, s);
  const mx::Shape rows_shape = {t.q.shape(0), t.q.shape(1), t.q.shape(2)};
  const int query_threads = *WarpThreads(static_cast<int64_t>(rows_shape[0]) * rows_shape[1] * rows_shape[2]);
  const int key_threads = *WarpThreads(static_cast<int64_t>(t.k.shape(0)) * t.k.shape(1) * t.k.shape(2));
  const std::vector<mx::array> rows =
      RowsKernel()({t.q, t.k, t.v, t.g, y, bias, params}, {t.q.shape(), rows_shape, rows_shape},
                   {mx::float32, mx::float32, mx::float32}, {query_threads, 1, 1}, {kThreadsPerBlock, 1, 1},
                   {}, std::nullopt, false, s);
  const std::vector<mx::array> keys = KeysKernel()(
      {t.q, t.k, t.v, t.g, bias, rows[1], rows[2], params}, {t.k.shape(), t.k.shape()},
      {mx::float32, mx::float32}, {key_threads, 1, 1}, {kThreadsPerBlock, 1, 1}, {}, std::nullopt, false, s);
  return {rows[0], keys[0], keys[1]};
}

std::string KernelBuildError(mx::Stream s) {
  // One tiny problem through both kernels, once per process: the JIT compile happens here, where
  // a failure can name the node, rather than inside the partition's evaluation. The source does
  // not depend on the shapes, so every later use hits MLX's kernel cache.
  static std::mutex mu;
  static std::map<mx::Device::DeviceType, std::string> errors;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = errors.find(s.device.type); it != errors.end()) return it->second;
  std::string& error = errors[s.device.type];
  try {
    Contract c;
    c.scale = 1.f;
    c.outputs = {0, 1, 2};
    const mx::array x = mx::ones({1, 1, 1, 8}, mx::float32, s);
    const HeadTensors t{x, x, x, x, std::nullopt, std::nullopt};
    std::vector<mx::array> grads = KernelPullback(c, t, s);
    mx::eval(grads);
    // One key, Q = K = V = G = 1: P = 1, Y = 1, delta = 8, dP = 8, so dQ = dK = 0 and dV = 1.
    const bool ok = mx::all(mx::equal(grads[2], mx::array(1.f), s), s).item<bool>() &&
                    !mx::any(mx::not_equal(grads[0], mx::array(0.f), s), s).item<bool>();
    error = ok ? "" : "the CUDA AttentionVJP kernels give wrong results on a one-key problem";
  } catch (const std::exception& e) {
    error = std::string("the CUDA AttentionVJP kernels failed to build: ") + e.what();
  }
  return error;
}

}  // namespace mlx_ep::attention_vjp
