#include "hotloop/models/chunked_cross_entropy.h"

#include "hotloop/core/compat.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

namespace hotloop::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class ChunkedCrossEntropy
    : public torch::autograd::Function<ChunkedCrossEntropy> {
 public:
  static at::Tensor forward(
      AutogradContext* ctx,
      const at::Tensor& hidden,
      const at::Tensor& weight,
      const at::Tensor& targets,
      int64_t chunk_rows,
      at::ScalarType compute) {
    const int64_t width = hidden.size(-1);
    const at::Tensor rows = hidden.reshape({-1, width});
    const at::Tensor labels = targets.reshape({-1});
    const int64_t n = rows.size(0);
    const bool wanted = hidden.requires_grad() || weight.requires_grad();
    // Log-sum-exps and gradients in float32, or double for double inputs.
    const at::ScalarType wide = at::promote_types(compute, at::kFloat);
    // The count of counted targets as a device scalar: no read-back.
    const at::Tensor counted = labels.ne(-1);
    const at::Tensor scale =
        counted.sum().to(wide).reciprocal().reshape({1, 1});
    const at::Tensor w = weight.to(compute);
    at::Tensor total = at::zeros({}, hidden.options().dtype(wide));
    at::Tensor grad_rows;
    at::Tensor grad_weight;
    if (wanted) {
      grad_rows = at::empty({n, width}, hidden.options().dtype(wide));
      grad_weight = at::zeros_like(weight, weight.options().dtype(wide));
    }
    for (int64_t start = 0; start < n; start += chunk_rows) {
      const int64_t end = std::min(n, start + chunk_rows);
      const at::Tensor x = rows.slice(0, start, end).to(compute);
      const at::Tensor logits = at::mm(x, w.t()).to(wide); // [r, V]
      const at::Tensor lse = logits.logsumexp(1, /*keepdim=*/true);
      const at::Tensor index =
          labels.slice(0, start, end).clamp_min(0).unsqueeze(1);
      const at::Tensor mask =
          counted.slice(0, start, end).to(wide).unsqueeze(1);
      total.add_(((lse - logits.gather(1, index)) * mask).sum());
      if (!wanted) {
        continue;
      }
      // d loss / d logits = (softmax - one_hot(target)) / count, per
      // counted row; in place of the logits.
      at::Tensor grad = logits.sub_(lse).exp_();
      grad.scatter_add_(1, index, at::full_like(mask, -1.0));
      grad.mul_(mask * scale);
      const at::Tensor g = grad.to(compute);
      grad_rows.slice(0, start, end).copy_(at::mm(g, w));
      grad_weight.add_(at::mm(g.t(), x));
    }
    if (wanted) {
      ctx->save_for_backward({grad_rows, grad_weight});
    }
    ctx->saved_data["hidden_sizes"] = hidden.sizes().vec();
    ctx->saved_data["hidden_dtype"] =
        static_cast<int64_t>(hidden.scalar_type());
    ctx->saved_data["weight_dtype"] =
        static_cast<int64_t>(weight.scalar_type());
    return total.mul_(scale.reshape({}));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& go = grads.at(0);
    const auto hidden_dtype =
        static_cast<at::ScalarType>(ctx->saved_data["hidden_dtype"].toInt());
    const auto weight_dtype =
        static_cast<at::ScalarType>(ctx->saved_data["weight_dtype"].toInt());
    const std::vector<int64_t> sizes =
        ctx->saved_data["hidden_sizes"].toIntVector();
    return {
        saved.at(0).mul(go).reshape(sizes).to(hidden_dtype),
        saved.at(1).mul(go).to(weight_dtype),
        at::Tensor(),
        at::Tensor(),
        at::Tensor()};
  }
};

// The dtype the plain path's linear would multiply in: autocast's where it
// is on for the device, else the input's.
at::ScalarType product_dtype(const at::Tensor& hidden) {
  const c10::DeviceType type = hidden.device().type();
  if ((type == c10::DeviceType::CPU || type == c10::DeviceType::CUDA) &&
      compat::autocast_enabled(type) &&
      at::isFloatingType(hidden.scalar_type())) {
    return compat::autocast_dtype(type);
  }
  return hidden.scalar_type();
}

} // namespace

at::Tensor chunked_cross_entropy(
    const at::Tensor& hidden,
    const at::Tensor& weight,
    const at::Tensor& targets,
    int64_t chunk_rows) {
  TORCH_CHECK(
      chunk_rows > 0,
      "chunked_cross_entropy: chunk_rows must be positive, got ",
      chunk_rows);
  TORCH_CHECK(
      weight.dim() == 2 && hidden.size(-1) == weight.size(1),
      "chunked_cross_entropy: hidden [..., ",
      hidden.size(-1),
      "] does not fit weight ",
      weight.sizes());
  TORCH_CHECK(
      targets.numel() * hidden.size(-1) == hidden.numel(),
      "chunked_cross_entropy: targets ",
      targets.sizes(),
      " do not match hidden ",
      hidden.sizes());
  return compat::apply_function<ChunkedCrossEntropy>(
      hidden, weight, targets, chunk_rows, product_dtype(hidden));
}

} // namespace hotloop::models
