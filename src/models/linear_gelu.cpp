#include "hotloop/models/linear_gelu.h"

#include "hotloop/core/compat.h"

#include <ATen/autocast_mode.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/gelu_backward.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/sum.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/custom_function.h>

#include <utility>
#include <vector>

// The kernels' declarations; CMakeLists.txt defines HOTLOOP_HAS_CUDA_KERNELS
// (1 where it builds them: LibTorch with CUDA, and CUDA's compiler; 0
// elsewhere), which guards their calls below.
#include "bias_gradient_kernels.h"

namespace hotloop::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// {the gradient of the layer's addmm (GELU's backward of `grad` where
/// `pre_gelu`, else `grad`), the bias's (undefined where not wanted and
/// there is no GELU)}: hotloop's kernel where it takes the operands, else
/// ATen's ops as autograd runs them for linear and gelu.
std::pair<at::Tensor, at::Tensor> addmm_and_bias_gradients(
    const at::Tensor& grad, const at::Tensor& pre_gelu, bool bias_wanted) {
  if (!bias_wanted && !pre_gelu.defined()) {
    return {grad, at::Tensor()};
  }
#if HOTLOOP_HAS_CUDA_KERNELS
  const at::ScalarType type = grad.scalar_type();
  if (grad.is_cuda() &&
      (type == at::kFloat || type == at::kBFloat16 || type == at::kHalf) &&
      (!pre_gelu.defined() || pre_gelu.is_contiguous())) {
    at::Tensor grad_pre_gelu;
    at::Tensor sums = cuda::bias_gradient(grad, pre_gelu, grad_pre_gelu);
    return {pre_gelu.defined() ? grad_pre_gelu : grad, sums};
  }
#endif
  at::Tensor g = pre_gelu.defined() ? at::gelu_backward(grad, pre_gelu) : grad;
  at::Tensor sums = bias_wanted ? g.sum(0) : at::Tensor();
  return {std::move(g), std::move(sums)};
}

/// [N, K] x, [M, K] weight, [M] bias -> [N, M] x weight^T + bias, then GELU
/// where `gelu`. x and weight in one dtype (autocast's, cast by the
/// caller), the bias in any (cast here).
class LinearGelu : public torch::autograd::Function<LinearGelu> {
 public:
  static variable_list forward(
      AutogradContext* ctx,
      const at::Tensor& x,
      const at::Tensor& weight,
      const at::Tensor& bias,
      bool gelu) {
    // The operands are in their dtype already: autocast has no say here.
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(
        c10::autocast_dispatch_keyset);
    at::Tensor out = at::addmm(bias.to(x.scalar_type()), x, weight.t());
    ctx->save_for_backward({x, weight, gelu ? out : at::Tensor()});
    return {gelu ? at::gelu(out) : out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // The gradients below have no graph of their own.
    TORCH_CHECK(
        !at::GradMode::is_enabled(),
        "linear_gelu (model.fused_bias_gradient) has no double backward "
        "(backward with create_graph): for one, set "
        "model.fused_bias_gradient=false");
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& x = saved.at(0);
    const at::Tensor& weight = saved.at(1);
    const auto [grad, grad_bias] = addmm_and_bias_gradients(
        grads.at(0).contiguous(), saved.at(2), ctx->needs_input_grad(2));
    // The products as autograd's addmm backward takes them for a weight
    // used transposed (the gradient in the weight's layout).
    return {
        ctx->needs_input_grad(0) ? grad.mm(weight) : at::Tensor(),
        ctx->needs_input_grad(1) ? grad.t().mm(x) : at::Tensor(),
        ctx->needs_input_grad(2) ? grad_bias : at::Tensor(),
        at::Tensor()};
  }
};

} // namespace

at::Tensor linear_gelu(
    const at::Tensor& x,
    const at::Tensor& weight,
    const at::Tensor& bias,
    bool gelu,
    bool fused) {
  const c10::DeviceType type = x.device().type();
  if (!fused || !bias.defined() || x.dim() < 1 ||
      (type != c10::DeviceType::CPU && type != c10::DeviceType::CUDA)) {
    at::Tensor out = at::linear(x, weight, bias);
    return gelu ? at::gelu(out) : out;
  }
  at::Tensor input = x;
  at::Tensor w = weight;
  if (compat::autocast_enabled(type)) {
    // As autocast casts linear's operands: the weight's cast is cached for
    // the autocast region (a step), the input's made here.
    const at::ScalarType dtype = compat::autocast_dtype(type);
    input = at::autocast::cached_cast(dtype, x, type);
    w = at::autocast::cached_cast(dtype, weight, type);
  }
  std::vector<int64_t> sizes = input.sizes().vec();
  const int64_t width = sizes.back();
  sizes.back() = weight.size(0);
  const at::Tensor out = compat::apply_function<LinearGelu>(
      input.reshape({-1, width}), w, bias, gelu)[0];
  return out.view(sizes);
}

} // namespace hotloop::models
