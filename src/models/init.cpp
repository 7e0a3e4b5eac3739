#include "hotloop/models/init.h"

#include "hotloop/core/error.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/instancenorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cmath>

namespace hotloop::models {
namespace {

namespace nn = torch::nn;

torch::nn::init::NonlinearityType nonlinearity_of(const std::string& name) {
  if (name == "relu") {
    return torch::kReLU;
  }
  if (name == "leaky_relu") {
    return torch::kLeakyReLU;
  }
  if (name == "tanh") {
    return torch::kTanh;
  }
  if (name == "sigmoid") {
    return torch::kSigmoid;
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      name == "linear",
      "model.init_nonlinearity must be relu, leaky_relu, tanh, sigmoid or "
      "linear, got '",
      name,
      "'");
  return torch::kLinear;
}

// torch.nn.init.trunc_normal_(tensor, 0, std, -2 std, 2 std): the normal's
// inverse CDF of uniform draws between the cut-offs.
void trunc_normal(at::Tensor& weight, double std) {
  const auto cdf = [](double x) {
    return (1.0 + std::erf(x / std::sqrt(2.0))) / 2.0;
  };
  const double low = cdf(-2.0);
  const double high = cdf(2.0);
  weight.uniform_(2 * low - 1, 2 * high - 1);
  weight.erfinv_();
  weight.mul_(std * std::sqrt(2.0));
  weight.clamp_(-2 * std, 2 * std);
}

bool has_weights(nn::Module& module) {
  return module.as<nn::Linear>() || module.as<nn::Conv1d>() ||
      module.as<nn::Conv2d>() || module.as<nn::Conv3d>() ||
      module.as<nn::Embedding>();
}

bool is_norm(nn::Module& module) {
  return module.as<nn::BatchNorm1d>() || module.as<nn::BatchNorm2d>() ||
      module.as<nn::BatchNorm3d>() || module.as<nn::LayerNorm>() ||
      module.as<nn::GroupNorm>() || module.as<nn::InstanceNorm1d>() ||
      module.as<nn::InstanceNorm2d>() || module.as<nn::InstanceNorm3d>() ||
      module.name().find("BatchNorm") != std::string::npos;
}

} // namespace

void init_weights(torch::nn::Module& module, const InitOptions& options) {
  const std::string& scheme = options.scheme();
  HOTLOOP_CHECK_AS(
      ConfigError,
      scheme == "default" || scheme == "xavier_uniform" ||
          scheme == "xavier_normal" || scheme == "kaiming_uniform" ||
          scheme == "kaiming_normal" || scheme == "orthogonal" ||
          scheme == "trunc_normal",
      "model.init must be default, xavier_uniform, xavier_normal, "
      "kaiming_uniform, kaiming_normal, orthogonal or trunc_normal, got '",
      scheme,
      "'");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.mode() == "fan_in" || options.mode() == "fan_out",
      "model.init_mode must be fan_in or fan_out, got '",
      options.mode(),
      "'");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.std() > 0,
      "model.init_std must be positive, got ",
      options.std());
  const auto nonlinearity = nonlinearity_of(options.nonlinearity());
  if (scheme == "default") {
    return;
  }
  const auto mode =
      options.mode() == "fan_in" ? torch::nn::init::FanModeType(torch::kFanIn)
                                 : torch::nn::init::FanModeType(torch::kFanOut);
  torch::NoGradGuard no_grad;
  for (const auto& child : module.modules(/*include_self=*/true)) {
    auto parameters = child->named_parameters(/*recurse=*/false);
    if (has_weights(*child)) {
      at::Tensor weight = parameters["weight"];
      if (scheme == "xavier_uniform") {
        nn::init::xavier_uniform_(weight, options.gain());
      } else if (scheme == "xavier_normal") {
        nn::init::xavier_normal_(weight, options.gain());
      } else if (scheme == "kaiming_uniform") {
        nn::init::kaiming_uniform_(weight, 0, mode, nonlinearity);
      } else if (scheme == "kaiming_normal") {
        nn::init::kaiming_normal_(weight, 0, mode, nonlinearity);
      } else if (scheme == "orthogonal") {
        nn::init::orthogonal_(weight, options.gain());
      } else {
        trunc_normal(weight, options.std());
      }
      if (const auto* bias = parameters.find("bias");
          bias != nullptr && bias->defined()) {
        nn::init::zeros_(*bias);
      }
    } else if (is_norm(*child)) {
      if (const auto* weight = parameters.find("weight");
          weight != nullptr && weight->defined()) {
        nn::init::ones_(*weight);
      }
      if (const auto* bias = parameters.find("bias");
          bias != nullptr && bias->defined()) {
        nn::init::zeros_(*bias);
      }
    }
  }
}

} // namespace hotloop::models
