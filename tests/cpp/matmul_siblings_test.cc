// runtime/matmul_siblings.h: which MatMuls merge into one product, and the merged weight.
#include <gtest/gtest.h>

#include <cstring>

#include "graph_builder.h"
#include "runtime/matmul_siblings.h"

namespace mlx_ep {
namespace {

using testing::FloatTensor;
using testing::GraphBuilder;

TEST(MatmulSiblings, SameInputAndKMergeOthersDoNot) {
  Graph g = GraphBuilder()
                .Input("x")
                .Input("z")
                .Constant("Wq", FloatTensor({2, 1}, {1, 2}))
                .Constant("Wk", FloatTensor({2, 2}, {3, 4, 5, 6}))
                .Constant("Wv", FloatTensor({2, 1}, {7, 8}))     // read by an Add too
                .Constant("Wo", FloatTensor({3, 1}, {1, 1, 1}))  // another K
                .Constant("Wz", FloatTensor({2, 1}, {9, 9}))     // another input
                .AddNode("MatMul", {"x", "Wq"}, {"q"})
                .AddNode("MatMul", {"x", "Wk"}, {"k"})
                .AddNode("MatMul", {"x", "Wv"}, {"v"})
                .AddNode("Add", {"v", "Wv"}, {"a"})
                .AddNode("MatMul", {"x", "Wo"}, {"o"})
                .AddNode("MatMul", {"z", "Wz"}, {"w"})
                .Output("q")
                .Build();
  for (Node& n : g.nodes) n.domain = "";
  const std::vector<MatmulSiblings> groups = FindMatmulSiblings(g, {"q"});
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].nodes, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(groups[0].weights, (std::vector<std::string>{"Wq", "Wk"}));

  const std::shared_ptr<const Tensor> merged = MergeColumns(g, groups[0]);
  ASSERT_EQ(merged->shape, (std::vector<int64_t>{2, 3}));
  std::vector<float> values(6);
  std::memcpy(values.data(), merged->bytes.data(), merged->bytes.size());
  EXPECT_EQ(values, (std::vector<float>{1, 3, 4, 2, 5, 6}));  // [Wq | Wk], row by row
}

}  // namespace
}  // namespace mlx_ep
