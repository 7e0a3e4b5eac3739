#pragma once

#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <string>
#include <vector>

namespace hotloop::models {

/// Shape of a multi-layer perceptron classifier.
struct MlpOptions {
  /// The required sizes; the rest are chainable setters.
  MlpOptions(int64_t in_features, int64_t num_classes);

  /// Features per sample after flattening every dimension but the first
  /// (784 for [B, 1, 28, 28] images); > 0.
  TORCH_ARG(int64_t, in_features);
  /// Output logits per sample; > 1.
  /// Outputs per sample: the classes' logits, or 1 for a regression.
  TORCH_ARG(int64_t, num_classes);
  /// Width of each hidden layer, in order (each > 0); empty for a linear
  /// model.
  TORCH_ARG(std::vector<int64_t>, hidden) = {};
  /// Dropout after each hidden activation, in [0, 1).
  TORCH_ARG(double, dropout) = 0.0;
  /// Hidden activation: "relu" or "gelu" (exact, erf-based).
  TORCH_ARG(std::string, activation) = "relu";
};

/// Flatten -> (Linear -> activation -> dropout) per hidden layer -> Linear.
/// The Linear layers are `layers.0` .. `layers.N` (the last one maps to the
/// logits) and keep PyTorch's default initialisation (weights
/// kaiming_uniform(a=sqrt(5)), biases U(-1/sqrt(fan_in), 1/sqrt(fan_in))).
///
/// input: [B, ...] float with in_features elements per sample;
/// output: [B, num_classes] logits.
class MlpImpl : public torch::nn::Module {
 public:
  /// Throws ConfigError naming the model option that is out of range.
  explicit MlpImpl(MlpOptions options);

  /// input: [B, ...] float -> [B, num_classes] logits.
  at::Tensor forward(const at::Tensor& input);

  /// The options the model was built with.
  const MlpOptions& options() const {
    return options_;
  }

 private:
  MlpOptions options_;
  bool gelu_ = false;
  torch::nn::ModuleList layers_{nullptr};
  // layers_ with their type, for forward().
  std::vector<torch::nn::Linear> linears_;
};
TORCH_MODULE(Mlp);

} // namespace hotloop::models
