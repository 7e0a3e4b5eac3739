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
#include <vector>

namespace hotloop::models {

/// Shape of a torchvision ResNet: BasicBlocks (depth 18, 34) or Bottlenecks
/// (50, 101, 152; with `groups` and `width_per_group` also ResNeXt and
/// Wide ResNet).
struct ResNetOptions {
  /// `depth` is required; the rest are chainable setters.
  explicit ResNetOptions(int64_t depth);

  /// 18 (BasicBlocks 2-2-2-2), 34 (3-4-6-3), 50 (Bottlenecks 3-4-6-3),
  /// 101 (3-4-23-3) or 152 (3-8-36-3).
  TORCH_ARG(int64_t, depth);
  /// Groups of each Bottleneck's 3x3 conv (ResNeXt's cardinality: 32 for
  /// resnext50_32x4d); 1 for BasicBlocks.
  TORCH_ARG(int64_t, groups) = 1;
  /// Channels per group of a Bottleneck's inner width at 64 planes (4 for
  /// resnext50_32x4d, 128 for wide_resnet50_2); the inner width of a stage
  /// of `planes` is planes * width_per_group / 64 * groups. 64 for
  /// BasicBlocks.
  TORCH_ARG(int64_t, width_per_group) = 64;
  /// Output logits per sample; > 1.
  TORCH_ARG(int64_t, num_classes) = 1000;
  /// Channels of the input images; > 0.
  TORCH_ARG(int64_t, in_channels) = 3;
  /// "imagenet": 7x7 stride-2 conv then 3x3 stride-2 max-pool, as
  /// torchvision (224x224 inputs); "cifar": one 3x3 stride-1 conv and no
  /// max-pool, the usual recipe for 32x32 inputs.
  TORCH_ARG(std::string, stem) = "imagenet";
  /// Start every block's last BatchNorm (bn2, a Bottleneck's bn3) at weight 0,
  /// so each residual block begins as the identity (torchvision's option, Goyal
  /// et al. 2017).
  TORCH_ARG(bool, zero_init_residual) = false;
  /// In training, keep only each stage's (layer1..layer4) input and
  /// recompute the stage in backward (train::checkpoint); BatchNorm's
  /// running statistics are still updated once a step.
  TORCH_ARG(bool, activation_checkpointing) = false;
  /// dist::SyncBatchNorm in place of every BatchNorm2d, for a data-parallel
  /// run whose statistics cover every process's batch.
  TORCH_ARG(bool, sync_batchnorm) = false;
};

/// torchvision's `resnet18()` ... `resnet152()`, `resnext50_32x4d()`,
/// `wide_resnet50_2()` and their kin: stem -> layer1..layer4 of blocks
/// (64, 128, 256, 512 planes; layers 2-4 halve the size, on a Bottleneck's
/// 3x3 conv as torchvision's "ResNet V1.5") -> global average pool -> fc. A
/// BasicBlock is two 3x3 convs; a Bottleneck 1x1 (to the inner width), 3x3
/// (grouped) and 1x1 (to 4 x planes). Submodule names and parameter and
/// buffer shapes equal torchvision's state_dict keys (conv1, bn1,
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

/// torchvision's ResNet builders by name, in this order: resnet18,
/// resnet34, resnet50, resnet101, resnet152, resnext50_32x4d,
/// resnext101_32x8d, resnext101_64x4d, wide_resnet50_2, wide_resnet101_2.
const std::vector<std::string>& resnet_names();

/// Whether `name` is one of resnet_names().
bool is_resnet_name(const std::string& name);

/// The options of torchvision's builder `name` (depth, groups,
/// width_per_group; the rest at their defaults). Throws ConfigError naming
/// model.name and listing resnet_names() for another name.
ResNetOptions resnet_options(const std::string& name);

} // namespace hotloop::models
