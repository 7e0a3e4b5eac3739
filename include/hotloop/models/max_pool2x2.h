#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/cloneable.h>

namespace hotloop::models {

/// 2x2 max-pooling with stride 2, no padding, rounding down: equal to
/// at::max_pool2d(input, 2) in value and gradient, ties and NaNs included
/// (the first maximum of each window in row order takes the gradient; a
/// NaN wins as it does there).
///
/// On the CPU, for a float, double or bfloat16 input contiguous in
/// NCHW order, a kernel of its own reads each window once and keeps the
/// winner's position in a byte: LibTorch 1.13's CPU max-pool takes about
/// 7x longer on the Fashion-MNIST CNN's first block (256x32x28x28) and its
/// backward about 2x, which made it a fifth of that model's training step.
/// Any other input (a GPU tensor, channels_last, another dtype) goes to
/// at::max_pool2d. Second derivatives work on both paths.
///
/// input: [N, C, H, W] or [C, H, W] with H, W >= 2; output: [..., H/2, W/2].
at::Tensor max_pool2x2(const at::Tensor& input);

/// The layer form of max_pool2x2, no state: used in place of
/// torch::nn::MaxPool2d(2) by the models that pool 2x2.
class MaxPool2x2Impl : public torch::nn::Cloneable<MaxPool2x2Impl> {
 public:
  void reset() override {}
  at::Tensor forward(const at::Tensor& input) {
    return max_pool2x2(input);
  }
};
TORCH_MODULE(MaxPool2x2);

} // namespace hotloop::models
