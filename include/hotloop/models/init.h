#pragma once

#include <torch/arg.h>
#include <torch/nn/module.h>

#include <string>

namespace hotloop::models {

/// How init_weights draws the weights (model.init and its options).
struct InitOptions {
  /// default (PyTorch's own initialisation, untouched), xavier_uniform,
  /// xavier_normal, kaiming_uniform, kaiming_normal, orthogonal or
  /// trunc_normal.
  TORCH_ARG(std::string, scheme) = "default";
  /// xavier_* and orthogonal: the gain.
  TORCH_ARG(double, gain) = 1.0;
  /// kaiming_*: fan_in (keeps the forward pass's variance) or fan_out (the
  /// backward pass's).
  TORCH_ARG(std::string, mode) = "fan_in";
  /// kaiming_*: relu, leaky_relu (slope 0), tanh, sigmoid or linear.
  TORCH_ARG(std::string, nonlinearity) = "relu";
  /// trunc_normal: the standard deviation; values beyond two of them are
  /// cut off.
  TORCH_ARG(double, std) = 0.02;
};

/// Re-draws the weight of every Linear, Conv (1d/2d/3d) and Embedding of
/// `module`, in module order, as torch.nn.init's function of that name
/// does from the default generator (seed it first for the same weights
/// every run); their biases become 0, and every BatchNorm, LayerNorm,
/// GroupNorm and InstanceNorm gets weight 1 and bias 0 (`net.apply(init)`
/// as the tutorials write it). Throws ConfigError naming the option for an
/// unknown scheme, mode or nonlinearity.
void init_weights(torch::nn::Module& module, const InitOptions& options);

} // namespace hotloop::models
