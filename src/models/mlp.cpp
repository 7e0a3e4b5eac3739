#include "hotloop/models/mlp.h"

#include "hotloop/core/error.h"

#include <ATen/ops/dropout.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/relu.h>

#include <utility>

namespace hotloop::models {

MlpOptions::MlpOptions(int64_t in_features, int64_t num_classes)
    : in_features_(in_features), num_classes_(num_classes) {}

MlpImpl::MlpImpl(MlpOptions options) : options_(std::move(options)) {
  namespace nn = torch::nn;
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.in_features() > 0,
      "model.in_features must be positive, got ",
      options_.in_features());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.num_classes() >= 1,
      "model.num_classes must be >= 1 (1: one number, a regression), got ",
      options_.num_classes());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.dropout() >= 0 && options_.dropout() < 1,
      "model.dropout must be in [0, 1), got ",
      options_.dropout());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.activation() == "relu" || options_.activation() == "gelu",
      "model.activation must be relu or gelu, got '",
      options_.activation(),
      "'");
  gelu_ = options_.activation() == "gelu";

  layers_ = nn::ModuleList();
  int64_t in = options_.in_features();
  for (int64_t width : options_.hidden()) {
    HOTLOOP_CHECK_AS(
        ConfigError, width > 0, "model.hidden must be positive, got ", width);
    linears_.emplace_back(in, width);
    in = width;
  }
  linears_.emplace_back(in, options_.num_classes());
  for (const auto& linear : linears_) {
    layers_->push_back(linear);
  }
  register_module("layers", layers_);
}

at::Tensor MlpImpl::forward(const at::Tensor& input) {
  at::Tensor x = input.flatten(/*start_dim=*/1);
  const size_t last = linears_.size() - 1;
  for (size_t i = 0; i < last; ++i) {
    x = linears_[i]->forward(x);
    x = gelu_ ? at::gelu(x) : at::relu(x);
    if (options_.dropout() > 0) {
      x = at::dropout(x, options_.dropout(), is_training());
    }
  }
  return linears_[last]->forward(x);
}

} // namespace hotloop::models
