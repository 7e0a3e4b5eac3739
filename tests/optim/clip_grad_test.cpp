#include "hotloop/optim/clip_grad.h"
#include "hotloop/core/error.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/nn/utils/clip_grad.h>

#include <limits>
#include <vector>

namespace hotloop::optim {
namespace {

// Three parameters with gradients of mixed sizes and one without.
std::vector<at::Tensor> parameters_with_grads(double grad_scale) {
  at::manual_seed(7);
  std::vector<at::Tensor> parameters;
  for (const auto& shape :
       std::vector<std::vector<int64_t>>{{3, 4}, {5}, {2, 2, 2}, {6}}) {
    parameters.push_back(at::randn(shape).requires_grad_());
  }
  for (size_t i = 0; i + 1 < parameters.size(); ++i) {
    parameters[i].mutable_grad() =
        at::randn(parameters[i].sizes()) * grad_scale;
  }
  return parameters;
}

std::vector<at::Tensor> grads_of(const std::vector<at::Tensor>& parameters) {
  std::vector<at::Tensor> grads;
  for (size_t i = 0; i + 1 < parameters.size(); ++i) {
    grads.push_back(parameters[i].grad().clone());
  }
  return grads;
}

// The same gradients, total norm and clipped result as LibTorch's
// clip_grad_norm_, bit for bit, for every norm and with or without clipping.
TEST(ClipGradNorm, MatchesLibTorchBitForBit) {
  const double inf = std::numeric_limits<double>::infinity();
  for (const double norm_type : {2.0, 1.0, 3.0, inf, 0.0}) {
    for (const double max_norm : {0.5, 1e3}) {
      SCOPED_TRACE(
          ::testing::Message() << "norm " << norm_type << ", max " << max_norm);
      auto ours = parameters_with_grads(2.0);
      auto theirs = parameters_with_grads(2.0);
      const at::Tensor total = clip_grad_norm_(ours, max_norm, norm_type);
      const double expected =
          torch::nn::utils::clip_grad_norm_(theirs, max_norm, norm_type);
      ASSERT_TRUE(total.defined());
      EXPECT_EQ(total.dim(), 0);
      EXPECT_EQ(total.item<double>(), expected);
      const auto a = grads_of(ours);
      const auto b = grads_of(theirs);
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_TRUE(a[i].equal(b[i])) << "gradient " << i;
      }
      EXPECT_FALSE(ours.back().grad().defined());
    }
  }
}

TEST(ClipGradNorm, ScalesToTheMaxNormOnlyWhenAbove) {
  auto parameters = parameters_with_grads(10.0);
  const auto before = grads_of(parameters);
  const double total = clip_grad_norm_(parameters, 1.0).item<double>();
  EXPECT_GT(total, 1.0);
  std::vector<at::Tensor> flat;
  for (const at::Tensor& grad : grads_of(parameters)) {
    flat.push_back(grad.flatten());
  }
  EXPECT_NEAR(at::cat(flat).norm().item<double>(), 1.0, 1e-5);
  // Below the limit the gradients keep their values (coefficient 1).
  const auto clipped = grads_of(parameters);
  clip_grad_norm_(parameters, 10.0);
  const auto again = grads_of(parameters);
  for (size_t i = 0; i < clipped.size(); ++i) {
    EXPECT_TRUE(again[i].equal(clipped[i]));
    EXPECT_TRUE(clipped[i].mul(total / 1.0).allclose(before[i], 1e-4, 1e-5));
  }
}

TEST(ClipGradNorm, NoGradientsGiveAnUndefinedNormAndBadOptionsAreErrors) {
  const std::vector<at::Tensor> parameters{at::ones({2}).requires_grad_()};
  EXPECT_FALSE(clip_grad_norm_(parameters, 1.0).defined());
  EXPECT_THAT(
      [&] { clip_grad_norm_(parameters, -1.0); },
      ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr(
          "clip_grad_norm_: max_norm must be a finite number >= 0, got -1")));
  EXPECT_THAT(
      [&] { clip_grad_norm_(parameters, 1.0, -2.0); },
      ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr(
          "clip_grad_norm_: norm_type must be >= 0 or inf, got -2")));
}

} // namespace
} // namespace hotloop::optim
