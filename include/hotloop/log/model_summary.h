#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace hotloop::log {

/// One row of a ModelSummary.
struct LayerSummary {
  /// Dotted name ("network.features.0"), its depth (1 = a child of the
  /// model) and the LibTorch type name ("torch::nn::Conv2dImpl" shortened
  /// to "Conv2d").
  std::string name;
  int64_t depth = 0;
  std::string type;
  /// Parameters in this layer and everything under it.
  int64_t params = 0;
  /// Output shape for one example batch; empty when not known.
  std::vector<int64_t> output_shape;
};

/// What Lightning's ModelSummary prints at the start of fit: the layers to
/// `max_depth`, their parameter counts and (where known) output shapes,
/// trainable and frozen parameter totals and the size of the parameters.
struct ModelSummary {
  std::vector<LayerSummary> layers;
  int64_t trainable_params = 0;
  int64_t frozen_params = 0;
  /// Parameters and buffers, in MB (10^6 bytes).
  double size_mb = 0;

  int64_t total_params() const {
    return trainable_params + frozen_params;
  }
  /// The table as text, one layer per line, then the totals.
  void print(std::ostream& out) const;
};

/// Summarises `model` to `max_depth` (>= 1). Output shapes come from
/// running `example` (a batch the model accepts, may be undefined: no shapes)
/// through the model's Sequential containers in order, and are kept only
/// when `forward`, the model's real forward, gives the same final shape:
/// a model whose forward is not that chain gets no shapes rather than wrong
/// ones. Runs without gradients in eval mode, restoring the mode after.
ModelSummary summarize_model(
    torch::nn::Module& model,
    int64_t max_depth = 2,
    const at::Tensor& example = {},
    const std::function<at::Tensor(const at::Tensor&)>& forward = {});

} // namespace hotloop::log
