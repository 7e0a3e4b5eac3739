#include "hotloop/optim/clip_grad.h"

#include "hotloop/core/error.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

namespace hotloop::optim {

at::Tensor clip_grad_norm_(
    const std::vector<at::Tensor>& parameters,
    double max_norm,
    double norm_type) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      max_norm >= 0 && std::isfinite(max_norm),
      "clip_grad_norm_: max_norm must be a finite number >= 0, got ",
      max_norm);
  HOTLOOP_CHECK_AS(
      ConfigError,
      norm_type >= 0,
      "clip_grad_norm_: norm_type must be >= 0 or inf, got ",
      norm_type);
  std::vector<at::Tensor> grads;
  for (const at::Tensor& parameter : parameters) {
    if (parameter.grad().defined()) {
      grads.push_back(parameter.grad().detach());
    }
  }
  if (grads.empty()) {
    return at::Tensor();
  }
  std::vector<at::Tensor> norms;
  norms.reserve(grads.size());
  at::Tensor total;
  if (norm_type == std::numeric_limits<double>::infinity()) {
    for (const at::Tensor& grad : grads) {
      norms.push_back(grad.abs().max());
    }
    total = norms.size() == 1 ? norms[0] : at::stack(norms).max();
  } else if (norm_type == 0) {
    total = at::full(
        {},
        static_cast<double>(grads.size()),
        at::TensorOptions().device(grads[0].device()));
  } else {
    for (const at::Tensor& grad : grads) {
      norms.push_back(grad.norm(norm_type));
    }
    total = norms.size() == 1 ? norms[0] : at::stack(norms).norm(norm_type);
  }
  const at::Tensor coefficient = at::clamp_max(max_norm / (total + 1e-6), 1.0);
  for (at::Tensor& grad : grads) {
    grad.mul_(coefficient);
  }
  return total;
}

} // namespace hotloop::optim
