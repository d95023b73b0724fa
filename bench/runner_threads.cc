// Concurrent runs without ORT: runs/s of T threads on one shared PartitionRunner and on one
// runner per thread, for the MLX worker pool as ONNXRUNTIME_EP_MLX_THREADS sets it. The C++
// counterpart of bench/bench_concurrency.py, small enough (with libmlx and OpenBLAS) to be
// carried to a machine with more cores than this one and no Python packages.
//
//   build/tests/cpp/runner_threads_bench [threads,...] [seconds]     (default 1,2,4,8 and 1 s)
//
// Models: "small" x [8,64] -> Add c -> Mul c -> Relu; "medium" x [32,256] -> MatMul [256,512]
// -> Add -> Tanh -> MatMul [512,256] -> Add -> Softmax. Every thread checks its first result
// against a single-threaded run's bytes. Prints one line per (model, sessions, threads).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "blas/blas.h"
#include "graph_builder.h"
#include "runtime/mlx_thread.h"
#include "runtime/runner.h"

namespace {

using mlx_ep::ElemType;
using mlx_ep::PartitionRunner;
using mlx_ep::Plan;
using mlx_ep::testing::FloatTensor;
using mlx_ep::testing::GraphBuilder;

std::vector<float> Values(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 1;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = (static_cast<float>(s >> 8) / static_cast<float>(1 << 23) - 1.f) * 0.1f;
  }
  return v;
}

struct Model {
  std::string name;
  std::vector<int64_t> shape;
  Plan (*plan)();
};

Plan SmallPlan() {
  mlx_ep::Graph g = GraphBuilder()
                        .Input("x")
                        .Constant("c", FloatTensor({64}, std::vector<float>(64, 0.5f)))
                        .AddNode("Add", {"x", "c"}, {"a"})
                        .AddNode("Mul", {"a", "c"}, {"m"})
                        .AddNode("Relu", {"m"}, {"y"})
                        .Output("y")
                        .Build();
  return mlx_ep::BuildPlan(g, "small", {"x"}, {"y"}, mlx_ep::OpRegistry::Get());
}

Plan MediumPlan() {
  mlx_ep::Graph g = GraphBuilder()
                        .Input("x")
                        .Constant("w1", FloatTensor({256, 512}, Values(256 * 512, 1)))
                        .Constant("b1", FloatTensor({512}, Values(512, 2)))
                        .Constant("w2", FloatTensor({512, 256}, Values(512 * 256, 3)))
                        .Constant("b2", FloatTensor({256}, Values(256, 4)))
                        .AddNode("MatMul", {"x", "w1"}, {"h"})
                        .AddNode("Add", {"h", "b1"}, {"hb"})
                        .AddNode("Tanh", {"hb"}, {"t"})
                        .AddNode("MatMul", {"t", "w2"}, {"u"})
                        .AddNode("Add", {"u", "b2"}, {"ub"})
                        .AddNode("Softmax", {"ub"}, {"y"})
                        .Output("y")
                        .Build();
  for (mlx_ep::Node& n : g.nodes)
    if (n.op_type != "Add") n.since_version = 13;
  return mlx_ep::BuildPlan(g, "medium", {"x"}, {"y"}, mlx_ep::OpRegistry::Get());
}

// Runs per second of threads[t] running runners[t] for `seconds`; exits on a wrong result.
double RunsPerSecond(const std::vector<PartitionRunner*>& runners, const std::vector<int64_t>& shape,
                     const std::vector<float>& x, const std::vector<uint8_t>& want, double seconds) {
  std::atomic<bool> stop{false};
  std::atomic<int> ready{0};
  std::vector<long> counts(runners.size(), 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < runners.size(); ++t)
    threads.emplace_back([&, t] {
      if (runners[t]->Run({{ElemType::kFloat, shape, x.data()}}).at(0).bytes != want) {
        std::fprintf(stderr, "thread %zu: result differs from a single-threaded run\n", t);
        std::exit(1);
      }
      ready.fetch_add(1);
      while (ready.load() < static_cast<int>(runners.size())) std::this_thread::yield();
      long n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        runners[t]->Run({{ElemType::kFloat, shape, x.data()}});
        ++n;
      }
      counts[t] = n;
    });
  while (ready.load() < static_cast<int>(runners.size())) std::this_thread::yield();
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& th : threads) th.join();
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  long total = 0;
  for (long c : counts) total += c;
  return static_cast<double>(total) / elapsed;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> thread_counts = {1, 2, 4, 8};
  if (argc > 1) {
    thread_counts.clear();
    std::stringstream ss(argv[1]);
    for (std::string item; std::getline(ss, item, ',');) thread_counts.push_back(std::stoi(item));
  }
  const double seconds = argc > 2 ? std::stod(argv[2]) : 1.0;
  mlx_ep::ConfigureBlasThreads();  // ONNXRUNTIME_EP_MLX_BLAS_THREADS, as the EP library does
  std::printf("cpus %u, MLX workers %zu, BLAS threads %d\n", std::thread::hardware_concurrency(),
              mlx_ep::MlxWorkerCount(), mlx_ep::InspectBlasBinding().threads);
  for (const Model& m : {Model{"small", {8, 64}, SmallPlan}, Model{"medium", {32, 256}, MediumPlan}}) {
    size_t n = 1;
    for (int64_t d : m.shape) n *= static_cast<size_t>(d);
    const std::vector<float> x = Values(n, 9);
    PartitionRunner reference(m.plan(), /*compile=*/true);
    const std::vector<uint8_t> want = reference.Run({{ElemType::kFloat, m.shape, x.data()}}).at(0).bytes;
    for (const char* sessions : {"shared", "separate"}) {
      double one = 0;
      for (int t : thread_counts) {
        std::vector<std::unique_ptr<PartitionRunner>> owned;
        std::vector<PartitionRunner*> runners;
        for (int i = 0; i < t; ++i) {
          if (i == 0 || std::string(sessions) == "separate")
            owned.push_back(std::make_unique<PartitionRunner>(m.plan(), true));
          runners.push_back(owned.back().get());
        }
        const double rate = RunsPerSecond(runners, m.shape, x, want, seconds);
        if (one == 0) one = rate;
        std::printf("%-7s %-9s threads %3d  %10.0f runs/s  (%.2fx)\n", m.name.c_str(), sessions, t, rate,
                    rate / one);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
