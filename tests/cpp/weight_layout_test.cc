// runtime/weight_layout.h: which graphs and constants take the transposed MatMul layout, and
// that the layout holds the same values.
#include <gtest/gtest.h>

#include "graph_builder.h"
#include "mlx/ops.h"
#include "runtime/weight_layout.h"

namespace mlx_ep {
namespace {

using testing::FloatTensor;
using testing::GraphBuilder;

Graph WithNode(const std::string& domain, const std::string& op, std::vector<std::string> inputs) {
  GraphBuilder b;
  for (const auto& in : inputs)
    if (!in.empty()) b.Input(in);
  Graph g = b.AddNode(op, std::move(inputs), {"y"}).Output("y").Build();
  g.nodes.back().domain = domain;
  return g;
}

TEST(WeightLayout, DecodersAreGraphsWithAKvCacheAttention) {
  EXPECT_TRUE(DecodesTokens(WithNode("com.microsoft", "GroupQueryAttention", {"q", "k", "v"})));
  EXPECT_TRUE(DecodesTokens(WithNode("com.microsoft", "PagedAttention", {"q", "k", "v"})));
  // MultiHeadAttention and ai.onnx Attention decode only with a past key (inputs 6 and 4).
  EXPECT_FALSE(DecodesTokens(WithNode("com.microsoft", "MultiHeadAttention", {"q", "k", "v"})));
  EXPECT_TRUE(DecodesTokens(
      WithNode("com.microsoft", "MultiHeadAttention", {"q", "k", "v", "", "", "", "past_k", "past_v"})));
  EXPECT_FALSE(DecodesTokens(WithNode("", "Attention", {"q", "k", "v"})));
  EXPECT_TRUE(DecodesTokens(WithNode("", "Attention", {"q", "k", "v", "", "past_k", "past_v"})));
  EXPECT_FALSE(DecodesTokens(WithNode("", "MatMul", {"a", "b"})));
}

TEST(WeightLayout, OnlyConstantsThatOnlyProductsReadAsB) {
  const Tensor w = FloatTensor({2, 3}, {1, 2, 3, 4, 5, 6});
  Graph g = GraphBuilder()
                .Input("x")
                .Constant("W", w)                                     // B of two MatMuls
                .Constant("V", w)                                     // B of a MatMul and read by an Add
                .Constant("A", w)                                     // A of a MatMul
                .Constant("R", FloatTensor({6}, {1, 2, 3, 4, 5, 6}))  // 1-D
                .Constant("G", w)                                     // B of a Gemm, transB=0
                .Constant("T", w)                                     // B of a Gemm, transB=1: [N, K] already
                .AddNode("MatMul", {"x", "W"}, {"h"})
                .AddNode("MatMul", {"h", "W"}, {"h2"})
                .AddNode("MatMul", {"h2", "V"}, {"p"})
                .AddNode("Add", {"p", "V"}, {"q"})
                .AddNode("MatMul", {"A", "q"}, {"r"})
                .AddNode("MatMul", {"r", "R"}, {"g"})
                .AddNode("Gemm", {"g", "G"}, {"t"})
                .AddNode("Gemm", {"t", "T"}, {"y"})
                .Output("y")
                .Build();
  for (Node& n : g.nodes) n.domain = "";
  Attribute trans_b;
  trans_b.kind = Attribute::Kind::kInt;
  trans_b.i = 1;
  g.nodes.back().attributes["transB"] = trans_b;
  EXPECT_EQ(ProductOnlyWeights(g), (std::unordered_set<std::string>{"W", "G"}));
}

TEST(WeightLayout, TheTransposedArrayHoldsTheSameValues) {
  const mx::array nk = GemvLayout(FloatTensor({2, 3}, {1, 2, 3, 4, 5, 6}));  // [K=2, N=3] row-major
  ASSERT_EQ(nk.shape(), (mx::Shape{3, 2}));
  const mx::array kn = mx::transpose(nk, {1, 0}, mx::Device::cpu);
  const mx::array expected = mx::array({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
  EXPECT_TRUE(mx::array_equal(kn, expected).item<bool>());
  // Past the copy's 64-element tiles on both sides.
  std::vector<float> values(70 * 130);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  const mx::array big = GemvLayout(FloatTensor({70, 130}, values));
  const mx::array want = mx::array(values.data(), {70, 130}, mx::float32);
  EXPECT_TRUE(mx::array_equal(mx::transpose(big, {1, 0}, mx::Device::cpu), want).item<bool>());
}

}  // namespace
}  // namespace mlx_ep
