// The MLX worker pool (runtime/mlx_thread.h) and concurrent runners: runs on different workers
// proceed at once; many threads on many runners give the bytes one thread gives; runners are
// destroyed while others run; the compile cache's bound holds under many shapes from many
// threads; parallel GEMMs from several workers share the BLAS pool without deadlock. No timing
// is asserted (the CI machine is shared): only results, counters and that nothing hangs.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "blas/blas.h"
#include "graph_builder.h"
#include "runtime/mlx_thread.h"
#include "runtime/runner.h"

namespace mlx_ep {
namespace {

using testing::GraphBuilder;

// Deterministic values in [-1, 1) that round differently in every operation order.
std::vector<float> Values(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 1;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(s >> 8) / static_cast<float>(1 << 23) - 1.f;
  }
  return v;
}

constexpr int64_t kWidth = 48;

// x [n, 48] -> MatMul W -> Add b -> Tanh -> MatMul W -> Softmax: a GEMM, fused elementwise
// kernels and a reduction, with constants shared by every trace.
Plan DensePlan() {
  Graph g = GraphBuilder()
                .Input("x")
                .Constant("w", testing::FloatTensor({kWidth, kWidth}, Values(kWidth * kWidth, 1)))
                .Constant("b", testing::FloatTensor({kWidth}, Values(kWidth, 2)))
                .AddNode("MatMul", {"x", "w"}, {"h"})
                .AddNode("Add", {"h", "b"}, {"a"})
                .AddNode("Tanh", {"a"}, {"t"})
                .AddNode("MatMul", {"t", "w"}, {"u"})
                .AddNode("Softmax", {"u"}, {"y"})
                .Output("y")
                .Build();
  for (Node& n : g.nodes)
    if (n.op_type != "Add") n.since_version = 13;
  return BuildPlan(g, "dense", {"x"}, {"y"}, OpRegistry::Get());
}

// The input of run `i`: a few shapes, so traces race with cached runs.
int64_t Rows(int i) { return std::vector<int64_t>{1, 5, 17, 64}[i % 4]; }

std::vector<uint8_t> RunBytes(PartitionRunner& runner, const std::vector<float>& x, int64_t rows) {
  return runner.Run({{ElemType::kFloat, {rows, kWidth}, x.data()}}).at(0).bytes;
}

// Runs `work(t)` on `n` threads and joins them.
template <class Work>
void OnThreads(int n, Work work) {
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t) threads.emplace_back([&work, t] { work(t); });
  for (auto& th : threads) th.join();
}

TEST(MlxWorkers, RunOnWorkerRunsThere) {
  EXPECT_GE(MlxWorkerCount(), 1u);
  EXPECT_EQ(CurrentMlxWorker(), MlxWorkerCount());  // the test's thread is not a worker
  for (size_t k = 0; k < MlxWorkerCount(); ++k) {
    size_t seen = SIZE_MAX;
    RunOnMlxWorker(k, [&] { seen = CurrentMlxWorker(); });
    EXPECT_EQ(seen, k);
  }
  size_t nested = SIZE_MAX;
  RunOnMlxThread([&] { RunOnMlxThread([&] { nested = CurrentMlxWorker(); }); });  // re-entrant
  EXPECT_LT(nested, MlxWorkerCount());
}

// Two calls from two threads run at the same time on two workers: each waits until the other
// has started (a pool that serialised them would never get there; the wait gives up after 20 s
// so that a failure is a failure, not a hang).
TEST(MlxWorkers, CallsFromTwoThreadsRunConcurrently) {
  if (MlxWorkerCount() < 2) GTEST_SKIP() << "one MLX worker (ONNXRUNTIME_EP_MLX_THREADS or one CPU)";
  std::atomic<int> started{0};
  std::vector<int> saw_other(2, 0);
  std::vector<size_t> worker(2, SIZE_MAX);
  OnThreads(2, [&](int t) {
    RunOnMlxThread([&] {
      worker[t] = CurrentMlxWorker();
      started.fetch_add(1);
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (started.load() < 2 && std::chrono::steady_clock::now() < give_up)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      saw_other[t] = started.load() == 2;
    });
  });
  EXPECT_EQ(saw_other, std::vector<int>(2, 1));
  EXPECT_NE(worker[0], worker[1]);
}

// 8 threads on 3 runners of one plan, 4 shapes: every result is bit-identical to the one a
// single thread computed (each worker compiles its own functions; they must agree exactly).
TEST(MlxWorkers, ManyThreadsOnManyRunnersGiveTheSameBytes) {
  std::vector<std::vector<float>> inputs;
  std::vector<std::vector<uint8_t>> want;
  PartitionRunner reference(DensePlan(), /*compile=*/true);
  for (int i = 0; i < 8; ++i) {
    inputs.push_back(Values(Rows(i) * kWidth, 100 + i));
    want.push_back(RunBytes(reference, inputs.back(), Rows(i)));
  }
  std::vector<std::unique_ptr<PartitionRunner>> runners;
  for (int r = 0; r < 3; ++r) runners.push_back(std::make_unique<PartitionRunner>(DensePlan(), true));
  std::vector<int> wrong(8, 0);
  OnThreads(8, [&](int t) {
    for (int i = 0; i < 40; ++i) {
      const int k = (t + i) % 8;
      wrong[t] += RunBytes(*runners[(t + i) % 3], inputs[k], Rows(k)) != want[k];
    }
  });
  EXPECT_EQ(wrong, std::vector<int>(8, 0));
  uint64_t runs = 0;
  for (auto& r : runners) runs += r->stats().runs;
  EXPECT_EQ(runs, 8u * 40u);
}

// Runners (sessions) created, run and destroyed while two threads keep running another one:
// destruction releases each worker's compiled functions on that worker, busy or not.
TEST(MlxWorkers, RunnersDestroyedWhileOthersRun) {
  PartitionRunner kept(DensePlan(), true);
  const std::vector<float> x = Values(Rows(2) * kWidth, 7);
  const std::vector<uint8_t> want = RunBytes(kept, x, Rows(2));
  std::atomic<bool> stop{false};
  std::vector<int> wrong(2, 0), runs(2, 0);
  std::thread destroyer([&] {
    for (int i = 0; i < 12; ++i) {
      PartitionRunner doomed(DensePlan(), true);
      for (int s = 0; s < 3; ++s) {
        const std::vector<float> y = Values(Rows(s) * kWidth, 50 + s);
        RunBytes(doomed, y, Rows(s));
      }
    }
    stop = true;
  });
  OnThreads(2, [&](int t) {
    do {
      wrong[t] += RunBytes(kept, x, Rows(2)) != want;
      ++runs[t];
    } while (!stop);
  });
  destroyer.join();
  EXPECT_EQ(wrong, std::vector<int>(2, 0));
  EXPECT_GT(runs[0] + runs[1], 0);
}

// x + y + x over 12 shapes from 4 threads with a bound of 3 compiled functions: results right,
// and no worker's cache holds more than the bound (live entries = misses - evictions).
TEST(MlxWorkers, CompileCacheBoundHoldsUnderManyShapesFromManyThreads) {
  Graph g = GraphBuilder()
                .Input("x")
                .Input("y")
                .AddNode("Add", {"x", "y"}, {"s"})
                .AddNode("Add", {"s", "x"}, {"z"})
                .Output("z")
                .Build();
  PartitionRunner runner(BuildPlan(g, "p", {"x", "y"}, {"z"}, OpRegistry::Get()), true, /*max_compiled=*/3);
  std::vector<int> wrong(4, 0);
  OnThreads(4, [&](int t) {
    for (int i = 0; i < 36; ++i) {
      const int64_t n = 1 + (i * (t + 1)) % 12;
      std::vector<float> x(n, float(t + 1)), y(n, 0.5f);
      const Tensor z =
          runner.Run({{ElemType::kFloat, {n}, x.data()}, {ElemType::kFloat, {n}, y.data()}}).at(0);
      std::vector<float> v(n);
      std::memcpy(v.data(), z.bytes.data(), z.bytes.size());
      for (float e : v) wrong[t] += e != 2.f * float(t + 1) + 0.5f;
    }
  });
  EXPECT_EQ(wrong, std::vector<int>(4, 0));
  const RunnerStats s = runner.stats();
  EXPECT_EQ(s.runs, 4u * 36u);
  EXPECT_GE(s.cache_misses, 12u);  // every shape compiled at least once
  EXPECT_GT(s.evictions, 0u);
  EXPECT_LE(s.cache_misses - s.evictions, 3u * MlxWorkerCount());
}

// Products in parts (2 BLAS threads) from 4 threads at once: the EP's pool (blas_pool.c, one
// batch at a time; a product that finds it busy runs whole) must neither deadlock nor mix up
// results. Small integers make every product and sum exact.
TEST(MlxWorkers, ParallelGemmsFromSeveralWorkers) {
  const int64_t m = 384, k = 256, n = 512;  // large enough to run in parts over 2 threads
  std::vector<float> a(m * k), b(k * n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(static_cast<int>(i * 7919 % 13) - 6);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(static_cast<int>(i * 104729 % 11) - 5);
  Graph g = GraphBuilder().Input("a").Input("b").AddNode("MatMul", {"a", "b"}, {"c"}).Output("c").Build();
  g.nodes[0].since_version = 13;
  PartitionRunner runner(BuildPlan(g, "p", {"a", "b"}, {"c"}, OpRegistry::Get()), true);
  std::vector<float> want(m * n, 0.f);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j) want[i * n + j] += a[i * k + p] * b[p * n + j];
  const int blas_threads = InspectBlasBinding().threads;
  const bool set = SetBlasThreads(2);
  std::vector<int> wrong(4, 0);
  OnThreads(4, [&](int t) {
    for (int i = 0; i < 3; ++i) {
      const Tensor c =
          runner.Run({{ElemType::kFloat, {m, k}, a.data()}, {ElemType::kFloat, {k, n}, b.data()}}).at(0);
      wrong[t] += std::memcmp(c.bytes.data(), want.data(), c.bytes.size()) != 0;
    }
  });
  if (set) SetBlasThreads(blas_threads > 0 ? blas_threads : 1);
  EXPECT_EQ(wrong, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace mlx_ep
