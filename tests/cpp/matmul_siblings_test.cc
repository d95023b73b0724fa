// runtime/matmul_siblings.h: which MatMuls merge into one product, and the merged weight.
#include <gtest/gtest.h>

#include <cstring>

#include "graph_builder.h"
#include "runtime/matmul_siblings.h"
#include "runtime/nbits_siblings.h"

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

// One row's column views have packed strides, and so does an elementwise product of two of them
// (MLX hands a contiguous kernel's input strides on to its output; a matmul copies an operand whose
// unit axes' strides are not its row length). Two rows: plain views of the product.
TEST(MatmulSiblings, ColumnPartsOfOneRowHavePackedStrides) {
  const mx::Stream s = mx::default_stream(mx::Device::cpu);
  const mx::array row = mx::reshape(mx::arange(10, mx::float32, s), {1, 1, 10}, s);
  std::vector<mx::array> parts = ColumnParts(row, {4}, s);
  ASSERT_EQ(parts.size(), 2u);
  mx::eval(parts);
  EXPECT_EQ(parts[0].shape(), (mx::Shape{1, 1, 4}));
  EXPECT_EQ(parts[0].strides(), (mx::Strides{4, 4, 1}));
  EXPECT_EQ(parts[1].strides(), (mx::Strides{6, 6, 1}));
  EXPECT_EQ(parts[1].data<float>()[0], 4.f);  // the same elements, no copy needed for them
  EXPECT_EQ(parts[1].data<float>()[5], 9.f);
  const std::vector<mx::array> halves = ColumnParts(row, {5}, s);
  mx::array product = mx::multiply(halves[0], halves[1], s);
  mx::eval(product);
  EXPECT_EQ(product.strides(), (mx::Strides{5, 5, 1}));
  EXPECT_EQ(product.data<float>()[4], 4.f * 9.f);
  const mx::array rows = mx::reshape(mx::arange(20, mx::float32, s), {2, 1, 10}, s);
  std::vector<mx::array> views = ColumnParts(rows, {4}, s);
  mx::eval(views);
  EXPECT_EQ(views[1].strides(), (mx::Strides{10, 10, 1}));
  EXPECT_EQ(views[1].data<float>()[0], 4.f);
}

// MatMulNBits siblings (runtime/nbits_siblings.h): one group per A and shared attributes; a member
// with a bias, a B another node reads, another block size stay apart; the merged rows are the
// members' bytes in graph order.
TEST(NBitsSiblings, SameInputAndAttributesMergeOthersDoNot) {
  auto bytes = [](int64_t n, uint8_t v) {
    Tensor t;
    t.type = ElemType::kUInt8;
    t.shape = {n, 1, 16};
    t.bytes.assign(static_cast<size_t>(n) * 16, v);
    return t;
  };
  GraphBuilder b;
  b.Input("x").Input("z");
  const char* names[] = {"gate", "up", "biased", "shared", "other_block", "other_input"};
  for (int j = 0; j < 6; ++j) {
    const std::string n = names[j];
    b.Constant("B_" + n, bytes(2 + j, static_cast<uint8_t>(j)))
        .Constant("s_" + n, FloatTensor({2 + j, 1}, std::vector<float>(2 + j, 1.f + j)));
    std::vector<std::string> ins = {j == 5 ? "z" : "x", "B_" + n, "s_" + n};
    if (j == 2) {
      b.Constant("bias", FloatTensor({4}, {1, 2, 3, 4}));
      ins.insert(ins.end(), {"", "", "bias"});
    }
    b.AddNode("MatMulNBits", ins, {"y_" + n});
  }
  b.AddNode("Identity", {"B_shared"}, {"copy"});  // B_shared read twice
  Graph g = b.Build();
  for (Node& n : g.nodes) {
    if (n.op_type != "MatMulNBits") continue;
    n.domain = "com.microsoft";
    const int64_t N = g.Value(n.inputs[1])->constant->shape[0];
    for (const auto& [attr, value] : std::map<std::string, int64_t>{
             {"K", 32}, {"N", N}, {"bits", 4}, {"block_size", n.outputs[0] == "y_other_block" ? 16 : 32}}) {
      n.attributes[attr].kind = Attribute::Kind::kInt;
      n.attributes[attr].i = value;
    }
  }
  const std::vector<NBitsSiblings> groups = FindNBitsSiblings(g, {});
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].nodes, (std::vector<size_t>{0, 1}));
  const std::shared_ptr<const Tensor> merged = MergeRows(g, groups[0], 1);
  EXPECT_EQ(merged->shape, (std::vector<int64_t>{5, 1, 16}));
  ASSERT_EQ(merged->bytes.size(), 80u);
  EXPECT_EQ(merged->bytes[31], 0);  // gate's 2 rows, then up's 3
  EXPECT_EQ(merged->bytes[32], 1);
  const std::shared_ptr<const Tensor> scales = MergeRows(g, groups[0], 2);
  EXPECT_EQ(scales->shape, (std::vector<int64_t>{5, 1}));
}

}  // namespace
}  // namespace mlx_ep
