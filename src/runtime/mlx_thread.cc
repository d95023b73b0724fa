#include "runtime/mlx_thread.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <mlx/mlx.h>

#include "blas/blas.h"
#include "common/env.h"
#include "common/log.h"

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

// Workers when ONNXRUNTIME_EP_MLX_THREADS is unset: one per CPU of the process, at most this
// many. Each worker has its own streams (on the CPU device also MLX's stream thread behind each)
// and its own compiled functions per partition, so workers beyond the concurrency a host really
// has cost memory and compile time for nothing (docs/performance.md, "Concurrent runs").
constexpr size_t kMaxDefaultWorkers = 4;
constexpr size_t kMaxWorkers = 64;

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

// The index of the worker running this thread (kNotAWorker elsewhere).
constexpr size_t kNotAWorker = SIZE_MAX;
thread_local size_t current_worker = kNotAWorker;

// One call handed over; lives on the caller's stack while it waits.
struct Task {
  void (*call)(void*);
  void* context;
  std::exception_ptr error;
  std::atomic<bool> done{false};  // set under the worker's mutex
  bool sleeping = false;          // guarded by the worker's mutex: the caller waits on done_cv_
};

// One MLX thread with its queue.
class Worker {
 public:
  Worker(size_t index, unsigned spin_micros)
      : index_(index), spin_micros_(spin_micros), thread_([this] { Loop(); }) {}

  // Runs when the library is unloaded or the process exits: the thread must be joined before
  // its code goes away.
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }

  /** Runs `call(context)` on this worker and waits for it. */
  void Run(void (*call)(void*), void* context) {
    Task task{call, context, nullptr};
    bool wake = false;
    load_.fetch_add(1, std::memory_order_relaxed);
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

  /** Waits until the worker has made its MLX streams. */
  void WaitReady() { ready_future_.wait(); }

  /** Runs queued or running on this worker (a hint for choosing one; read without a lock). */
  int load() const { return load_.load(std::memory_order_relaxed); }

 private:
  void Loop() {
    current_worker = index_;
    // MLX creates a thread's default stream on first use; a compiled function first called
    // before that misses its own compile cache once and traces twice. Create them up front, for
    // every device the EP may use (a GPU runtime runs graphs with empty tensors on the CPU),
    // while the pool's constructor waits (see MlxPool): workers creating their streams at once
    // corrupted the heap inside MLX's new_stream (a double free, 1 process start in about 40).
    for (const mlx::core::Device device :
         {mlx::core::Device(mlx::core::Device::cpu), mlx::core::default_device()}) {
      try {
        if (mlx::core::is_available(device)) (void)mlx::core::default_stream(device);
      } catch (...) {
        // No usable device: the first task reports it.
      }
    }
    ready_.set_value();
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
      load_.fetch_sub(1, std::memory_order_relaxed);
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

  const size_t index_;
  const unsigned spin_micros_;
  std::mutex mu_;
  std::condition_variable cv_;       // the worker waits for tasks
  std::condition_variable done_cv_;  // callers wait for their task
  std::deque<Task*> queue_;          // guarded by mu_
  std::atomic<int> pending_{0};      // queue_.size(), readable without the lock while spinning
  std::atomic<int> load_{0};         // tasks handed to this worker and not finished
  bool sleeping_ = false;            // guarded by mu_: the worker waits on cv_ and must be notified
  bool stop_ = false;
  std::promise<void> ready_;  // set once the worker's streams exist
  std::future<void> ready_future_ = ready_.get_future();
  std::thread thread_;  // last: starts after the members it uses exist
};

// ONNXRUNTIME_EP_MLX_THREADS: 1..kMaxWorkers; anything else keeps the default (and says so).
size_t WorkerCountFromEnv() {
  const size_t fallback = std::min<size_t>(static_cast<size_t>(DefaultBlasThreads()), kMaxDefaultWorkers);
  const std::string v = EnvString(env::kMlxThreads);
  if (v.empty()) return fallback;
  if (v.size() > 2 || v.find_first_not_of("0123456789") != std::string::npos || std::stoul(v) < 1 ||
      std::stoul(v) > kMaxWorkers) {
    LogLine(std::string(env::kMlxThreads) + "=" + v + " is not a thread count (1 to " +
                std::to_string(kMaxWorkers) + "); using " + std::to_string(fallback),
            LogSeverity::kWarning);
    return fallback;
  }
  return std::stoul(v);
}

// Set when the pool is destroyed (the process exits or the library is unloaded): a session
// released later (a Python object collected at exit, say) must not hand work to joined workers.
// Outside the pool, so that it can still be read then.
std::atomic<bool> pool_stopped{false};

class MlxPool {
 public:
  MlxPool() {
    // MLX's allocator is a function-local static made on first use. Made first by a worker, it
    // would be destroyed at exit before this pool, whose workers then free their thread-local
    // MLX state (compile caches holding arrays) into a destroyed allocator: a double free at
    // exit, seen in about 1 of 40 runs of a test process. Made here, it outlives the pool.
    (void)mlx::core::allocator::allocator();
    const size_t count = WorkerCountFromEnv();
    for (size_t i = 0; i < count; ++i) {
      workers_.push_back(std::make_unique<Worker>(i, MlxThreadSpinMicros()));
      workers_.back()->WaitReady();  // one worker at a time makes its MLX streams
    }
  }
  ~MlxPool() { pool_stopped = true; }  // before the members: the workers are joined after this

  size_t size() const { return workers_.size(); }

  void Run(void (*call)(void*), void* context) {
    if (current_worker != kNotAWorker) return call(context);
    workers_[Choose()]->Run(call, context);
  }

  void RunOn(size_t worker, void (*call)(void*), void* context) {
    if (current_worker == worker) return call(context);
    workers_.at(worker)->Run(call, context);
  }

 private:
  // An idle worker, the calling thread's home worker first; else the least loaded. Home workers
  // are dealt round-robin to calling threads, so that one thread's runs keep landing on one
  // worker (whose compiled functions they use) and several threads spread over the pool.
  size_t Choose() {
    thread_local const size_t home = next_home_.fetch_add(1, std::memory_order_relaxed);
    const size_t n = workers_.size();
    size_t best = home % n;
    int best_load = workers_[best]->load();
    for (size_t i = 1; i < n && best_load > 0; ++i) {
      const size_t k = (home + i) % n;
      const int load = workers_[k]->load();
      if (load < best_load) best = k, best_load = load;
    }
    return best;
  }

  std::atomic<size_t> next_home_{0};
  std::vector<std::unique_ptr<Worker>> workers_;
};

MlxPool& Pool() {
  static MlxPool pool;
  return pool;
}

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
  if (pool_stopped) throw std::runtime_error("[MlxEp] the MLX worker threads have stopped (process exit)");
  Pool().Run(call, context);
}

void RunOnMlxWorker(size_t worker, void (*call)(void*), void* context) {
  if (pool_stopped) throw std::runtime_error("[MlxEp] the MLX worker threads have stopped (process exit)");
  Pool().RunOn(worker, call, context);
}

size_t MlxWorkerCount() { return Pool().size(); }

size_t CurrentMlxWorker() { return current_worker == kNotAWorker ? Pool().size() : current_worker; }

}  // namespace mlx_ep
