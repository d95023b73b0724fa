#include "runtime/mlx_thread.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include <mlx/mlx.h>

#include "common/env.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace mlx_ep {
namespace {

using Clock = std::chrono::steady_clock;

// Spin bound when ONNXRUNTIME_EP_MLX_SPIN_US is unset: off. Measured on 2 loaded cores, a
// spinning caller competes with the MLX thread and MLX's own CPU stream thread for the cores
// (3-8x slower runs at 10-50 us, no gain at any bound); on machines with cores to spare it is
// worth measuring (bench/bench_overhead.py with ONNXRUNTIME_EP_MLX_SPIN_US=50).
constexpr unsigned kDefaultSpinMicros = 0;

// Hints the core that this is a spin loop (lets a sibling hyper-thread run).
inline void CpuRelax() {
#if defined(__x86_64__) || defined(_M_X64)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until `ready()` or `micros` have passed; true when ready. The clock is read every 64
// polls only: a poll is a relaxed atomic load, the clock a few tens of nanoseconds.
template <class Ready>
bool SpinUntil(Ready ready, unsigned micros) {
  if (micros == 0) return ready();
  const auto deadline = Clock::now() + std::chrono::microseconds(micros);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
      CpuRelax();
    }
    if (Clock::now() >= deadline) return ready();
  }
}

// One call handed over; lives on the caller's stack while it waits.
struct Task {
  void (*call)(void*);
  void* context;
  std::exception_ptr error;
  std::atomic<bool> done{false};  // set under the thread's mutex
  bool sleeping = false;          // guarded by the thread's mutex: the caller waits on done_cv_
};

class MlxThread {
 public:
  MlxThread() : spin_micros_(MlxThreadSpinMicros()), worker_([this] { Loop(); }) {}

  // Runs when the library is unloaded or the process exits: the thread must be joined before
  // its code goes away.
  ~MlxThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    worker_.join();
  }

  void Run(void (*call)(void*), void* context) {
    if (std::this_thread::get_id() == worker_.get_id()) return call(context);
    Task task{call, context, nullptr};
    bool wake = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(&task);
      pending_.fetch_add(1, std::memory_order_release);
      wake = sleeping_;
    }
    if (wake) cv_.notify_one();
    if (!SpinUntil([&] { return task.done.load(std::memory_order_acquire); }, spin_micros_)) {
      std::unique_lock<std::mutex> lock(mu_);
      task.sleeping = true;
      done_cv_.wait(lock, [&] { return task.done.load(std::memory_order_relaxed); });
    }
    if (task.error) std::rethrow_exception(task.error);
  }

 private:
  void Loop() {
    // MLX creates a thread's default stream on first use; a compiled function first called
    // before that misses its own compile cache once and traces twice. Create it up front.
    try {
      (void)mlx::core::default_stream(mlx::core::default_device());
    } catch (...) {
      // No usable device: the first task reports it.
    }
    while (Task* task = Next()) {
      try {
        task->call(task->context);
      } catch (...) {
        task->error = std::current_exception();
      }
      Finish(task);
    }
  }

  // Marks `task` done under the lock: its caller, once it sees that, returns and `task` is gone,
  // so nothing here touches it after unlocking.
  void Finish(Task* task) {
    bool wake = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      wake = task->sleeping;  // read first: a spinning caller returns as soon as `done` is set
      task->done.store(true, std::memory_order_release);
    }
    if (wake) done_cv_.notify_all();  // callers sleeping on other tasks re-check and sleep on
  }

  // The next task, after spinning a while for one and then sleeping; nullptr when stopping.
  Task* Next() {
    SpinUntil([this] { return pending_.load(std::memory_order_acquire) > 0; }, spin_micros_);
    std::unique_lock<std::mutex> lock(mu_);
    while (queue_.empty() && !stop_) {
      sleeping_ = true;
      cv_.wait(lock);
      sleeping_ = false;
    }
    if (queue_.empty()) return nullptr;  // stopping, nothing left
    Task* task = queue_.front();
    queue_.pop_front();
    pending_.fetch_sub(1, std::memory_order_relaxed);
    return task;
  }

  const unsigned spin_micros_;
  std::mutex mu_;
  std::condition_variable cv_;       // the worker waits for tasks
  std::condition_variable done_cv_;  // callers wait for their task
  std::deque<Task*> queue_;          // guarded by mu_
  std::atomic<int> pending_{0};      // queue_.size(), readable without the lock while spinning
  bool sleeping_ = false;            // guarded by mu_: the worker waits on cv_ and must be notified
  bool stop_ = false;
  std::thread worker_;  // last: starts after the members it uses exist
};

}  // namespace

unsigned MlxThreadSpinMicros() {
  static const unsigned micros = [] {
    const std::string v = EnvString(env::kSpinMicros);
    if (v.empty() || v.size() > 6 || v.find_first_not_of("0123456789") != std::string::npos)
      return kDefaultSpinMicros;
    return static_cast<unsigned>(std::stoul(v));
  }();
  return micros;
}

void RunOnMlxThread(void (*call)(void*), void* context) {
  static MlxThread thread;
  thread.Run(call, context);
}

}  // namespace mlx_ep
