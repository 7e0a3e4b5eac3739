#include "hotloop/models/add_layer_norm.h"

#include "hotloop/core/compat.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>

// The kernels' declarations; CMakeLists.txt defines HOTLOOP_HAS_CUDA_KERNELS
// (1 where it builds them: LibTorch with CUDA, and CUDA's compiler; 0
// elsewhere), which guards their calls below.
#include "add_layer_norm_kernels.h"

namespace hotloop::models {
namespace {

#if HOTLOOP_HAS_CUDA_KERNELS

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class AddLayerNorm : public torch::autograd::Function<AddLayerNorm> {
 public:
  // The bias comes as an optional: Function::apply records every Tensor
  // argument's device, which an undefined one does not have.
  static variable_list forward(
      AutogradContext* ctx,
      const at::Tensor& x,
      const at::Tensor& y,
      const at::Tensor& weight,
      const c10::optional<at::Tensor>& maybe_bias,
      double eps) {
    const at::Tensor bias = maybe_bias.value_or(at::Tensor());
    // An output no one read gets no zero-filled gradient: the last
    // LayerNorm's sum (the GPT's final residual stream) goes nowhere else.
    ctx->set_materialize_grads(false);
    // What the next matmul reads: autocast's dtype where it is on.
    const at::ScalarType out_dtype =
        compat::autocast_enabled(c10::DeviceType::CUDA)
        ? compat::autocast_dtype(c10::DeviceType::CUDA)
        : at::kFloat;
    at::Tensor sum = at::empty_like(x);
    at::Tensor out = at::empty_like(x, x.options().dtype(out_dtype));
    const int64_t rows = x.numel() / x.size(-1);
    at::Tensor mean = at::empty({rows}, x.options());
    at::Tensor rstd = at::empty({rows}, x.options());
    cuda::add_layer_norm_forward(
        x, y, weight, bias, eps, sum, out, mean, rstd);
    ctx->save_for_backward({sum, mean, rstd, weight});
    ctx->saved_data["y_dtype"] = static_cast<int64_t>(y.scalar_type());
    ctx->saved_data["out_dtype"] = static_cast<int64_t>(out_dtype);
    ctx->saved_data["with_bias"] = bias.defined();
    return {sum, out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // The kernels' gradients have no graph of their own.
    TORCH_CHECK(
        !at::GradMode::is_enabled(),
        "add_layer_norm (model.fused_layer_norm) has no double backward "
        "(backward with create_graph): for one, set "
        "model.fused_layer_norm=false");
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& sum = saved.at(0);
    const auto y_dtype =
        static_cast<at::ScalarType>(ctx->saved_data["y_dtype"].toInt());
    const auto out_dtype =
        static_cast<at::ScalarType>(ctx->saved_data["out_dtype"].toInt());
    const bool with_bias = ctx->saved_data["with_bias"].toBool();
    const at::Tensor grad_sum = grads.at(0).defined()
        ? grads.at(0).to(at::kFloat).contiguous()
        : at::Tensor();
    if (!grads.at(1).defined()) {
      // Only the sum reached the loss: the add's gradient, and none for
      // the LayerNorm's weight and bias, as ATen's ops give (a weight
      // decay then leaves them alone).
      return {
          grad_sum,
          grad_sum.defined() ? grad_sum.to(y_dtype) : at::Tensor(),
          at::Tensor(),
          at::Tensor(),
          at::Tensor()};
    }
    const at::Tensor grad_out = grads.at(1).to(out_dtype).contiguous();
    at::Tensor grad_x = at::empty_like(sum);
    at::Tensor grad_y = at::empty_like(sum, sum.options().dtype(y_dtype));
    at::Tensor grad_weight;
    at::Tensor grad_bias;
    cuda::add_layer_norm_backward(
        grad_out,
        grad_sum,
        sum,
        saved.at(1),
        saved.at(2),
        saved.at(3),
        with_bias,
        grad_x,
        grad_y,
        grad_weight,
        grad_bias);
    return {grad_x, grad_y, grad_weight, grad_bias, at::Tensor()};
  }
};

#endif

} // namespace

bool add_layer_norm_is_fused(
    const at::Tensor& x,
    const at::Tensor& y,
    const at::Tensor& weight,
    const at::Tensor& bias) {
#if HOTLOOP_HAS_CUDA_KERNELS
  if (!x.defined() || !y.defined() || !weight.defined() || x.dim() == 0 ||
      !x.is_cuda()) {
    return false;
  }
  const int64_t width = x.size(-1);
  const at::ScalarType y_dtype = y.scalar_type();
  const bool bias_fits = !bias.defined() ||
      (bias.device() == x.device() && bias.scalar_type() == at::kFloat &&
       bias.is_contiguous() && bias.dim() == 1 && bias.numel() == width);
  return width > 0 && width <= cuda::kAddLayerNormMaxWidth &&
      x.scalar_type() == at::kFloat && x.is_contiguous() &&
      y.device() == x.device() && y.sizes() == x.sizes() &&
      y.is_contiguous() &&
      (y_dtype == at::kFloat || y_dtype == at::kBFloat16 ||
       y_dtype == at::kHalf) &&
      weight.device() == x.device() && weight.scalar_type() == at::kFloat &&
      weight.is_contiguous() && weight.dim() == 1 && weight.numel() == width &&
      bias_fits;
#else
  return false;
#endif
}

std::pair<at::Tensor, at::Tensor> add_layer_norm(
    const at::Tensor& x,
    const at::Tensor& y,
    const at::Tensor& weight,
    const at::Tensor& bias,
    double eps,
    bool fused) {
#if HOTLOOP_HAS_CUDA_KERNELS
  if (fused && add_layer_norm_is_fused(x, y, weight, bias)) {
    const auto outputs = compat::apply_function<AddLayerNorm>(
        x,
        y,
        weight,
        bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt,
        eps);
    return {outputs[0], outputs[1]};
  }
#endif
  at::Tensor sum = x + y;
  at::Tensor normalized =
      at::layer_norm(sum, {sum.size(-1)}, weight, bias, eps);
  return {std::move(sum), std::move(normalized)};
}

} // namespace hotloop::models
