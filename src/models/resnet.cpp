#include "hotloop/models/resnet.h"

#include "hotloop/core/error.h"
#include "hotloop/dist/sync_batch_norm.h"
#include "hotloop/train/activation_checkpoint.h"

#include <ATen/ops/adaptive_avg_pool2d.h>
#include <torch/nn/init.h>
#include <torch/utils.h>

#include <algorithm>
#include <array>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace hotloop::models {

namespace {

namespace nn = torch::nn;

/// A conv without bias and with "same" padding for odd kernels, as
/// torchvision's conv3x3 / conv1x1 and its 7x7 stem.
nn::Conv2d conv(
    int64_t in,
    int64_t out,
    int64_t kernel,
    int64_t stride,
    int64_t groups = 1) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, kernel)
                        .stride(stride)
                        .padding(kernel / 2)
                        .groups(groups)
                        .bias(false));
}

/// BatchNorm2d, or SyncBatchNorm for statistics over every process.
nn::AnyModule norm(int64_t channels, bool sync) {
  return sync ? nn::AnyModule(dist::SyncBatchNorm(channels))
              : nn::AnyModule(nn::BatchNorm2d(channels));
}

/// What a depth is made of: blocks per stage, and Bottlenecks or not.
struct Layout {
  std::array<int64_t, 4> blocks;
  bool bottleneck;
  /// Output channels of a block of `planes`: 4 x planes for a Bottleneck.
  int64_t out(int64_t planes) const {
    return bottleneck ? 4 * planes : planes;
  }
};

Layout layout(int64_t depth) {
  switch (depth) {
    case 18:
      return {{2, 2, 2, 2}, false};
    case 34:
      return {{3, 4, 6, 3}, false};
    case 50:
      return {{3, 4, 6, 3}, true};
    case 101:
      return {{3, 4, 23, 3}, true};
    default: // 152, the options checked first
      return {{3, 8, 36, 3}, true};
  }
}

/// The channels of a Bottleneck's 1x1 -> 3x3 -> convs for `planes`.
int64_t inner_width(const ResNetOptions& options, int64_t planes) {
  return planes * options.width_per_group() / 64 * options.groups();
}

/// What torchvision's two blocks share: the norms registered under their
/// names, the shortcut (a 1x1 conv + BatchNorm where the shape changes) and
/// the last norm's weight, which zero_init_residual zeroes.
class BlockImpl : public nn::Module {
 public:
  at::Tensor last_norm_weight() {
    return last_norm_.ptr()->named_parameters(/*recurse=*/false)["weight"];
  }

 protected:
  nn::AnyModule add_norm(const std::string& name, int64_t channels, bool sync) {
    nn::AnyModule module = norm(channels, sync);
    register_module(name, module.ptr());
    last_norm_ = module;
    return module;
  }

  void add_downsample(int64_t in, int64_t out, int64_t stride, bool sync) {
    if (stride != 1 || in != out) {
      nn::Sequential downsample(conv(in, out, 1, stride));
      downsample->push_back(norm(out, sync));
      downsample_ = register_module("downsample", downsample);
    }
  }

  /// relu(x + the shortcut of the block's input).
  at::Tensor add_shortcut(at::Tensor x, const at::Tensor& input) {
    x += downsample_.is_empty() ? input : downsample_->forward(input);
    return x.relu_();
  }

 private:
  nn::AnyModule last_norm_;
  nn::Sequential downsample_{nullptr};
};

/// torchvision's BasicBlock: relu(bn2(conv2(relu(bn1(conv1(x))))) + x).
class BasicBlockImpl : public BlockImpl {
 public:
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride, bool sync)
      : conv1_(register_module("conv1", conv(in, out, 3, stride))),
        bn1_(add_norm("bn1", out, sync)),
        conv2_(register_module("conv2", conv(out, out, 3, 1))),
        bn2_(add_norm("bn2", out, sync)) {
    add_downsample(in, out, stride, sync);
  }

  at::Tensor forward(const at::Tensor& input) {
    at::Tensor x = bn1_.forward(conv1_->forward(input)).relu_();
    return add_shortcut(bn2_.forward(conv2_->forward(x)), input);
  }

 private:
  nn::Conv2d conv1_;
  nn::AnyModule bn1_;
  nn::Conv2d conv2_;
  nn::AnyModule bn2_;
};
TORCH_MODULE(BasicBlock);

/// torchvision's Bottleneck (V1.5: the stride on the 3x3 conv): 1x1 to
/// `width`, 3x3 in `groups` groups, 1x1 to `out`, each with a BatchNorm,
/// ReLU between, then the shortcut added and a last ReLU.
class BottleneckImpl : public BlockImpl {
 public:
  BottleneckImpl(
      int64_t in,
      int64_t width,
      int64_t out,
      int64_t stride,
      int64_t groups,
      bool sync)
      : conv1_(register_module("conv1", conv(in, width, 1, 1))),
        bn1_(add_norm("bn1", width, sync)),
        conv2_(register_module("conv2", conv(width, width, 3, stride, groups))),
        bn2_(add_norm("bn2", width, sync)),
        conv3_(register_module("conv3", conv(width, out, 1, 1))),
        bn3_(add_norm("bn3", out, sync)) {
    add_downsample(in, out, stride, sync);
  }

  at::Tensor forward(const at::Tensor& input) {
    at::Tensor x = bn1_.forward(conv1_->forward(input)).relu_();
    x = bn2_.forward(conv2_->forward(x)).relu_();
    return add_shortcut(bn3_.forward(conv3_->forward(x)), input);
  }

 private:
  nn::Conv2d conv1_;
  nn::AnyModule bn1_;
  nn::Conv2d conv2_;
  nn::AnyModule bn2_;
  nn::Conv2d conv3_;
  nn::AnyModule bn3_;
};
TORCH_MODULE(Bottleneck);

/// A stage of `blocks` blocks of `planes`, the first one changing channels
/// (from `in`) and stride.
nn::Sequential make_layer(
    const ResNetOptions& options,
    int64_t in,
    int64_t planes,
    int64_t blocks,
    int64_t stride) {
  const Layout shape = layout(options.depth());
  const bool sync = options.sync_batchnorm();
  const int64_t out = shape.out(planes);
  nn::Sequential layer;
  for (int64_t i = 0; i < blocks; ++i) {
    const int64_t block_in = i == 0 ? in : out;
    const int64_t block_stride = i == 0 ? stride : 1;
    if (shape.bottleneck) {
      layer->push_back(Bottleneck(
          block_in,
          inner_width(options, planes),
          out,
          block_stride,
          options.groups(),
          sync));
    } else {
      layer->push_back(BasicBlock(block_in, out, block_stride, sync));
    }
  }
  return layer;
}

constexpr std::array<int64_t, 4> kPlanes = {64, 128, 256, 512};

} // namespace

ResNetOptions::ResNetOptions(int64_t depth) : depth_(depth) {}

ResNetImpl::ResNetImpl(ResNetOptions options) : options_(std::move(options)) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.depth() == 18 || options_.depth() == 34 ||
          options_.depth() == 50 || options_.depth() == 101 ||
          options_.depth() == 152,
      "model.depth must be 18, 34, 50, 101 or 152, got ",
      options_.depth());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.groups() > 0 && options_.width_per_group() > 0,
      "model.groups and model.width_per_group must be positive, got ",
      options_.groups(),
      " and ",
      options_.width_per_group());
  HOTLOOP_CHECK_AS(
      ConfigError,
      layout(options_.depth()).bottleneck ||
          (options_.groups() == 1 && options_.width_per_group() == 64),
      "model.groups and model.width_per_group must be 1 and 64 for depth ",
      options_.depth(),
      " (BasicBlocks, as torchvision), got ",
      options_.groups(),
      " and ",
      options_.width_per_group());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.num_classes() > 1,
      "model.num_classes must be > 1, got ",
      options_.num_classes());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.in_channels() > 0,
      "model.in_channels must be positive, got ",
      options_.in_channels());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.stem() == "imagenet" || options_.stem() == "cifar",
      "model.stem must be imagenet or cifar, got '",
      options_.stem(),
      "'");

  const bool imagenet = options_.stem() == "imagenet";
  conv1_ = register_module(
      "conv1",
      imagenet ? conv(options_.in_channels(), 64, 7, 2)
               : conv(options_.in_channels(), 64, 3, 1));
  const bool sync = options_.sync_batchnorm();
  bn1_ = norm(64, sync);
  register_module("bn1", bn1_.ptr());
  if (imagenet) {
    maxpool_ = register_module(
        "maxpool", nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)));
  }
  const Layout shape = layout(options_.depth());
  const std::array<nn::Sequential*, 4> layers = {
      &layer1_, &layer2_, &layer3_, &layer4_};
  int64_t in = 64;
  for (size_t stage = 0; stage < layers.size(); ++stage) {
    *layers[stage] = register_module(
        "layer" + std::to_string(stage + 1),
        make_layer(
            options_, in, kPlanes[stage], shape.blocks[stage], stage ? 2 : 1));
    in = shape.out(kPlanes[stage]);
  }
  fc_ = register_module("fc", nn::Linear(in, options_.num_classes()));

  torch::NoGradGuard no_grad;
  for (const auto& module : modules(/*include_self=*/false)) {
    if (auto* conv = module->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(
          conv->weight, /*a=*/0, torch::kFanOut, torch::kReLU);
    } else if (auto* bn = module->as<nn::BatchNorm2d>()) {
      nn::init::ones_(bn->weight);
      nn::init::zeros_(bn->bias);
    } else if (auto* sync_bn = module->as<dist::SyncBatchNorm>()) {
      nn::init::ones_(sync_bn->weight);
      nn::init::zeros_(sync_bn->bias);
    }
  }
  if (options_.zero_init_residual()) {
    for (const auto& module : modules(/*include_self=*/false)) {
      if (auto* block = dynamic_cast<BlockImpl*>(module.get())) {
        nn::init::zeros_(block->last_norm_weight());
      }
    }
  }
}

at::Tensor ResNetImpl::forward(const at::Tensor& input) {
  at::Tensor x = bn1_.forward(conv1_->forward(input)).relu_();
  if (!maxpool_.is_empty()) {
    x = maxpool_->forward(x);
  }
  for (nn::Sequential layer : {layer1_, layer2_, layer3_, layer4_}) {
    if (options_.activation_checkpointing() && is_training()) {
      x = train::checkpoint(
          [layer](const at::Tensor& in) mutable { return layer->forward(in); },
          x,
          layer.ptr().get());
    } else {
      x = layer->forward(x);
    }
  }
  x = at::adaptive_avg_pool2d(x, {1, 1}).flatten(/*start_dim=*/1);
  return fc_->forward(x);
}

double ResNetImpl::flops_per_sample(int64_t height, int64_t width) const {
  // Output size of a conv or pool with "same"-style padding k / 2.
  auto out = [](int64_t size, int64_t kernel, int64_t stride) {
    return (size + 2 * (kernel / 2) - kernel) / stride + 1;
  };
  int64_t h = height, w = width;
  double flops = 0;
  // A conv from the current size; returns its output size.
  auto conv = [&](int64_t in,
                  int64_t out_channels,
                  int64_t kernel,
                  int64_t stride,
                  int64_t groups) {
    const int64_t oh = out(h, kernel, stride), ow = out(w, kernel, stride);
    flops += 2.0 * in / groups * out_channels * kernel * kernel * oh * ow;
    return std::make_pair(oh, ow);
  };
  if (options_.stem() == "imagenet") {
    std::tie(h, w) = conv(options_.in_channels(), 64, 7, 2, 1);
    h = out(h, 3, 2); // max-pool
    w = out(w, 3, 2);
  } else {
    std::tie(h, w) = conv(options_.in_channels(), 64, 3, 1, 1);
  }
  const Layout shape = layout(options_.depth());
  int64_t in = 64;
  for (size_t stage = 0; stage < kPlanes.size(); ++stage) {
    const int64_t out_channels = shape.out(kPlanes[stage]);
    for (int64_t block = 0; block < shape.blocks[stage]; ++block) {
      const int64_t stride = stage > 0 && block == 0 ? 2 : 1;
      if (stride != 1 || in != out_channels) {
        conv(in, out_channels, 1, stride, 1); // downsample, from the input
      }
      if (shape.bottleneck) {
        const int64_t width = inner_width(options_, kPlanes[stage]);
        conv(in, width, 1, 1, 1);
        std::tie(h, w) = conv(width, width, 3, stride, options_.groups());
        conv(width, out_channels, 1, 1, 1);
      } else {
        std::tie(h, w) = conv(in, out_channels, 3, stride, 1);
        conv(out_channels, out_channels, 3, 1, 1);
      }
      in = out_channels;
    }
  }
  return flops + 2.0 * in * options_.num_classes();
}

namespace {

struct Builder {
  std::string name;
  int64_t depth;
  int64_t groups;
  int64_t width_per_group;
};

const std::vector<Builder>& builders() {
  static const std::vector<Builder> all = {
      {"resnet18", 18, 1, 64},
      {"resnet34", 34, 1, 64},
      {"resnet50", 50, 1, 64},
      {"resnet101", 101, 1, 64},
      {"resnet152", 152, 1, 64},
      {"resnext50_32x4d", 50, 32, 4},
      {"resnext101_32x8d", 101, 32, 8},
      {"resnext101_64x4d", 101, 64, 4},
      {"wide_resnet50_2", 50, 1, 128},
      {"wide_resnet101_2", 101, 1, 128}};
  return all;
}

} // namespace

const std::vector<std::string>& resnet_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Builder& builder : builders()) {
      out.push_back(builder.name);
    }
    return out;
  }();
  return names;
}

bool is_resnet_name(const std::string& name) {
  const auto& names = resnet_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

ResNetOptions resnet_options(const std::string& name) {
  for (const Builder& builder : builders()) {
    if (builder.name == name) {
      return ResNetOptions(builder.depth)
          .groups(builder.groups)
          .width_per_group(builder.width_per_group);
    }
  }
  std::string known;
  for (const std::string& each : resnet_names()) {
    known += (known.empty() ? "" : ", ") + each;
  }
  throw ConfigError(
      "model.name '" + name + "' is not a ResNet; expected one of " + known);
}

} // namespace hotloop::models
