// MatMulNBits as a custom MLX primitive for the CPU stream (quantized_cpu.h).
//
// Why a primitive: MLX's CPU quantized_matmul is scalar on x86 (its CPU kernels are Simd<T, 1>)
// and ORT's bytes would need dequantizing to float32 on every run for a BLAS GEMM; the kernels in
// quantized_cpu_kernels.cc read ORT's packed weights in place with AVX-512 / AVX2. The primitive
// is an ordinary node of the traced graph, so mx::compile keeps the partition in one piece; on
// GPU streams quantized.cc keeps composing MLX ops and never creates it (eval_gpu refuses).
// More than kKernelMaxRows rows of A (float A) take PanelGemm: panels of columns dequantized into
// a buffer of ~8 MB, each multiplied by one BLAS GEMM (OpenBLAS through the EP's shim, blas.h).
// Without the shim the same primitive class, without A, dequantizes B to float32 [N, padded K]
// (Dequantize) for an mx::matmul. Nothing is repacked or cached: every run reads B as given.
//
// Threads: the output columns are split over a small pool (one thread per CPU, as the BLAS
// default, blas/blas.h) whose workers sleep on a condition variable between calls: spinning
// workers would take the cores ORT's own kernels need (src/blas/blas_pool.c says more).
#include "ops/quantized_cpu.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "blas/blas.h"
#include "common/env.h"
#include "mlx/primitives.h"
#include "ops/cpu_primitive.h"
#include "runtime/mlx_thread.h"

namespace mlx_ep {
namespace nbits_cpu {
namespace {

/** Runs batches of tasks on sleeping workers and the calling thread. */
class ColumnPool {
 public:
  explicit ColumnPool(int threads) : threads_(threads) {
    for (int i = 1; i < threads; ++i) std::thread([this] { Work(); }).detach();
  }
  int threads() const { return threads_; }

  /** fn(0) ... fn(tasks - 1), on the workers and this thread. One batch at a time: a second
   *  caller (another MLX CPU stream) runs its tasks itself rather than wait. */
  void Run(int tasks, const std::function<void(int)>& fn) {
    std::unique_lock<std::mutex> busy(dispatch_, std::try_to_lock);
    if (!busy.owns_lock()) {
      for (int t = 0; t < tasks; ++t) fn(t);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = &fn;
      tasks_ = tasks;
      next_ = 0;
      unfinished_ = tasks;
      ++generation_;
      published_.store(generation_, std::memory_order_release);
    }
    wake_.notify_all();
    RunTasks();
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return unfinished_ == 0; });
    fn_ = nullptr;
  }

  static ColumnPool& Get() {
    static ColumnPool* pool = new ColumnPool(PoolThreads());  // never destroyed: no exit-order issue
    return *pool;
  }

 private:
  /** ONNXRUNTIME_EP_MLX_BLAS_THREADS when it is a count, else one per CPU (as the BLAS). */
  static int PoolThreads() {
    if (const char* v = std::getenv(env::kBlasThreads)) {
      char* end = nullptr;
      const long n = std::strtol(v, &end, 10);
      if (end != v && *end == '\0' && n >= 1 && n <= 1024) return static_cast<int>(n);
    }
    return std::max(1, DefaultBlasThreads());
  }

  void RunTasks() {
    for (;;) {
      const std::function<void(int)>* fn;
      int task;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!fn_ || next_ >= tasks_) return;
        fn = fn_;
        task = next_++;
      }
      (*fn)(task);
      std::lock_guard<std::mutex> lock(mu_);
      if (--unfinished_ == 0) done_.notify_all();
    }
  }

  /** Waits up to ONNXRUNTIME_EP_MLX_SPIN_US (default 0: not at all) for a batch after `seen`
   *  without sleeping. A decode step calls the pool a hundred times, 0.1-0.5 ms apart, and each
   *  sleep and wake-up through the condition variable costs tens of microseconds: with 200 us a
   *  Qwen2-0.5B int4 decode step took 36.8 ms instead of 41.9 (2 cores, alone). But a spinning
   *  worker takes a core from MLX's CPU stream thread: one-node MatMulNBits runs took 1.5x as
   *  long. So it is opt-in, like the hand-off's spin (runtime/mlx_thread.h). */
  void SpinFor(uint64_t seen) const {
    static const auto spin = std::chrono::microseconds(MlxThreadSpinMicros());
    if (spin.count() == 0) return;
    const auto until = std::chrono::steady_clock::now() + spin;
    while (published_.load(std::memory_order_acquire) == seen) {
      for (int i = 0; i < 64; ++i) Pause();
      if (std::chrono::steady_clock::now() >= until) return;
    }
  }

  static void Pause() {
#if defined(__x86_64__) || defined(_M_X64)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  void Work() {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (generation_ == seen) {
        lock.unlock();
        SpinFor(seen);
        lock.lock();
      }
      wake_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      lock.unlock();
      RunTasks();
      lock.lock();
    }
  }

  const int threads_;
  std::mutex dispatch_, mu_;
  std::condition_variable wake_, done_;
  const std::function<void(int)>* fn_ = nullptr;
  int tasks_ = 0, next_ = 0, unfinished_ = 0;
  uint64_t generation_ = 0;
  std::atomic<uint64_t> published_{0};  // generation_, read without the lock (SpinFor)
};

// Below this many multiply-adds one thread is faster than waking another (a wake-up costs
// tens of microseconds on a loaded machine).
constexpr int64_t kMinParallelWork = 1 << 19;

/** fn(n0, n1) over ranges of columns [begin, end) (multiples of 4 from begin) on the pool, or at
 *  once for small work. */
template <typename Fn>
void ForColumns(const Problem& p, int begin, int end, int64_t work, Fn fn) {
  ColumnPool& pool = ColumnPool::Get();
  const int columns = end - begin;
  const int threads = work < kMinParallelWork ? 1 : std::min(pool.threads(), std::max(1, columns / 16));
  if (threads == 1) return fn(begin, end);
  // A few tasks per thread evens out a thread that another process holds back.
  const int tasks = threads * 4;
  const int per_task = ((columns + tasks - 1) / tasks + 3) / 4 * 4;  // the kernels take 4 columns at a time
  pool.Run(tasks, [&](int t) {
    const int n0 = begin + t * per_task, n1 = std::min(end, n0 + per_task);
    if (n0 < n1) fn(n0, n1);
  });
}

/** Columns per panel of PanelGemm: about 8 MB of float32 weights (in L3 next to A; 2 MB panels
 *  measured slower at K=4864, the GEMM repacks A once per panel), at least 64 columns. */
int PanelColumns(int padded_k) {
  const int fit = (1 << 21) / padded_k / 16 * 16;
  return std::clamp(fit, 64, 1024);
}

/** y = x @ dequantize(B)^T (+ bias) for many rows: per panel of columns, the panel dequantized into
 *  a buffer this thread keeps (on the pool; work counted so that a panel always splits) and one
 *  BLAS GEMM into y's columns (OpenBLAS's threads).
 *  Unlike dequantizing all of B per run, the weights never make a round trip through memory. */
void PanelGemm(const Problem& p) {
  const NBitsShape& s = p.shape;
  const int panel = std::min(s.N, PanelColumns(p.padded_k));
  thread_local std::vector<float> buffer;  // MLX's CPU stream thread's: reused from run to run
  buffer.resize(static_cast<size_t>(panel) * p.padded_k);
  float* const w = buffer.data();  // the pool's workers write it too (their thread_local differs)
  for (int n0 = 0; n0 < s.N; n0 += panel) {
    const int n1 = std::min(s.N, n0 + panel);
    ForColumns(p, n0, n1, static_cast<int64_t>(n1 - n0) * p.padded_k * 4,
               [&](int a, int b) { DequantizeRows(p, a, b, w + static_cast<size_t>(a - n0) * p.padded_k); });
    SgemmRowsByColumns(p.M, n1 - n0, p.padded_k, p.x, p.padded_k, w, p.padded_k, p.y + n0, s.N);
  }
  if (!p.bias) return;
  for (int m = 0; m < p.M; ++m)
    for (int n = 0; n < s.N; ++n) p.y[static_cast<size_t>(m) * s.N + n] += p.bias[n];
}

struct Inputs {
  bool packed_zp = false, float_zp = false, bias = false;
  bool dequantize = false;  ///< no x: the output is dequantize(B) [N, padded K]
  bool operator==(const Inputs&) const = default;
};

/** y's shape for x [..., K]: [..., N]. x keeps its rank, so that a translation adds no Reshape
 *  on either side (each a node that every run evaluates). */
mx::Shape RowsByN(const mx::array& x, int n) {
  mx::Shape shape = x.shape();
  shape.back() = n;
  return shape;
}

/** The kernels' view of the primitive's inputs: [x,] b, scales, [zero points,] [bias]. */
Problem MakeProblem(const std::vector<mx::array>& in, const NBitsShape& s, Inputs has, bool with_x) {
  Problem p;
  p.shape = s;
  p.padded_k = s.k_blocks * s.block_size;
  size_t next = 0;
  if (with_x) {
    p.M = s.K > 0 ? static_cast<int>(in[next].size() / s.K) : 0;  // x is [..., K]: rows = the rest
    p.x = in[next++].data<float>();
  }
  p.b = in[next++].data<uint8_t>();
  p.scales = in[next++].data<float>();
  if (has.packed_zp) {
    p.zp_packed = in[next++].data<uint8_t>();
    p.zp_row_bytes = (s.k_blocks * s.bits + 7) / 8;
  } else if (has.float_zp) {
    p.zp_float = in[next++].data<float>();
  }
  if (has.bias) p.bias = in[next++].data<float>();
  return p;
}

void Compute(const std::vector<mx::array>& in, mx::array& out, const NBitsShape& s, Inputs has) {
  Problem p = MakeProblem(in, s, has, !has.dequantize);
  if (has.dequantize) {
    float* w = out.data<float>();
    return ForColumns(p, 0, s.N, static_cast<int64_t>(s.N) * p.padded_k / 4, [&](int n0, int n1) {
      DequantizeRows(p, n0, n1, w + static_cast<size_t>(n0) * p.padded_k);
    });
  }
  std::vector<float> x_buffer;
  const bool panels = !s.int8_a && p.M > kKernelMaxRows;
  PrepareX(p, x_buffer, panels);
  p.y = out.data<float>();
  if (panels) return PanelGemm(p);
  Int8A int8_a;
  if (s.int8_a) PrepareInt8A(p, int8_a);
  ForColumns(p, 0, s.N, static_cast<int64_t>(p.M) * s.N * p.padded_k,
             [&](int n0, int n1) { RunColumns(p, n0, n1); });
}

class MatMulNBitsCpu : public mx::UnaryPrimitive {
 public:
  MatMulNBitsCpu(mx::Stream stream, NBitsShape shape, Inputs has)
      : mx::UnaryPrimitive(stream), shape_(shape), has_(has) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    DispatchCpuKernel("MatMulNBitsCpu", stream(), inputs, out,
                      [shape = shape_, has = has_](const std::vector<mx::array>& in, mx::array& y) {
                        Compute(in, y, shape, has);
                      });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("MatMulNBitsCpu runs on the CPU only (GPU streams compose MLX ops instead)");
  }

  const char* name() const override { return has_.dequantize ? "DequantizeNBitsCpu" : "MatMulNBitsCpu"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    const auto& o = static_cast<const MatMulNBitsCpu&>(other);
    return shape_ == o.shape_ && has_ == o.has_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    if (has_.dequantize) return {{shape_.N, shape_.k_blocks * shape_.block_size}};
    return {RowsByN(inputs[0], shape_.N)};
  }

 private:
  NBitsShape shape_;
  Inputs has_;
};

}  // namespace

namespace {

/** The primitive's inputs after [x]: B, scales, zero points; flags in `has`. */
std::vector<mx::array> WeightInputs(const mx::array& b, const mx::array& scales,
                                    const std::optional<mx::array>& zero_points, Inputs& has) {
  std::vector<mx::array> inputs = {b, scales};
  if (zero_points) {
    has.packed_zp = zero_points->dtype() == mx::uint8;
    has.float_zp = !has.packed_zp;
    inputs.push_back(*zero_points);
  }
  return inputs;
}

}  // namespace

mx::array MatMulNBits(const mx::array& x, const mx::array& b, const mx::array& scales,
                      const std::optional<mx::array>& zero_points, const std::optional<mx::array>& bias,
                      const NBitsShape& shape, mx::Stream s) {
  Inputs has;
  std::vector<mx::array> inputs = {x};
  for (mx::array& a : WeightInputs(b, scales, zero_points, has)) inputs.push_back(std::move(a));
  if (bias) {
    has.bias = true;
    inputs.push_back(*bias);
  }
  // No Reshape around the primitive either (RowsByN): 218 more of those 2,566 primitives.
  return mx::array(RowsByN(x, shape.N), mx::float32, std::make_shared<MatMulNBitsCpu>(s, shape, has),
                   std::move(inputs));
}

bool PanelGemmAvailable() { return HaveSgemm(); }

void RunOnPool(int tasks, const std::function<void(int)>& fn) { ColumnPool::Get().Run(tasks, fn); }

void RunTasks(int tasks, int64_t work, int64_t min_work, const std::function<void(int)>& fn) {
  if (tasks <= 1 || work < min_work || PoolThreads() == 1) {
    for (int t = 0; t < tasks; ++t) fn(t);
    return;
  }
  RunOnPool(tasks, fn);
}

int PoolThreads() { return ColumnPool::Get().threads(); }

void RunRanges(int64_t items, int64_t work, int64_t min_work, const std::function<void(int64_t, int64_t)>& fn,
               int64_t grain) {
  if (items <= 0) return;
  const int tasks =
      static_cast<int>(std::min<int64_t>(std::max<int64_t>(items / grain, 1), std::max(1, PoolThreads())));
  RunTasks(tasks, work, min_work, [&](int t) { fn(items * t / tasks, items * (t + 1) / tasks); });
}

mx::array Dequantize(const mx::array& b, const mx::array& scales, const std::optional<mx::array>& zero_points,
                     const NBitsShape& shape, mx::Stream s) {
  Inputs has;
  has.dequantize = true;
  std::vector<mx::array> inputs = WeightInputs(b, scales, zero_points, has);
  return mx::array({shape.N, shape.k_blocks * shape.block_size}, mx::float32,
                   std::make_shared<MatMulNBitsCpu>(s, shape, has), std::move(inputs));
}

}  // namespace nbits_cpu
}  // namespace mlx_ep
