// CollapseReshapeChains (runtime/reshape_chains.h) on hand-built MLX graphs.
#include <gtest/gtest.h>

#include <string_view>
#include <vector>

#include "mlx/ops.h"
#include "mlx/primitives.h"
#include "mlx/transforms.h"
#include "runtime/reshape_chains.h"

namespace mlx_ep {
namespace {

bool IsReshape(const mx::array& a) {
  return a.has_primitive() && std::string_view(a.primitive().name()) == "Reshape";
}

TEST(ReshapeChains, AReshapeReadsPastTheReshapesBeforeIt) {
  const mx::array x = mx::arange(24.f);
  const mx::array y = mx::reshape(mx::reshape(mx::reshape(mx::exp(x), {2, 12}), {2, 3, 4}), {6, 4});
  std::vector<mx::array> outputs = {mx::add(y, mx::array(1.f))};
  EXPECT_EQ(CollapseReshapeChains(outputs), 2u);
  const mx::array reshape = outputs[0].inputs()[0];
  ASSERT_TRUE(IsReshape(reshape));
  EXPECT_EQ(std::string_view(reshape.inputs()[0].primitive().name()), "Exp");
  EXPECT_TRUE(mx::allclose(outputs[0], mx::reshape(mx::exp(x) + 1.f, {6, 4})).item<bool>());
}

TEST(ReshapeChains, AChainBackToItsInputsShapeIsItsInput) {
  // A pointwise Conv's product reshaped to an image and back to a matrix for the next product.
  const mx::array x = mx::ones({2, 8, 16}), w = mx::ones({4, 8});
  const mx::array product = mx::matmul(w, x);
  const mx::array back = mx::reshape(mx::reshape(product, {2, 4, 4, 4}), {2, 4, 16});
  std::vector<mx::array> outputs = {mx::matmul(mx::ones({3, 4}), back), back};
  EXPECT_EQ(CollapseReshapeChains(outputs), 2u);
  EXPECT_EQ(outputs[0].inputs()[1].id(), product.id());  // read directly
  EXPECT_TRUE(IsReshape(outputs[1]));                    // an output stays an output
  EXPECT_TRUE(mx::array_equal(outputs[0], mx::full({2, 3, 16}, 32.f)).item<bool>());
  EXPECT_TRUE(mx::array_equal(outputs[1], mx::full({2, 4, 16}, 8.f)).item<bool>());
}

TEST(ReshapeChains, LeavesEvaluatedReshapesAndOtherViews) {
  const mx::array x = mx::ones({4, 6});
  const mx::array evaluated = mx::reshape(x, {6, 4});
  mx::eval(evaluated);
  std::vector<mx::array> outputs = {mx::reshape(mx::transpose(mx::reshape(x, {2, 12})), {3, 8}),
                                    mx::reshape(evaluated, {24})};
  EXPECT_EQ(CollapseReshapeChains(outputs), 0u);
}

}  // namespace
}  // namespace mlx_ep
