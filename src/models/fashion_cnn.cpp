#include "hotloop/models/fashion_cnn.h"

#include "hotloop/core/error.h"
#include "hotloop/dist/sync_batch_norm.h"
#include "hotloop/models/max_pool2x2.h"

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

namespace hotloop::models {

FashionCnnImpl::FashionCnnImpl(FashionCnnOptions options)
    : options_(std::move(options)) {
  namespace nn = torch::nn;
  HOTLOOP_CHECK_AS(
      ConfigError,
      !options_.channels.empty(),
      "model.channels must name at least one conv block");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.num_classes > 1,
      "model.num_classes must be > 1, got ",
      options_.num_classes);
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.hidden >= 0,
      "model.hidden must be >= 0, got ",
      options_.hidden);
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.dropout >= 0 && options_.dropout < 1,
      "model.dropout must be in [0, 1), got ",
      options_.dropout);

  features_ = nn::Sequential();
  int64_t in = options_.in_channels;
  int64_t size = options_.image_size;
  for (int64_t out : options_.channels) {
    HOTLOOP_CHECK_AS(
        ConfigError, out > 0, "model.channels must be positive, got ", out);
    HOTLOOP_CHECK_AS(
        ConfigError,
        size >= 2,
        "model.channels has ",
        options_.channels.size(),
        " blocks, too many for ",
        options_.image_size,
        "x",
        options_.image_size,
        " images");
    features_->push_back(nn::Conv2d(
        nn::Conv2dOptions(in, out, 3).padding(1).bias(options_.conv_bias)));
    if (options_.sync_batchnorm) {
      features_->push_back(dist::SyncBatchNorm(out));
    } else {
      features_->push_back(nn::BatchNorm2d(out));
    }
    features_->push_back(nn::ReLU(nn::ReLUOptions().inplace(true)));
    features_->push_back(MaxPool2x2());
    in = out;
    size /= 2;
  }
  head_ = nn::Sequential();
  head_->push_back(nn::Flatten());
  int64_t width = in * size * size;
  if (options_.hidden > 0) {
    head_->push_back(nn::Linear(width, options_.hidden));
    head_->push_back(nn::ReLU(nn::ReLUOptions().inplace(true)));
    width = options_.hidden;
  }
  if (options_.dropout > 0) {
    head_->push_back(nn::Dropout(options_.dropout));
  }
  head_->push_back(nn::Linear(width, options_.num_classes));
  register_module("features", features_);
  register_module("head", head_);
}

at::Tensor FashionCnnImpl::forward(const at::Tensor& input) {
  return head_->forward(features_->forward(input));
}

double FashionCnnImpl::flops_per_sample() const {
  double flops = 0;
  int64_t in = options_.in_channels;
  int64_t size = options_.image_size;
  for (int64_t out : options_.channels) {
    // 3x3 convolution with padding 1 keeps the size; the pool halves it.
    flops += 2.0 * in * out * 9 * size * size;
    in = out;
    size /= 2;
  }
  int64_t width = in * size * size;
  if (options_.hidden > 0) {
    flops += 2.0 * width * options_.hidden;
    width = options_.hidden;
  }
  return flops + 2.0 * width * options_.num_classes;
}

} // namespace hotloop::models
