#include "hotloop/models/fashion_cnn.h"
#include "hotloop/core/error.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/conv.h>

namespace hotloop::models {
namespace {

using ::testing::HasSubstr;

int64_t parameter_count(torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters()) {
    n += p.numel();
  }
  return n;
}

TEST(FashionCnn, MapsImagesToLogitsPerClass) {
  FashionCnnOptions options;
  options.channels = {16, 32};
  FashionCnn model(options);
  EXPECT_EQ(
      model->forward(at::randn({3, 1, 28, 28})).sizes(),
      at::IntArrayRef({3, 10}));
}

TEST(FashionCnn, HasThePyTorchReferenceParameterCount) {
  // nn.Sequential(Conv2d(1,16,3,padding=1,bias=False), BatchNorm2d(16), ...,
  // Conv2d(16,32,...), BatchNorm2d(32), ..., Linear(1568,128), Linear(128,10))
  FashionCnnOptions options;
  options.channels = {16, 32};
  FashionCnn model(options);
  EXPECT_EQ(parameter_count(*model), 206970);
}

TEST(FashionCnn, ConvolutionsBeforeBatchNormHaveNoBias) {
  FashionCnn model;
  int convs = 0;
  for (const auto& module : model->modules(/*include_self=*/false)) {
    if (auto* conv = module->as<torch::nn::Conv2d>()) {
      EXPECT_FALSE(conv->bias.defined());
      ++convs;
    }
  }
  EXPECT_EQ(convs, 2);
}

TEST(FashionCnn, ConvBiasAddsOneBiasPerOutputChannel) {
  FashionCnnOptions options;
  options.channels = {16, 32};
  options.conv_bias = true;
  EXPECT_EQ(parameter_count(*FashionCnn(options)), 206970 + 16 + 32);
}

TEST(FashionCnn, FlopsCountTheMultiplyAddsOfConvolutionsAndLinears) {
  FashionCnnOptions options;
  options.channels = {16, 32};
  // 2 * (1*16*9*28*28 + 16*32*9*14*14 + 1568*128 + 128*10)
  EXPECT_DOUBLE_EQ(FashionCnn(options)->flops_per_sample(), 2436096.0);
}

TEST(FashionCnn, InvalidShapesNameTheOption) {
  FashionCnnOptions options;
  options.channels = {8, 8, 8, 8, 8, 8};
  EXPECT_THAT(
      [&] { FashionCnn{options}; },
      ::testing::ThrowsMessage<ConfigError>(
          HasSubstr("model.channels has 6 blocks, too many for 28x28 images")));
  options = {};
  options.dropout = 1.0;
  EXPECT_THAT(
      [&] { FashionCnn{options}; },
      ::testing::ThrowsMessage<ConfigError>(
          HasSubstr("model.dropout must be in [0, 1), got 1")));
}

} // namespace
} // namespace hotloop::models
