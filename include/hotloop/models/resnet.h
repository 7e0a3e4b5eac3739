#pragma once

#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <string>

namespace hotloop::models {

/// Shape of a torchvision ResNet built from BasicBlocks.
struct ResNetOptions {
  /// `depth` is required; the rest are chainable setters.
  explicit ResNetOptions(int64_t depth);

  /// 18 (blocks 2-2-2-2) or 34 (3-4-6-3).
  TORCH_ARG(int64_t, depth);
  /// Output logits per sample; > 1.
  TORCH_ARG(int64_t, num_classes) = 1000;
  /// Channels of the input images; > 0.
  TORCH_ARG(int64_t, in_channels) = 3;
  /// "imagenet": 7x7 stride-2 conv then 3x3 stride-2 max-pool, as
  /// torchvision (224x224 inputs); "cifar": one 3x3 stride-1 conv and no
  /// max-pool, the usual recipe for 32x32 inputs.
  TORCH_ARG(std::string, stem) = "imagenet";
  /// Start every block's last BatchNorm (bn2) at weight 0, so each residual
  /// block begins as the identity (torchvision's option, Goyal et al. 2017).
  TORCH_ARG(bool, zero_init_residual) = false;
  /// In training, keep only each stage's (layer1..layer4) input and
  /// recompute the stage in backward (train::checkpoint); BatchNorm's
  /// running statistics are still updated once a step.
  TORCH_ARG(bool, activation_checkpointing) = false;
  /// dist::SyncBatchNorm in place of every BatchNorm2d, for a data-parallel
  /// run whose statistics cover every process's batch.
  TORCH_ARG(bool, sync_batchnorm) = false;
};

/// torchvision's `resnet18()` / `resnet34()`: stem -> layer1..layer4 of
/// BasicBlocks (64, 128, 256, 512 channels; layers 2-4 halve the size) ->
/// global average pool -> fc. Submodule names and parameter and buffer
/// shapes equal torchvision's state_dict keys (conv1, bn1,
/// layer1.0.conv1, ..., layer2.0.downsample.0, layer2.0.downsample.1, fc),
/// in the same order, so its weights load by name; the "cifar" stem only
/// changes conv1's kernel. Initialised as torchvision: convs (no bias)
/// kaiming_normal(fan_out, relu), BatchNorm weight 1 and bias 0, fc PyTorch's
/// default Linear init.
///
/// input: [B, in_channels, H, W] float; output: [B, num_classes] logits.
class ResNetImpl : public torch::nn::Module {
 public:
  /// Throws ConfigError naming the model option that is out of range.
  explicit ResNetImpl(ResNetOptions options);

  /// input: [B, in_channels, H, W] float -> [B, num_classes] logits.
  at::Tensor forward(const at::Tensor& input);

  /// Forward FLOPs for one [in_channels, height, width] input: 2 x the
  /// multiply-adds of every convolution and of fc (BatchNorm, ReLU, pooling
  /// and the residual additions, a few percent, are not counted, as usual).
  double flops_per_sample(int64_t height, int64_t width) const;

  /// The options the model was built with.
  const ResNetOptions& options() const {
    return options_;
  }

 private:
  ResNetOptions options_;
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::AnyModule bn1_;
  /// Only for the "imagenet" stem.
  torch::nn::MaxPool2d maxpool_{nullptr};
  torch::nn::Sequential layer1_{nullptr};
  torch::nn::Sequential layer2_{nullptr};
  torch::nn::Sequential layer3_{nullptr};
  torch::nn::Sequential layer4_{nullptr};
  torch::nn::Linear fc_{nullptr};
};
TORCH_MODULE(ResNet);

} // namespace hotloop::models
