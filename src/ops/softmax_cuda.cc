// (Log)Softmax over a row as one MLX custom CUDA kernel (softmax_cuda.h).
//
// What it computes is what normalization.cc's TranslateSoftmax composes, step for step: the row's
// max (exact in any order), x - max, exp (expf, as MLX's own Exp: MLX compiles custom kernels
// without fast math), the sum of e in float32 and the division (IEEE, no fast math). The float16
// function body rounds x - max, e and the sum to float16 as ONNX's body does; each of those is one
// float32 operation on float16 values rounded once more to float16, which gives the correctly
// rounded float16 result (a float32 difference or quotient of two float16 values never lands on a
// float16 rounding tie it was not already on), as MLX's float16 subtract and divide do. Only the
// sum's order differs from the composed form's (a block's tree here, cuda_block_reduce.h; MLX's
// row reduction there): float32 rounding, below a float16 ulp and within the float32 paths'
// tolerance.
//
// When the row's input is attention's scores, (s / k or s * k) + mask (softmax_scores.h, as the
// CPU's softmax primitive reads them), the kernel reads s, k and the mask where they are (the mask
// at its own shape, broadcast by index) and rounds each step to T as MLX's ops do (float16's
// s / k in float32 rounded once, as arithmetic.cc divides): the compiled kernel of those ops, a
// strided one with BERT's [B, 1, 1, S] mask (12 launches, 280 us of BERT-base's GPU time on the
// twenty-second session's H100 timeline), is then not launched, unless something else reads x.
//
// Special values as the composed form: a NaN in the row makes the sum, so the whole row, NaN (the
// block max skips NaN, like fmaxf, but e of it is NaN); +inf in the row, or a row of -inf, gives
// inf - inf = NaN.
//
// Layout: one block a row (RowKernelThreads), thread t holding values t, t + TPB, ... of the row
// in registers (up to PER <= 16 of them: the block size's longest row), so x is read once.
#include <climits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/env.h"
#include "mlx/ops.h"
#include "ops/cuda_block_reduce.h"
#include "ops/cuda_score_terms.h"
#include "ops/fused_gpu_internal.h"
#include "ops/softmax_cuda.h"
#include "ops/softmax_scores.h"
#include "runtime/device.h"

namespace mlx_ep {
namespace {

// MLX passes a custom kernel's shapes as arrays of MAX_NDIM (10 in 0.32) and throws past it.
constexpr size_t kMaxShapeDims = 10;

constexpr const char* kHeader = R"(
namespace mlx_ep_softmax {

using mlx_ep_scores::rounded;

// Where row `row` of x's rows (its last axis) starts in a row-major mask broadcast to x's shape
// (the mask's dims aligned with x's last ones; a dim of 1 repeats).
template <typename S>
__device__ __forceinline__ int64_t mask_row_offset(int64_t row, const S& x_shape, int x_ndim, const S& mask_shape,
                                                  int mask_ndim) {
  int64_t offset = 0, stride = mask_shape[mask_ndim - 1];
  for (int d = x_ndim - 2, m = mask_ndim - 2; d >= 0 && m >= 0; --d, --m) {
    const int64_t i = row % x_shape[d];
    row /= x_shape[d];
    if (mask_shape[m] != 1) offset += i * stride;
    stride *= mask_shape[m];
  }
  return offset;
}

// Row blockIdx.x of x (s, when the scores' terms are fused: SCALE 1 s / factor, 2 s * factor, then
// + mask when MASK; mask_row its row of the mask, mask_step 0 where the mask has one value a row),
// each of those steps rounded to T as MLX's ops round it; then the (Log)Softmax. Rows of N <= PER *
// TPB values.
template <int PER, int TPB, bool LOG, bool BODY16, int SCALE, bool MASK, typename T>
__device__ void row_softmax(const T* x, int N, const T* factor, const T* mask_row, int mask_step, T* y) {
  static_assert(!(LOG && BODY16), "the float16 body is Softmax's");
  __shared__ float partial[TPB / 32];
  const int64_t row = blockIdx.x;
  const int tid = threadIdx.x;
  const float lowest = mlx_ep_cuda::negative_infinity();
  const float f = SCALE != 0 ? static_cast<float>(factor[0]) : 1.f;
  float v[PER];
  float local_max = lowest;
  for (int k = 0; k < PER; ++k) {
    const int i = tid + k * TPB;
    v[k] = lowest;
    if (i >= N) continue;
    float a = static_cast<float>(x[row * N + i]);
    a = mlx_ep_scores::scaled_masked<T, SCALE, MASK>(a, f, mask_row, mask_step, i);
    v[k] = a;
    local_max = fmaxf(local_max, a);
  }
  const float m = mlx_ep_cuda::block_reduce<true>(local_max, partial);
  float local_sum = 0.f;
  for (int k = 0; k < PER; ++k) {
    if (tid + k * TPB >= N) continue;
    float shifted = __fsub_rn(v[k], m);
    if constexpr (BODY16) shifted = rounded<T>(shifted);
    float e = expf(shifted);
    if constexpr (BODY16) e = rounded<T>(e);
    v[k] = LOG ? shifted : e;
    local_sum += e;
  }
  float total = mlx_ep_cuda::block_reduce<false>(local_sum, partial);
  if constexpr (BODY16) total = rounded<T>(total);
  const float log_total = LOG ? logf(total) : 0.f;
  for (int k = 0; k < PER; ++k) {
    const int i = tid + k * TPB;
    if (i < N) y[row * N + i] = static_cast<T>(LOG ? __fsub_rn(v[k], log_total) : __fdiv_rn(v[k], total));
  }
}

}  // namespace mlx_ep_softmax
)";

// The body MLX's cuda_kernel wraps: inputs x (or s), factor and mask (placeholders where SCALE or
// MASK say they are absent; MLX passes x's and the mask's shapes), output y. The row's length is
// read from x's shape, not made a constant: MLX compiles a custom kernel once per process and set
// of constants (NVRTC, ~1 s, no disk cache: mlx/backend/cuda/custom_kernel.cpp), and attention's
// rows grow by one every decode step of a model whose KV cache grows, or change with a prompt's
// length.
constexpr const char* kSource = R"(
  const int N = x_shape[x_ndim - 1];
  const auto* mask_row = mask;
  int mask_step = 0;
  if (MASK) {
    mask_row += mlx_ep_softmax::mask_row_offset(blockIdx.x, x_shape, x_ndim, mask_shape, mask_ndim);
    mask_step = mask_shape[mask_ndim - 1] != 1;
  }
  mlx_ep_softmax::row_softmax<PER, TPB, LOG, BODY16, SCALE, MASK>(x, N, factor, mask_row, mask_step, y);
)";

const std::string& Header() {
  static const std::string text = std::string(kBlockReduceSource) + kScoreTermsSource + kHeader;
  return text;
}

const mx::fast::CustomKernelFunction& SoftmaxKernel() {
  static const mx::fast::CustomKernelFunction kernel = mx::fast::cuda_kernel(
      "mlx_ep_row_softmax", {"x", "factor", "mask"}, {"y"}, kSource, Header(), /*ensure_row_contiguous=*/true);
  return kernel;
}

/** A launch of the kernel as RowSoftmaxLaunchOf tells it: the output's primitive, held weakly
 *  (a trace's graph lives as long as its compiled function), the scores' terms and the body. */
struct Launched {
  std::weak_ptr<mx::Primitive> primitive;
  ScoreTerms terms;
  bool log;
  bool float16_body;
};

std::mutex launched_mutex;
std::vector<Launched> launched;  // under launched_mutex

/** Records `y`'s launch for RowSoftmaxLaunchOf (only where its reader is on). */
void RecordLaunch(const mx::array& y, const ScoreTerms& terms, const RowSoftmaxInputs& in) {
  static const bool wanted = EnvFlag(env::kHeadsAttention);
  if (!wanted) return;
  std::lock_guard<std::mutex> lock(launched_mutex);
  std::erase_if(launched, [](const Launched& l) { return l.primitive.expired(); });
  launched.push_back({y.primitive_ptr(), terms, in.log, in.float16_body});
}

}  // namespace

std::optional<RowSoftmaxLaunch> RowSoftmaxLaunchOf(const mx::array& y) {
  if (!y.has_primitive()) return std::nullopt;
  const mx::Primitive* p = &y.primitive();
  std::lock_guard<std::mutex> lock(launched_mutex);
  for (const Launched& l : launched)
    if (const std::shared_ptr<mx::Primitive> held = l.primitive.lock(); held.get() == p)
      return RowSoftmaxLaunch{y.inputs(), l.terms, l.log, l.float16_body};
  return std::nullopt;
}

std::optional<KernelLaunch> PlanRowSoftmax(const RowSoftmaxInputs& in, mx::StreamOrDevice s,
                                           ScoreTerms* terms_out) {
  const mx::array& x = in.x;
  if (x.ndim() == 0 || x.size() == 0 || !IsCudaKernelFloat(x.dtype())) return std::nullopt;
  if (in.float16_body && (in.log || x.dtype() != mx::float16)) return std::nullopt;
  const int n = x.shape(-1);
  if (n < 1 || n > kMaxKernelRow || x.ndim() > kMaxShapeDims) return std::nullopt;
  const int tpb = RowKernelThreads(n);
  const int64_t rows = static_cast<int64_t>(x.size()) / n;
  if (rows * tpb > INT_MAX) return std::nullopt;
  // The scores' terms where x is made of them (softmax_scores.h): read in the kernel's pass, not
  // evaluated (a broadcast mask made MLX's compiled kernel of them a strided one).
  ScoreTerms terms;
  std::vector<mx::array> scores = ScoreInputs(x, terms);
  KernelLaunch launch;
  size_t next = 1;
  const mx::array factor = terms.scale != ScoreTerms::Scale::kNone ? scores[next++] : scores[0];
  mx::array mask = terms.mask ? scores[next] : scores[0];
  // MLX passes the shapes of arrays of rank > 0 only (the mask broadcasts to x: its rank is at most x's)
  if (mask.ndim() == 0) mask = mx::reshape(mask, {1}, s);
  launch.inputs = {scores[0], factor, mask};
  launch.output_shapes = {x.shape()};
  launch.output_dtypes = {x.dtype()};
  launch.threads = static_cast<int>(rows * tpb);
  launch.per_block = tpb;
  launch.constants = {{"PER", RowKernelValuesPerThread(tpb)},
                      {"TPB", tpb},
                      {"LOG", in.log},
                      {"BODY16", in.float16_body},
                      {"SCALE", ScaleConstant(terms.scale)},
                      {"MASK", terms.mask}};
  if (terms_out) *terms_out = terms;
  return launch;
}

bool RowSoftmaxKernelWanted(mx::Stream s) {
  // The default since the thirty-second session: the normalization parity passed with it on an
  // H100 (twenty-fourth session), and BERT-base fp16 8 x 128 ran 3.54 ms against the composed
  // form's 4.41 (medians of two rounds, one H100 run); =0 keeps the composed form.
  static const bool enabled = !EnvOff(env::kSoftmaxKernel);
  return enabled && UseFusedGpuPaths() && CudaKernelsAvailable(s);
}

std::optional<mx::array> RowSoftmaxByKernel(const RowSoftmaxInputs& in, mx::Stream s) {
  if (!RowSoftmaxKernelWanted(s)) return std::nullopt;
  ScoreTerms terms;
  std::optional<KernelLaunch> plan = PlanRowSoftmax(in, s, &terms);
  if (!plan) return std::nullopt;
  mx::array y = LaunchKernel(SoftmaxKernel(), *plan, s)[0];
  RecordLaunch(y, terms, in);
  return y;
}

const char* RowSoftmaxKernelSourceForTests() {
  static const std::string text = Header() + "\n// kernel body:\n" + kSource;
  return text.c_str();
}

}  // namespace mlx_ep
