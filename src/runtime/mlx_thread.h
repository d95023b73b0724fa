// The process's one MLX thread. MLX keeps streams and compile caches per thread (a stream made
// on one thread cannot be used on another), while ORT may call Compute from any thread of its
// pools. All MLX work of the EP is therefore handed to one dedicated thread, which also gives
// every partition a single compile cache and serialises MLX, which is not safe to drive from
// several threads at once.
//
// The hand-off is on every run's path, so it is cheap: no allocation (the task is passed by
// reference), and optionally (ONNXRUNTIME_EP_MLX_SPIN_US, default 0: off) both sides spin a
// bounded time before sleeping, the caller waiting for its result and the MLX thread after each
// task waiting for the next one, which can save the two thread wake-ups of a run (~7 us) where
// cores are free. An idle EP always sleeps: nothing spins longer than the bound.
#pragma once

#include <type_traits>
#include <utility>

namespace mlx_ep {

/** Runs `call(context)` on the MLX thread and waits for it; rethrows what it throws.
 *  Re-entrant: called from the MLX thread itself, it runs the call directly. */
void RunOnMlxThread(void (*call)(void*), void* context);

/** Runs `task()` on the MLX thread and waits for it (see above). `task` is used in place: it
 *  must stay alive for the call, which it does as the caller waits. */
template <class F>
void RunOnMlxThread(F&& task) {
  using Task = std::remove_reference_t<F>;
  RunOnMlxThread([](void* p) { (*static_cast<Task*>(p))(); },
                 const_cast<void*>(static_cast<const void*>(&task)));
}

/** How long each side of the hand-off spins before sleeping, in microseconds. */
unsigned MlxThreadSpinMicros();

}  // namespace mlx_ep
