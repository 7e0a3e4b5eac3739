#include "hotloop/models/resnet.h"

#include "hotloop/core/error.h"
#include "hotloop/dist/sync_batch_norm.h"
#include "hotloop/train/activation_checkpoint.h"

#include <ATen/ops/adaptive_avg_pool2d.h>
#include <torch/nn/init.h>
#include <torch/utils.h>

#include <array>
#include <tuple>
#include <utility>

namespace hotloop::models {

namespace {

namespace nn = torch::nn;

/// A conv without bias and with "same" padding for odd kernels, as
/// torchvision's conv3x3 / conv1x1 and its 7x7 stem.
nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, kernel)
                        .stride(stride)
                        .padding(kernel / 2)
                        .bias(false));
}

/// BatchNorm2d, or SyncBatchNorm for statistics over every process.
nn::AnyModule norm(int64_t channels, bool sync) {
  return sync ? nn::AnyModule(dist::SyncBatchNorm(channels))
              : nn::AnyModule(nn::BatchNorm2d(channels));
}

/// torchvision's BasicBlock: relu(bn2(conv2(relu(bn1(conv1(x))))) + x), with
/// a 1x1 conv + BatchNorm shortcut (`downsample`) where the shape changes.
class BasicBlockImpl : public nn::Module {
 public:
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride, bool sync)
      : conv1_(register_module("conv1", conv(in, out, 3, stride))),
        bn1_(add("bn1", norm(out, sync))),
        conv2_(register_module("conv2", conv(out, out, 3, 1))),
        bn2_(add("bn2", norm(out, sync))) {
    if (stride != 1 || in != out) {
      nn::Sequential downsample(conv(in, out, 1, stride));
      downsample->push_back(norm(out, sync));
      downsample_ = register_module("downsample", downsample);
    }
  }

  at::Tensor forward(const at::Tensor& input) {
    at::Tensor x = bn1_.forward(conv1_->forward(input)).relu_();
    x = bn2_.forward(conv2_->forward(x));
    x += downsample_.is_empty() ? input : downsample_->forward(input);
    return x.relu_();
  }

  at::Tensor bn2_weight() {
    return bn2_.ptr()->named_parameters(/*recurse=*/false)["weight"];
  }

 private:
  nn::AnyModule add(const std::string& name, nn::AnyModule module) {
    register_module(name, module.ptr());
    return module;
  }

  nn::Conv2d conv1_;
  nn::AnyModule bn1_;
  nn::Conv2d conv2_;
  nn::AnyModule bn2_;
  nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(BasicBlock);

/// `blocks` BasicBlocks, the first one changing channels and stride.
nn::Sequential make_layer(
    int64_t in, int64_t out, int64_t blocks, int64_t stride, bool sync) {
  nn::Sequential layer;
  layer->push_back(BasicBlock(in, out, stride, sync));
  for (int64_t i = 1; i < blocks; ++i) {
    layer->push_back(BasicBlock(out, out, 1, sync));
  }
  return layer;
}

} // namespace

ResNetOptions::ResNetOptions(int64_t depth) : depth_(depth) {}

ResNetImpl::ResNetImpl(ResNetOptions options) : options_(std::move(options)) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.depth() == 18 || options_.depth() == 34,
      "model.depth must be 18 or 34 (the BasicBlock ResNets), got ",
      options_.depth());
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
  const std::array<int64_t, 4> blocks =
      options_.depth() == 18 ? std::array<int64_t, 4>{2, 2, 2, 2}
                             : std::array<int64_t, 4>{3, 4, 6, 3};
  layer1_ = register_module("layer1", make_layer(64, 64, blocks[0], 1, sync));
  layer2_ = register_module("layer2", make_layer(64, 128, blocks[1], 2, sync));
  layer3_ = register_module("layer3", make_layer(128, 256, blocks[2], 2, sync));
  layer4_ = register_module("layer4", make_layer(256, 512, blocks[3], 2, sync));
  fc_ = register_module("fc", nn::Linear(512, options_.num_classes()));

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
      if (auto* block = module->as<BasicBlock>()) {
        nn::init::zeros_(block->bn2_weight());
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
  auto conv =
      [&](int64_t in, int64_t out_channels, int64_t kernel, int64_t stride) {
        const int64_t oh = out(h, kernel, stride), ow = out(w, kernel, stride);
        flops += 2.0 * in * out_channels * kernel * kernel * oh * ow;
        return std::make_pair(oh, ow);
      };
  if (options_.stem() == "imagenet") {
    std::tie(h, w) = conv(options_.in_channels(), 64, 7, 2);
    h = out(h, 3, 2); // max-pool
    w = out(w, 3, 2);
  } else {
    std::tie(h, w) = conv(options_.in_channels(), 64, 3, 1);
  }
  const std::array<int64_t, 4> widths = {64, 128, 256, 512};
  const std::array<int64_t, 4> blocks =
      options_.depth() == 18 ? std::array<int64_t, 4>{2, 2, 2, 2}
                             : std::array<int64_t, 4>{3, 4, 6, 3};
  int64_t in = 64;
  for (size_t layer = 0; layer < widths.size(); ++layer) {
    for (int64_t block = 0; block < blocks[layer]; ++block) {
      const int64_t stride = layer > 0 && block == 0 ? 2 : 1;
      const int64_t out_channels = widths[layer];
      if (stride != 1 || in != out_channels) {
        conv(in, out_channels, 1, stride); // downsample, from the block input
      }
      const auto [oh, ow] = conv(in, out_channels, 3, stride);
      h = oh;
      w = ow;
      conv(out_channels, out_channels, 3, 1);
      in = out_channels;
    }
  }
  return flops + 2.0 * 512 * options_.num_classes();
}

} // namespace hotloop::models
