// The process's MLX threads: a fixed pool of workers, each with MLX streams of its own.
//
// MLX (0.31.2 and later) keeps streams and compile caches per thread: a thread's default stream
// is its own (mlx/stream.cpp, `default_stream_storage` is thread_local), a stream's command
// encoder exists only on the thread that made it ("There is no Stream(cpu, N) in current
// thread", mlx/backend/cpu/encoder.cpp; the CUDA backend likewise), and a compiled function's
// cache entries live in the calling thread's cache (mlx/compile.cpp, `compile_cache_unsafe`).
// Graphs built and evaluated on different threads, each on its own streams and sharing only
// evaluated arrays, run concurrently; what MLX shares between threads (the scheduler's stream
// table, the allocator, the CPU JIT's kernel cache, compile-cache erasure) is locked inside MLX.
// docs/reliability.md ("Threads") gives the evidence, file by file.
//
// ORT may call Compute from any thread of its pools, so all MLX work of the EP is handed to one
// of these workers, whose streams then stay on one thread. A compiled function is only ever
// called on the worker that compiled it (PartitionRunner keeps one cache per worker).
//
// Pool size: ONNXRUNTIME_EP_MLX_THREADS (1..64), default min(CPUs of the process, 4). A run goes
// to an idle worker (the caller's "home" worker first, so one calling thread always lands on
// the same worker and its compiled functions); when all are busy, to the one with the fewest
// queued runs.
//
// The hand-off is on every run's path, so it is cheap: no allocation (the task is passed by
// reference), and optionally (ONNXRUNTIME_EP_MLX_SPIN_US, default 0: off) both sides spin a
// bounded time before sleeping, the caller waiting for its result and the worker after each
// task waiting for the next one, which can save the two thread wake-ups of a run (~7 us) where
// cores are free. An idle EP always sleeps: nothing spins longer than the bound.
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>

namespace mlx_ep {

/** Runs `call(context)` on an MLX worker and waits for it; rethrows what it throws.
 *  Re-entrant: called from a worker itself, it runs the call directly on that worker. */
void RunOnMlxThread(void (*call)(void*), void* context);

/** Runs `call(context)` on MLX worker `worker` (< MlxWorkerCount()) and waits for it: for work
 *  that must happen on one given thread (releasing that worker's compiled functions). Called on
 *  that worker, it runs directly; not to be called from a task on another worker (two workers
 *  waiting for each other would deadlock). Both functions throw once the pool has stopped (at
 *  process exit). */
void RunOnMlxWorker(size_t worker, void (*call)(void*), void* context);

/** Runs `task()` on an MLX worker and waits for it (see above). `task` is used in place: it
 *  must stay alive for the call, which it does as the caller waits. */
template <class F>
void RunOnMlxThread(F&& task) {
  using Task = std::remove_reference_t<F>;
  RunOnMlxThread([](void* p) { (*static_cast<Task*>(p))(); },
                 const_cast<void*>(static_cast<const void*>(&task)));
}

/** Runs `task()` on MLX worker `worker` and waits for it. */
template <class F>
void RunOnMlxWorker(size_t worker, F&& task) {
  using Task = std::remove_reference_t<F>;
  RunOnMlxWorker(
      worker, [](void* p) { (*static_cast<Task*>(p))(); },
      const_cast<void*>(static_cast<const void*>(&task)));
}

/** The number of MLX workers (fixed for the process: ONNXRUNTIME_EP_MLX_THREADS, see above). */
size_t MlxWorkerCount();

/** The index of the MLX worker running the caller, or MlxWorkerCount() when the caller is not a
 *  worker. */
size_t CurrentMlxWorker();

/** How long each side of the hand-off spins before sleeping, in microseconds. */
unsigned MlxThreadSpinMicros();

}  // namespace mlx_ep
