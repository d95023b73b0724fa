// Plan + runner: compiled execution, the compile cache, eager mode, host-value specialisation,
// and that ORT's input memory is never written to.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "graph_builder.h"
#include "mlx/memory.h"
#include "runtime/device.h"
#include "runtime/mlx_thread.h"
#include "runtime/runner.h"

namespace mlx_ep {
namespace {

using testing::GraphBuilder;

std::vector<float> ToVector(const Tensor& t) {
  std::vector<float> v(t.bytes.size() / sizeof(float));
  std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
  return v;
}

InputTensor Float(const std::vector<float>& v, std::vector<int64_t> shape) {
  return {ElemType::kFloat, std::move(shape), v.data()};
}

Plan AddPlan() {
  Graph g = GraphBuilder()
                .Input("x")
                .Input("y")
                .AddNode("Add", {"x", "y"}, {"s"})
                .AddNode("Add", {"s", "x"}, {"z"})
                .Output("z")
                .Build();
  return BuildPlan(g, "p", {"x", "y"}, {"z"}, OpRegistry::Get());
}

TEST(Runner, CompiledRunMatchesAndCaches) {
  PartitionRunner runner(AddPlan(), /*compile=*/true);
  std::vector<float> x = {1, 2, 3}, y = {10, 20, 30};
  auto out = runner.Run({Float(x, {3}), Float(y, {3})});
  EXPECT_EQ(ToVector(out[0]), (std::vector<float>{12, 24, 36}));
  runner.Run({Float(x, {3}), Float(y, {3})});
  std::vector<float> x2 = {1, 2}, y2 = {3, 4};
  runner.Run({Float(x2, {2}), Float(y2, {2})});  // new shape: new trace
  RunnerStats s = runner.stats();
  EXPECT_EQ(s.traces, 2u);
  EXPECT_EQ(s.runs, 3u);
  EXPECT_EQ(s.cache_misses, 2u);
  EXPECT_EQ(s.cache_hits, 1u);
}

// The compile cache keeps the most recently used functions only: shapes that keep changing
// cannot grow memory without bound.
TEST(Runner, CompileCacheIsBounded) {
  PartitionRunner runner(AddPlan(), /*compile=*/true, /*max_compiled=*/2);
  std::vector<float> x(4, 1.f), y(4, 2.f);
  for (int64_t n : {1, 2, 3, 2, 1}) {
    auto out = runner.Run({Float(x, {n}), Float(y, {n})});
    EXPECT_EQ(ToVector(out[0]), std::vector<float>(n, 4.f));
  }
  RunnerStats s = runner.stats();
  // 1, 2, 3 miss (3 evicts 1); 2 hits (it is recent); 1 misses again (evicting 3).
  EXPECT_EQ(s.cache_misses, 4u);
  EXPECT_EQ(s.cache_hits, 1u);
  EXPECT_EQ(s.evictions, 2u);
  EXPECT_EQ(s.traces, 4u);
}

TEST(Runner, EagerModeGivesSameResult) {
  PartitionRunner runner(AddPlan(), /*compile=*/false);
  std::vector<float> x = {1, 2, 3}, y = {10, 20, 30};
  auto out = runner.Run({Float(x, {3}), Float(y, {3})});
  EXPECT_EQ(ToVector(out[0]), (std::vector<float>{12, 24, 36}));
  EXPECT_EQ(runner.stats().cache_misses, 0u);
}

TEST(Runner, InputMemoryIsNeverWritten) {
  PartitionRunner runner(AddPlan(), true);
  std::vector<float> x(1024, 1.f), y(1024, 2.f);
  for (int i = 0; i < 3; ++i) runner.Run({Float(x, {1024}), Float(y, {1024})});
  for (float v : x) ASSERT_EQ(v, 1.f);
  for (float v : y) ASSERT_EQ(v, 2.f);
}

TEST(Runner, WrongInputCountIsAnError) {
  PartitionRunner runner(AddPlan(), true);
  std::vector<float> x = {1};
  EXPECT_THROW(runner.Run({Float(x, {1})}), std::invalid_argument);
}

TEST(Runner, IncompatibleShapesAreAnError) {
  PartitionRunner runner(AddPlan(), true);
  std::vector<float> x = {1, 2}, y = {1, 2, 3};
  EXPECT_THROW(runner.Run({Float(x, {2}), Float(y, {3})}), std::exception);
}

// MLX streams belong to the thread that made them: runs arriving from several threads (as ORT's
// thread pools call Compute) must all work, including new shapes traced while others run.
TEST(Runner, RunsFromManyThreads) {
  PartitionRunner runner(AddPlan(), true);
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        const int64_t n = 1 + (t + i) % 3;
        std::vector<float> x(n, float(t)), y(n, 1.f);
        auto out = ToVector(runner.Run({Float(x, {n}), Float(y, {n})})[0]);
        for (float v : out) wrong[t] += v != 2 * t + 1;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong, std::vector<int>(4, 0));
  EXPECT_EQ(runner.stats().runs, 80u);
  // One trace per shape and MLX worker that ran it (each worker compiles its own functions).
  EXPECT_GE(runner.stats().cache_misses, 3u);
  EXPECT_LE(runner.stats().cache_misses, 3u * MlxWorkerCount());
}

// x [n, 6] -> Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [3], [-1])): the shape chain
// folds while tracing (nothing of it is read from ORT or added to the cache key); Shape(x) is
// also a partition output.
Plan ShapeChainPlan() {
  using testing::Int64Tensor;
  Graph g = GraphBuilder()
                .Input("x")
                .Constant("zero", Int64Tensor({}, {0}))
                .Constant("axes", Int64Tensor({1}, {0}))
                .Constant("three", Int64Tensor({1}, {3}))
                .Constant("rest", Int64Tensor({1}, {-1}))
                .AddNode("Shape", {"x"}, {"s"}, ElemType::kInt64)
                .AddNode("Gather", {"s", "zero"}, {"n"}, ElemType::kInt64)
                .AddNode("Unsqueeze", {"n", "axes"}, {"n1"}, ElemType::kInt64)
                .AddNode("Concat", {"n1", "three", "rest"}, {"shape"}, ElemType::kInt64)
                .AddNode("Reshape", {"x", "shape"}, {"y"})
                .Output("y")
                .Output("s")
                .Build();
  Attribute axis;
  axis.kind = Attribute::Kind::kInt;
  axis.i = 0;
  g.nodes[3].attributes["axis"] = axis;
  return BuildPlan(g, "p", {"x"}, {"y", "s"}, OpRegistry::Get());
}

TEST(Runner, ShapeArithmeticFoldsWhileTracing) {
  Plan plan = ShapeChainPlan();
  EXPECT_EQ(plan.input_is_host, std::vector<bool>{false});
  PartitionRunner runner(std::move(plan), true);
  std::vector<float> x(12);
  for (int i = 0; i < 12; ++i) x[i] = float(i);
  auto out = runner.Run({Float(x, {2, 6})});
  EXPECT_EQ(out[0].shape, (std::vector<int64_t>{2, 3, 2}));
  EXPECT_EQ(ToVector(out[0]), x);
  EXPECT_EQ(out[1].ToInt64(), (std::vector<int64_t>{2, 6}));
  runner.Run({Float(x, {2, 6})});

  std::vector<float> x4(24, 1.f);
  out = runner.Run({Float(x4, {4, 6})});
  EXPECT_EQ(out[0].shape, (std::vector<int64_t>{4, 3, 2}));
  EXPECT_EQ(out[1].ToInt64(), (std::vector<int64_t>{4, 6}));
  RunnerStats s = runner.stats();
  EXPECT_EQ(s.cache_misses, 2u);  // one per input shape: folding adds nothing to the key
  EXPECT_EQ(s.cache_hits, 1u);
  EXPECT_EQ(s.traces, 2u);        // and causes no extra trace
  EXPECT_EQ(s.folded_nodes, 8u);  // Shape, Gather, Unsqueeze, Concat in each trace
}

TEST(Runner, ShapeArithmeticFoldsInEagerMode) {
  PartitionRunner runner(ShapeChainPlan(), false);
  std::vector<float> x(18, 2.f);
  auto out = runner.Run({Float(x, {3, 6})});
  EXPECT_EQ(out[0].shape, (std::vector<int64_t>{3, 3, 2}));
  EXPECT_EQ(runner.stats().folded_nodes, 4u);
}

// x [3] + Cast(Size(m)) + Cast(ReduceSum(m)): m's dims change every run, but the partition reads
// them only through Size (data) and a prologue reduction, so one function serves every shape
// after the first (docs/dynamic_shapes.md).
Plan SizeAndSumPlan() {
  using testing::Int64Tensor;
  Graph g = GraphBuilder()
                .Input("x")
                .Input("m", ElemType::kInt64)
                .AddNode("Size", {"m"}, {"n"}, ElemType::kInt64)
                .AddNode("Cast", {"n"}, {"nf"})
                .AddNode("ReduceSum", {"m"}, {"sum"}, ElemType::kInt64)
                .AddNode("Cast", {"sum"}, {"sumf"})
                .AddNode("Add", {"x", "nf"}, {"a"})
                .AddNode("Add", {"a", "sumf"}, {"y"})
                .Output("y")
                .Build();
  Attribute to;
  to.kind = Attribute::Kind::kInt;
  to.i = static_cast<int64_t>(ElemType::kFloat);
  g.nodes[1].attributes["to"] = to;
  g.nodes[3].attributes["to"] = to;
  Attribute keepdims;
  keepdims.kind = Attribute::Kind::kInt;
  keepdims.i = 0;
  g.nodes[2].attributes["keepdims"] = keepdims;
  g.nodes[2].since_version = 13;  // ReduceSum's last version
  return BuildPlan(g, "p", {"x", "m"}, {"y"}, OpRegistry::Get());
}

TEST(Runner, VaryingDimReadAsDataIsDynamic) {
  PartitionRunner runner(SizeAndSumPlan(), true);
  std::vector<float> x = {1, 2, 3};
  std::vector<int64_t> m(40, 2);
  for (int64_t n : {2, 3, 5, 8, 3, 13}) {
    InputTensor mask{ElemType::kInt64, {1, n}, m.data()};
    auto out = runner.Run({Float(x, {3}), mask});
    const float add = float(n + 2 * n);
    EXPECT_EQ(ToVector(out[0]), (std::vector<float>{1 + add, 2 + add, 3 + add})) << n;
  }
  RunnerStats s = runner.stats();
  EXPECT_EQ(s.traces, 2u);  // the first shape, then one function for every length
  EXPECT_EQ(s.cache_hits, 4u);
}

// (x * 0.5 + 3) * 0.5: two distinct one-element constants read by fused ops. The first call
// traces with them behind Contiguous primitives; the second compiles the function again taking
// them as inputs (runtime/scalars.h), which is not a new signature's trace.
TEST(Runner, ScalarLeavesBecomeInputsOnTheSecondCall) {
  using testing::FloatTensor;
  Graph g = GraphBuilder()
                .Input("x")
                .Constant("half", FloatTensor({}, {0.5f}))
                .Constant("three", FloatTensor({1}, {3.f}))
                .AddNode("Mul", {"x", "half"}, {"a"})
                .AddNode("Add", {"a", "three"}, {"b"})
                .AddNode("Mul", {"b", "half"}, {"y"})
                .Output("y")
                .Build();
  PartitionRunner runner(BuildPlan(g, "p", {"x"}, {"y"}, OpRegistry::Get()), true);
  for (float v : {2.f, 4.f, -6.f, 10.f}) {
    std::vector<float> x = {v, 2 * v};
    EXPECT_EQ(ToVector(runner.Run({Float(x, {2})})[0]), (std::vector<float>{(v * 0.5f + 3) * 0.5f, (v + 3) * 0.5f}))
        << v;
  }
  std::vector<float> x3 = {1, 2, 3};
  EXPECT_EQ(ToVector(runner.Run({Float(x3, {3})})[0]), (std::vector<float>{1.75f, 2.f, 2.25f}));
  RunnerStats s = runner.stats();
  EXPECT_EQ(s.traces, 2u);               // one per shape
  EXPECT_EQ(s.scalar_input_traces, 1u);  // the first shape was called again, the second was not
  EXPECT_EQ(s.cache_hits, 3u);
}

// On MLX's CPU device the EP sets MLX's buffer cache (runtime/device.cc): a quarter of MLX's memory
// limit, not MLX's own 32 MB, unless ONNXRUNTIME_EP_MLX_CPU_CACHE_MB says otherwise.
TEST(Runner, CpuBufferCacheIsAQuarterOfTheMemoryLimit) {
  if (RuntimeDevice() != mx::Device(mx::Device::cpu)) GTEST_SKIP() << "set on MLX's CPU device only";
  if (std::getenv("ONNXRUNTIME_EP_MLX_CPU_CACHE_MB")) GTEST_SKIP() << "set by the environment";
  const size_t limit = mx::set_cache_limit(0);
  mx::set_cache_limit(limit);
  EXPECT_EQ(limit, std::max(size_t{32} << 20, mx::get_memory_limit() / 4));
  EXPECT_GT(limit, size_t{32} << 20);  // this machine's memory holds more than 512 MB
}

TEST(Plan, MissingTranslationIsRejected) {
  Graph g = GraphBuilder().Input("x").AddNode("NoSuchOp", {"x"}, {"y"}).Output("y").Build();
  EXPECT_THROW(BuildPlan(g, "p", {"x"}, {"y"}, OpRegistry::Get()), std::invalid_argument);
}

// Constants reach MLX without a copy on MLX's CPU-only allocator (runtime/device.h): held once,
// and released when the last array over them goes.
TEST(Runner, ConstantsAreSharedNotCopiedOnTheCpu) {
  if (RuntimeDevice() != mx::Device(mx::Device::cpu)) GTEST_SKIP() << "GPU devices copy host memory in";
  auto t = std::make_shared<Tensor>(Tensor{ElemType::kFloat, {256, 1024}, std::vector<uint8_t>(256 * 1024 * 4, 0)});
  const float value = 1.5f;
  std::memcpy(t->bytes.data() + 4, &value, sizeof(value));
  {
    mx::array a = ShareArray(t);
    EXPECT_EQ(a.data<uint8_t>(), t->bytes.data());
    EXPECT_EQ(t.use_count(), 2);  // the array holds the tensor
    mx::array doubled = mx::multiply(a, mx::array(2.f));
    mx::eval(doubled);
    EXPECT_EQ(doubled.data<float>()[1], 3.f);
  }
  EXPECT_EQ(t.use_count(), 1);  // released with the last array
}

}  // namespace
}  // namespace mlx_ep
