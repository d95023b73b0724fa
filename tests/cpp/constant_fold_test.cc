// ConstantFolder (runtime/constant_fold.h) on hand-built MLX graphs: what it folds, what it leaves,
// and that a later trace with its own scalars reuses the first trace's value.
#include <gtest/gtest.h>

#include <vector>

#include "mlx/ops.h"
#include "mlx/transforms.h"
#include "runtime/constant_fold.h"

namespace mlx_ep {
namespace {

/** A trace of x @ (transpose(weight) * 0.5): the scale a new leaf each time, as translations
 *  make their scalars. */
std::vector<mx::array> Trace(const mx::array& x, const mx::array& weight) {
  const mx::array w = mx::multiply(mx::transpose(weight), mx::array(0.5f));
  return {mx::matmul(x, w)};
}

TEST(ConstantFold, FoldsOnceAndALaterTraceReusesTheValue) {
  const mx::array weight = mx::ones({64, 64});  // a plan constant: 16 KiB
  const mx::array x = mx::ones({2, 64});
  mx::eval({weight, x});
  ConstantFolder folder;
  std::vector<mx::array> first = Trace(x, weight);
  EXPECT_EQ(folder.Fold(first, {x}), 3u);  // Transpose, the scalar's Broadcast, Multiply
  const mx::array folded = first[0].inputs()[1];
  EXPECT_TRUE(folded.is_available());
  std::vector<mx::array> second = Trace(x, weight);
  EXPECT_EQ(folder.Fold(second, {x}), 3u);
  EXPECT_EQ(second[0].inputs()[1].id(), folded.id());  // the first trace's value, not a new one
  mx::eval(second);
  EXPECT_TRUE(mx::array_equal(second[0], mx::full({2, 64}, 32.f)).item<bool>());
}

TEST(ConstantFold, LeavesWhatDependsOnInputsOrIsSmallOrGrows) {
  const mx::array big = mx::ones({64, 64}, mx::uint8);  // 4 KiB
  const mx::array small = mx::ones({8, 8});             // 256 bytes
  const mx::array x = mx::ones({64, 64}), y = mx::ones({8, 8});
  mx::eval({big, small, x, y});
  ConstantFolder folder;
  std::vector<mx::array> outputs = {mx::add(y, mx::transpose(small)),           // under 4 KiB of constants
                                    mx::add(x, mx::astype(big, mx::float32)),   // 4x the bytes it reads
                                    mx::multiply(mx::exp(x), mx::array(2.f))};  // reads the input
  EXPECT_EQ(folder.Fold(outputs, {x, y}), 0u);
  for (const mx::array& out : outputs) EXPECT_FALSE(out.inputs()[1].is_available());
}

TEST(ConstantFold, FoldsWhatReadsAHeldArrayHoweverSmall) {
  const mx::array bias = mx::ones({8, 8});   // an initializer of 256 bytes, held by the plan
  const mx::array other = mx::ones({8, 8});  // a constant the trace made
  const mx::array y = mx::ones({8, 8});
  mx::eval({bias, other, y});
  const mx::array scale = mx::arange(8.f);  // held too, broadcast to the input's shape
  const mx::array three = mx::array({3.f}), z = mx::ones({2});  // a held scalar, another input
  mx::eval({scale, three, z});
  ConstantFolder folder({bias.id(), scale.id(), three.id()});
  std::vector<mx::array> outputs = {mx::add(y, mx::transpose(bias)), mx::add(y, mx::transpose(other)),
                                    mx::multiply(y, mx::broadcast_to(mx::reshape(scale, {8, 1}), {8, 8})),
                                    mx::add(z, mx::broadcast_to(three, {2}))};
  EXPECT_EQ(folder.Fold(outputs, {y, z}), 2u);  // the Transpose, and the Reshape below the Broadcast
  EXPECT_TRUE(outputs[0].inputs()[1].is_available());
  EXPECT_FALSE(outputs[1].inputs()[1].is_available());
  // A fold per input shape otherwise: the broadcast stays, what it reads folds.
  EXPECT_FALSE(outputs[2].inputs()[1].is_available());
  EXPECT_TRUE(outputs[2].inputs()[1].inputs()[0].is_available());
  // A held scalar broadcast to an input's shape stays a scalar that compiled functions take as an
  // input (runtime/scalars.h), not a fold per shape.
  EXPECT_FALSE(outputs[3].inputs()[1].is_available());
}

/** A trace of a batched product with a weight and its bias column concatenated (ConvCpu's form):
 *  the product broadcasts the weight over the batch. */
std::vector<mx::array> BatchedTrace(const mx::array& x, const mx::array& weight, const mx::array& bias) {
  const mx::array wb = mx::concatenate({mx::reshape(weight, {1, 32, 64}), mx::reshape(bias, {1, 32, 1})}, 2);
  return {mx::matmul(mx::broadcast_to(wb, {4, 32, 65}), x)};
}

TEST(ConstantFold, ABroadcastStaysAndWhatItReadsFolds) {
  const mx::array weight = mx::ones({32, 64}), bias = mx::ones({32});
  const mx::array x = mx::ones({4, 65, 3});
  mx::eval({weight, bias, x});
  ConstantFolder folder({weight.id(), bias.id()});
  std::vector<mx::array> first = BatchedTrace(x, weight, bias);
  EXPECT_EQ(folder.Fold(first, {x}), 3u);  // the Concatenate and its two Reshapes
  const mx::array broadcast = first[0].inputs()[0];
  EXPECT_FALSE(broadcast.is_available());
  const mx::array folded = broadcast.inputs()[0];
  EXPECT_TRUE(folded.is_available());
  std::vector<mx::array> second = BatchedTrace(x, weight, bias);
  EXPECT_EQ(folder.Fold(second, {x}), 3u);
  EXPECT_EQ(second[0].inputs()[0].inputs()[0].id(), folded.id());  // the first trace's value
  mx::eval(second);
  EXPECT_TRUE(mx::array_equal(second[0], mx::full({4, 32, 3}, 65.f)).item<bool>());
}

TEST(ConstantFold, AValueThatComputesMoreBytesStaysWhole) {
  const mx::array words = mx::ones({64, 64}, mx::uint8);  // 4 KiB, held
  const mx::array x = mx::ones({64, 64});
  mx::eval({words, x});
  ConstantFolder folder({words.id()});
  // A dequantization's shape: its parts folded would be held beside the weights.
  std::vector<mx::array> outputs = {mx::add(x, mx::astype(mx::transpose(words), mx::float32))};
  EXPECT_EQ(folder.Fold(outputs, {x}), 0u);
  EXPECT_FALSE(outputs[0].inputs()[1].inputs()[0].is_available());
}

}  // namespace
}  // namespace mlx_ep
