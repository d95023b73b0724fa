// The process's one MLX thread. MLX keeps streams and compile caches per thread (a stream made
// on one thread cannot be used on another), while ORT may call Compute from any thread of its
// pools. All MLX work of the EP is therefore handed to one dedicated thread, which also gives
// every partition a single compile cache and serialises MLX, which is not safe to drive from
// several threads at once.
#pragma once

#include <functional>

namespace mlx_ep {

/** Runs `task` on the MLX thread and waits for it; rethrows what it throws. Re-entrant: called
 *  from the MLX thread itself, it runs `task` directly. */
void RunOnMlxThread(const std::function<void()>& task);

}  // namespace mlx_ep
