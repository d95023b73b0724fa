#include "runtime/mlx_thread.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <future>
#include <mutex>
#include <thread>

#include <mlx/mlx.h>

namespace mlx_ep {
namespace {

class MlxThread {
 public:
  MlxThread() : worker_([this] { Loop(); }) {}

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

  void Run(const std::function<void()>& task) {
    if (std::this_thread::get_id() == worker_.get_id()) return task();
    std::packaged_task<void()> packaged(task);
    std::future<void> done = packaged.get_future();
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(packaged));
    }
    cv_.notify_one();
    done.get();  // rethrows the task's exception
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
    for (;;) {
      std::packaged_task<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, nothing left
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void()>> queue_;
  bool stop_ = false;
  std::thread worker_;  // last: starts after the members it uses exist
};

}  // namespace

void RunOnMlxThread(const std::function<void()>& task) {
  static MlxThread thread;
  thread.Run(task);
}

}  // namespace mlx_ep
