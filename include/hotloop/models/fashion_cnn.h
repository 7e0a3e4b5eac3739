#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>

#include <cstdint>
#include <vector>

namespace hotloop::models {

/// Shape of the small image CNN.
struct FashionCnnOptions {
  int64_t in_channels = 1;
  /// Output channels of each conv block; one block per entry. The defaults
  /// are the CLI's (`hotloop fit --help` reads them from here): the model of
  /// configs/fashion_mnist.yaml.
  std::vector<int64_t> channels = {16, 32};
  /// Width of the hidden layer of the MLP head; 0 for a linear head.
  int64_t hidden = 128;
  double dropout = 0.0;
  int64_t num_classes = 10;
  /// Input height and width (square images).
  int64_t image_size = 28;
  /// Give the convolutions a bias, which the BatchNorm after each cancels:
  /// off by default, kept switchable for the ablation benchmark.
  bool conv_bias = false;
  /// dist::SyncBatchNorm in place of BatchNorm2d, for a data-parallel run
  /// whose statistics cover every process's batch (trainer.sync_batchnorm).
  bool sync_batchnorm = false;
};

/// Conv blocks (3x3 conv without bias -> BatchNorm -> ReLU -> 2x2 max-pool,
/// MaxPool2x2: PyTorch's MaxPool2d(2) with a faster CPU kernel)
/// then an MLP head. The convs carry no bias because the BatchNorm after
/// each subtracts the batch mean, which cancels any bias; dropping it saves
/// parameters and a kernel per layer. Initialised as PyTorch initialises the
/// same layers.
///
/// input: [B, in_channels, S, S] float; output: [B, num_classes] logits.
class FashionCnnImpl : public torch::nn::Module {
 public:
  /// Throws ConfigError naming the model option that is out of range.
  explicit FashionCnnImpl(FashionCnnOptions options = {});

  at::Tensor forward(const at::Tensor& input);

  const FashionCnnOptions& options() const {
    return options_;
  }

  /// Forward FLOPs for one image (2 per multiply-add of the convolutions
  /// and linear layers; normalization, activations and pooling left out).
  double flops_per_sample() const;

 private:
  FashionCnnOptions options_;
  torch::nn::Sequential features_{nullptr};
  torch::nn::Sequential head_{nullptr};
};
TORCH_MODULE(FashionCnn);

} // namespace hotloop::models
