#include "hotloop/models/max_pool2x2.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <limits>
#include <tuple>

namespace hotloop::models {
namespace {

// Values and gradients of max_pool2x2 and of LibTorch's max-pool for the
// same input and output gradient.
struct Pair {
  at::Tensor ours, theirs, grad_ours, grad_theirs;
};

Pair both(const at::Tensor& input, uint64_t seed = 0) {
  const at::Tensor a = input.detach().clone().requires_grad_(true);
  const at::Tensor b = input.detach().clone().requires_grad_(true);
  Pair pair;
  pair.ours = max_pool2x2(a);
  pair.theirs = at::max_pool2d(b, {2, 2}, {2, 2});
  at::manual_seed(seed);
  const at::Tensor grad = at::randn(pair.theirs.sizes()).to(input.dtype());
  pair.ours.backward(grad);
  pair.theirs.backward(grad);
  pair.grad_ours = a.grad();
  pair.grad_theirs = b.grad();
  return pair;
}

void expect_same(const Pair& pair, const std::string& what) {
  ASSERT_EQ(pair.ours.sizes(), pair.theirs.sizes()) << what;
  EXPECT_TRUE(
      pair.ours.equal(pair.theirs) ||
      // NaN != NaN: equal where both are NaN.
      at::equal(pair.ours.isnan(), pair.theirs.isnan()) &&
          at::equal(
              at::nan_to_num(pair.ours, 0), at::nan_to_num(pair.theirs, 0)))
      << what;
  EXPECT_TRUE(pair.grad_ours.equal(pair.grad_theirs)) << what;
}

TEST(MaxPool2x2, EqualsLibTorchsMaxPoolInValueAndGradient) {
  at::manual_seed(1);
  // Even and odd sides (the odd row and column are left out), 3-d and 4-d.
  for (const auto& sizes : std::vector<std::vector<int64_t>>{
           {4, 3, 8, 8},
           {2, 5, 7, 9},
           {3, 2, 3},
           {1, 1, 2, 2},
           {256, 4, 28, 28}}) {
    expect_same(both(at::randn(sizes)), c10::str(at::IntArrayRef(sizes)));
  }
}

TEST(MaxPool2x2, TiesGoToTheFirstMaximumAsInLibTorch) {
  // After a ReLU most windows hold several zeros; integer values tie often.
  at::manual_seed(2);
  expect_same(both(at::relu(at::randn({8, 4, 10, 10}))), "relu");
  expect_same(
      both(at::randint(0, 2, {8, 4, 10, 10}).to(at::kFloat)), "zeros and ones");
  // Every order of one maximum and three equal values, and all equal.
  const at::Tensor windows =
      at::tensor({1.f, 0.f, 0.f, 0.f, 0.f, 1.f, 0.f, 0.f, 0.f, 0.f,
                  1.f, 0.f, 0.f, 0.f, 0.f, 1.f, 2.f, 2.f, 2.f, 2.f});
  // [5 windows] -> one 2x10 image whose windows are those.
  const at::Tensor image =
      windows.view({5, 2, 2}).permute({1, 0, 2}).reshape({1, 1, 2, 10});
  const Pair pair = both(image);
  expect_same(pair, "orders");
  EXPECT_EQ(
      pair.grad_ours.sum().item<float>(), pair.grad_theirs.sum().item<float>());
}

TEST(MaxPool2x2, NansAndInfinitiesAsInLibTorch) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // Windows: one NaN, two NaNs, all -inf, +inf and NaN, -inf and a value.
  const at::Tensor windows =
      at::tensor({1.f,  nan,  3.f, 2.f, nan, 5.f, nan,  0.f,  -inf, -inf,
                  -inf, -inf, inf, 1.f, nan, 2.f, -inf, -inf, -inf, -7.f});
  const at::Tensor image =
      windows.view({5, 2, 2}).permute({1, 0, 2}).reshape({1, 1, 2, 10});
  expect_same(both(image), "nan and inf");
}

TEST(MaxPool2x2, EveryFloatingTypeAndTheFallbacks) {
  at::manual_seed(3);
  const at::Tensor x = at::relu(at::randn({2, 3, 6, 6}));
  for (const auto type : {at::kDouble, at::kBFloat16}) {
    expect_same(both(x.to(type)), c10::toString(type));
  }
  // channels_last and a strided view go to LibTorch's kernel, as equal.
  expect_same(
      both(x.contiguous(at::MemoryFormat::ChannelsLast)), "channels_last");
  expect_same(both(at::randn({2, 3, 12, 6}).slice(2, 0, 12, 2)), "strided");
}

TEST(MaxPool2x2, WithoutAGradientKeepsNoGraph) {
  const at::Tensor x = at::randn({2, 3, 6, 6}).requires_grad_(true);
  {
    at::NoGradGuard no_grad;
    const at::Tensor y = max_pool2x2(x);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_TRUE(y.equal(at::max_pool2d(x, {2, 2}, {2, 2})));
  }
  const at::Tensor y = max_pool2x2(x.detach());
  EXPECT_FALSE(y.requires_grad());
}

TEST(MaxPool2x2, SecondDerivativesAsLibTorchs) {
  // d/dx of <grad_input, v> through the gradient: the graph built by a
  // backward with create_graph, as for a gradient penalty.
  at::manual_seed(4);
  const at::Tensor x = at::randn({2, 2, 6, 6}, at::kDouble);
  auto gradient_of_gradient = [&](bool ours) {
    const at::Tensor input = x.clone().requires_grad_(true);
    const at::Tensor y =
        ours ? max_pool2x2(input) : at::max_pool2d(input, {2, 2}, {2, 2});
    const at::Tensor g = at::ones_like(y).requires_grad_(true);
    const at::Tensor grad_input =
        torch::autograd::grad({y}, {input}, {g}, true, true)[0];
    const at::Tensor grad_g =
        torch::autograd::grad({(grad_input * grad_input).sum()}, {g})[0];
    return std::make_tuple(grad_input, grad_g);
  };
  const auto [ours, ours_g] = gradient_of_gradient(true);
  const auto [theirs, theirs_g] = gradient_of_gradient(false);
  EXPECT_TRUE(ours.equal(theirs));
  EXPECT_TRUE(ours_g.equal(theirs_g));
}

TEST(MaxPool2x2, TheLayerPoolsAsTheFunction) {
  MaxPool2x2 layer;
  const at::Tensor x = at::randn({1, 2, 4, 4});
  EXPECT_TRUE(layer->forward(x).equal(at::max_pool2d(x, {2, 2}, {2, 2})));
  EXPECT_TRUE(layer->parameters().empty());
}

} // namespace
} // namespace hotloop::models
