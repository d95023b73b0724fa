// GroupQueryAttention's rotary embedding for a prompt as one custom CUDA kernel
// (attention_gqa_prefill.h). A thread per output value: value d of row (b, s) of head `head` of
// the three outputs side by side (H query heads, then Hkv key heads, then Hkv value heads), read
// from its input row where it lies, rotated (Q and K) at positions[b, s], written at
// [b, head, s, d]. Numerics as the composed rotation (ApplyRotary): float32 products rounded to T.
#include "ops/attention_gqa_prefill.h"

#include <array>

#include "common/env.h"
#include "ops/attention_internal.h"
#include "ops/cuda_rotary.h"
#include "ops/fused_gpu_internal.h"
#include "runtime/device.h"

namespace mlx_ep {
namespace {

constexpr int kThreadsPerBlock = 256;

// The body MLX's cuda_kernel wraps. B and S come from positions' shape (one kernel for every
// prompt length); the rows' strides and offsets (QS/QO, KS/KO, VS/VO: packed QKV is one input read
// three times) and the heads are constants.
constexpr const char* kBody = R"(
  constexpr int HEADS = H + 2 * HKV;
  const int64_t rows = static_cast<int64_t>(pos_shape[0]) * pos_shape[1];
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * HEADS * D) return;
  const int d = static_cast<int>(i % D);
  const int head = static_cast<int>((i / D) % HEADS);
  const int64_t row = i / (static_cast<int64_t>(D) * HEADS);  // b * S + s
  const int S = pos_shape[1];
  const int64_t b = row / S, s = row % S;
  const T* c = reinterpret_cast<const T*>(cos_cache) + static_cast<int64_t>(pos[row]) * (ROT / 2);
  const T* sn = reinterpret_cast<const T*>(sin_cache) + static_cast<int64_t>(pos[row]) * (ROT / 2);
  if (head < H) {
    q_out[((b * H + head) * S + s) * D + d] =
        mlx_ep_cuda::rotated<ROT, INTERLEAVED>(q_in + row * QS + QO + head * D, c, sn, d);
  } else if (head < H + HKV) {
    const int h = head - H;
    k_out[((b * HKV + h) * S + s) * D + d] =
        mlx_ep_cuda::rotated<ROT, INTERLEAVED>(k_in + row * KS + KO + h * D, c, sn, d);
  } else {
    const int h = head - H - HKV;
    v_out[((b * HKV + h) * S + s) * D + d] = v_in[row * VS + VO + h * D + d];
  }
)";

const mx::fast::CustomKernelFunction& RotateKernel() {
  static const mx::fast::CustomKernelFunction kernel = mx::fast::cuda_kernel(
      "mlx_ep_gqa_prefill_rotate", {"q_in", "k_in", "v_in", "pos", "cos_cache", "sin_cache"},
      {"q_out", "k_out", "v_out"}, kBody, kRotarySource, /*ensure_row_contiguous=*/true);
  return kernel;
}

}  // namespace

bool PrefillRotateKernelWanted() {
  // The default since the thirtieth session's H200 (=0: MLX's operations): a 512-token TinyLlama
  // prompt's rotations took 22 launches and 201 us, where the composed form took 44 strided
  // launches and 1,067 us (the twenty-eighth session's H100).
  static const bool on = !EnvOff(env::kPrefillRotateKernel);
  return on && UseFusedGpuPaths();
}

std::optional<KernelLaunch> PlanPrefillRotate(const GqaPrefillRotateInputs& in) {
  const mx::array& q = in.query;
  const int D = in.head_size;
  if (q.ndim() != 3 || q.size() == 0 || D < 1 || in.kv_heads < 1 || in.heads % in.kv_heads != 0)
    return std::nullopt;
  const mx::Dtype t = q.dtype();
  const bool same_type = (!in.key || (in.key->dtype() == t && in.value && in.value->dtype() == t)) &&
                         in.cos_cache.dtype() == t && in.sin_cache.dtype() == t;
  if (!IsCudaKernelFloat(t) || !same_type) return std::nullopt;
  const int batch = q.shape(0), seq = q.shape(1);
  const mx::array& c = in.cos_cache;
  if (c.ndim() != 2 || in.sin_cache.shape() != c.shape() || c.shape(0) == 0 || c.shape(1) == 0 ||
      2 * c.shape(1) > D)
    return std::nullopt;
  if (in.positions.dtype() != mx::int32 || in.positions.shape() != mx::Shape{batch, seq}) return std::nullopt;
  const std::optional<std::array<int, 6>> strides =
      QkvRowStarts(q, in.key, in.value, in.heads, in.kv_heads, D);
  if (!strides) return std::nullopt;
  const int64_t values = static_cast<int64_t>(batch) * seq * (in.heads + 2 * in.kv_heads) * D;
  const std::optional<int> threads = WholeBlocks(values, kThreadsPerBlock);
  if (!threads) return std::nullopt;
  KernelLaunch plan{{q, in.key ? *in.key : q, in.value ? *in.value : q, in.positions, c, in.sin_cache},
                    {{batch, in.heads, seq, D}, {batch, in.kv_heads, seq, D}, {batch, in.kv_heads, seq, D}},
                    {t, t, t},
                    *threads,
                    kThreadsPerBlock,
                    {{"D", D},
                     {"ROT", 2 * c.shape(1)},
                     {"INTERLEAVED", in.interleaved},
                     {"H", in.heads},
                     {"HKV", in.kv_heads},
                     {"T", t}}};
  for (auto& constant : QkvRowConstants(*strides)) plan.constants.push_back(std::move(constant));
  return plan;
}

std::optional<GqaRotatedQkv> PrefillRotateByKernel(const GqaPrefillRotateInputs& in, mx::Stream s) {
  if (!CudaKernelsAvailable(s)) return std::nullopt;
  const std::optional<KernelLaunch> plan = PlanPrefillRotate(in);
  if (!plan) return std::nullopt;
  const std::vector<mx::array> outs = LaunchKernel(RotateKernel(), *plan, s);
  return GqaRotatedQkv{outs[0], outs[1], outs[2]};
}

namespace {

// A thread per output value, in the output's order (b, s, h, d): read at [b, h, s, d], rounded to
// T once (as MLX's cast), zero where the row attends nothing. B and S from keep's shape.
constexpr const char* kHeadsLastBody = R"(
  const int S = keep_shape[1];
  const int64_t rows = static_cast<int64_t>(keep_shape[0]) * S;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * H * D) return;
  const int d = static_cast<int>(i % D);
  const int h = static_cast<int>((i / D) % H);
  const int64_t row = i / (static_cast<int64_t>(D) * H);  // b * S + s
  const int64_t b = row / S, s = row % S;
  out[i] = keep[row] ? static_cast<T>(y[((b * H + h) * S + s) * D + d]) : static_cast<T>(0.f);
)";

const mx::fast::CustomKernelFunction& HeadsLastKernel() {
  static const mx::fast::CustomKernelFunction kernel = mx::fast::cuda_kernel(
      "mlx_ep_gqa_heads_last", {"y", "keep"}, {"out"}, kHeadsLastBody, "", /*ensure_row_contiguous=*/true);
  return kernel;
}

}  // namespace

bool HeadsLastKernelWanted() {
  // The default since the thirty-second session's H100 run: its GPU test passed, and a 512-token
  // TinyLlama fp16 prefill's 22 launches took 112 us where MLX's select took 501 (thirty-first).
  static const bool on = !EnvOff(env::kHeadsLastKernel);
  return on && UseFusedGpuPaths();
}

std::optional<KernelLaunch> PlanHeadsLast(const mx::array& y, const mx::array& keep, mx::Dtype t) {
  if (y.ndim() != 4 || y.size() == 0 || !IsCudaKernelFloat(y.dtype()) || !IsCudaKernelFloat(t))
    return std::nullopt;
  const int batch = y.shape(0), heads = y.shape(1), seq = y.shape(2), D = y.shape(3);
  if (keep.dtype() != mx::bool_ || keep.shape() != mx::Shape{batch, seq}) return std::nullopt;
  const std::optional<int> threads = WholeBlocks(static_cast<int64_t>(y.size()), kThreadsPerBlock);
  if (!threads) return std::nullopt;
  KernelLaunch plan;
  plan.inputs = {y, keep};
  plan.output_shapes = {{batch, seq, heads, D}};
  plan.output_dtypes = {t};
  plan.threads = *threads;
  plan.per_block = kThreadsPerBlock;
  plan.constants = {{"H", heads}, {"D", D}, {"T", t}};
  return plan;
}

std::optional<mx::array> HeadsLastByKernel(const mx::array& y, const mx::array& keep, mx::Dtype t,
                                           mx::Stream s) {
  if (!CudaKernelsAvailable(s)) return std::nullopt;
  const std::optional<KernelLaunch> plan = PlanHeadsLast(y, keep, t);
  if (!plan) return std::nullopt;
  return LaunchKernel(HeadsLastKernel(), *plan, s)[0];
}

std::string GqaHeadsLastSourceForTests() { return std::string("// kernel body:\n") + kHeadsLastBody; }

std::string GqaPrefillRotateSourceForTests() {
  return std::string(kRotarySource) + "\n// kernel body:\n" + kBody;
}

}  // namespace mlx_ep
