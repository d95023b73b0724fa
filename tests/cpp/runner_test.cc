// Plan + runner: compiled execution, the compile cache, eager mode, host-value specialisation,
// and that ORT's input memory is never written to.
#include <gtest/gtest.h>

#include "graph_builder.h"
#include "runtime/runner.h"

namespace mlx_ep {
namespace {

using testing::GraphBuilder;

std::vector<float> ToVector(const mx::array& a) {
  const float* p = a.data<float>();
  return std::vector<float>(p, p + a.size());
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
  EXPECT_EQ(s.runs, 3u);
  EXPECT_EQ(s.cache_misses, 2u);
  EXPECT_EQ(s.cache_hits, 1u);
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

TEST(Plan, MissingTranslationIsRejected) {
  Graph g = GraphBuilder().Input("x").AddNode("NoSuchOp", {"x"}, {"y"}).Output("y").Build();
  EXPECT_THROW(BuildPlan(g, "p", {"x"}, {"y"}, OpRegistry::Get()), std::invalid_argument);
}

}  // namespace
}  // namespace mlx_ep
