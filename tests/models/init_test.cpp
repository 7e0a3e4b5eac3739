#include "hotloop/models/init.h"
#include "hotloop/core/error.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/utils.h>

#include <string>
#include <utility>
#include <vector>

namespace hotloop::models {
namespace {

namespace nn = torch::nn;
using hotloop::testing::Reference;

// The network of tests/reference/make_init_reference.py, built after the
// same seed: PyTorch's default init draws as LibTorch's does.
nn::Sequential network() {
  torch::manual_seed(0);
  return nn::Sequential(
      nn::Conv2d(nn::Conv2dOptions(2, 3, 3)),
      nn::BatchNorm2d(3),
      nn::Flatten(),
      nn::Linear(12, 5),
      nn::Embedding(6, 4),
      nn::LayerNorm(nn::LayerNormOptions({4})),
      nn::Linear(nn::LinearOptions(4, 3).bias(false)));
}

TEST(InitWeights, EachSchemeEqualsTorchNnInitOnTheSameGenerator) {
  const Reference& reference = Reference::get("init.txt");
  const std::vector<std::pair<std::string, InitOptions>> cases = {
      {"xavier_uniform", InitOptions().scheme("xavier_uniform")},
      {"xavier_normal", InitOptions().scheme("xavier_normal")},
      {"kaiming_uniform", InitOptions().scheme("kaiming_uniform")},
      {"kaiming_normal_fan_out",
       InitOptions().scheme("kaiming_normal").mode("fan_out")},
      {"orthogonal", InitOptions().scheme("orthogonal")},
      {"trunc_normal", InitOptions().scheme("trunc_normal").std(0.02)},
  };
  for (const auto& [name, options] : cases) {
    nn::Sequential net = network();
    const at::Tensor before = net->named_parameters()["3.weight"].clone();
    init_weights(*net, options);
    const auto expected = reference.all(name, "param");
    ASSERT_EQ(expected.size(), net->named_parameters().size()) << name;
    for (const auto& entry : expected) {
      const at::Tensor want = hotloop::testing::to_tensor(entry, at::kFloat);
      const at::Tensor got = net->named_parameters()[entry.name];
      EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-7))
          << name << " " << entry.name << ": max difference "
          << (got - want).abs().max().item<double>();
    }
    EXPECT_FALSE(net->named_parameters()["3.weight"].equal(before)) << name;
  }
  // trunc_normal stays within two standard deviations.
  nn::Linear wide(200, 300);
  init_weights(*wide, InitOptions().scheme("trunc_normal").std(0.1));
  EXPECT_LE(wide->weight.abs().max().item<double>(), 0.2);
  EXPECT_NEAR(wide->weight.std().item<double>(), 0.088, 0.003);
}

TEST(InitWeights, DefaultLeavesPyTorchsInitAndBadOptionsAreNamed) {
  nn::Sequential net = network();
  const at::Tensor before = net->named_parameters()["0.weight"].clone();
  init_weights(*net, InitOptions());
  EXPECT_TRUE(net->named_parameters()["0.weight"].equal(before));
  EXPECT_THAT(
      [&] { init_weights(*net, InitOptions().scheme("he")); },
      ::testing::ThrowsMessage<ConfigError>(
          ::testing::HasSubstr("model.init must be default, xavier_uniform")));
  EXPECT_THAT(
      [&] {
        init_weights(
            *net, InitOptions().scheme("kaiming_normal").mode("fan_both"));
      },
      ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr(
          "model.init_mode must be fan_in or fan_out, got 'fan_both'")));
  EXPECT_THAT(
      [&] {
        init_weights(
            *net, InitOptions().scheme("kaiming_normal").nonlinearity("gelu"));
      },
      ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr(
          "model.init_nonlinearity must be relu, leaky_relu, tanh, sigmoid "
          "or linear, got 'gelu'")));
}

} // namespace
} // namespace hotloop::models
