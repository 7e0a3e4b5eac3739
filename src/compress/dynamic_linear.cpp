#include "hotloop/compress/dynamic_linear.h"

#include "hotloop/compress/observer.h"
#include "hotloop/core/error.h"
#include "detail/quantized_ops.h"
#include "detail/quantized_weights.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <torch/utils.h>

namespace hotloop::compress {

DynamicLinearImpl::DynamicLinearImpl(
    int64_t in_features, int64_t out_features, bool bias) {
  weight_ = register_buffer(
      "weight", at::zeros({out_features, in_features}, at::kChar));
  scale_ = register_buffer("scale", at::ones({1}, at::kDouble));
  zero_point_ = register_buffer("zero_point", at::zeros({1}, at::kLong));
  if (bias) {
    bias_ = register_buffer("bias", at::zeros({out_features}));
  }
}

std::shared_ptr<DynamicLinearImpl> DynamicLinearImpl::quantize(
    const at::Tensor& weight, const at::Tensor& bias) {
  HOTLOOP_CHECK(
      weight.dim() == 2 && weight.device().is_cpu(),
      "quantize_dynamic: a Linear layer's weight must be a [out, in] CPU "
      "tensor, got ",
      weight.sizes(),
      " on ",
      weight.device());
  const at::NoGradGuard no_grad;
  ObserverOptions options;
  options.dtype = at::kQInt8;
  options.qscheme = at::kPerTensorSymmetric;
  Observer observer(options);
  observer.observe(weight.detach());
  const at::Tensor q =
      detail::quantize_weight(weight.detach(), observer.calculate_qparams());
  auto layer = std::make_shared<DynamicLinearImpl>(
      weight.size(1), weight.size(0), bias.defined());
  layer->weight_.copy_(q.int_repr());
  layer->scale_.fill_(q.q_scale());
  layer->zero_point_.fill_(q.q_zero_point());
  if (bias.defined()) {
    layer->bias_.copy_(bias.detach());
  }
  return layer;
}

at::Tensor DynamicLinearImpl::quantized_weight() const {
  return at::_make_per_tensor_quantized_tensor(
      weight_, scale_.item<double>(), zero_point_.item<int64_t>());
}

at::Tensor DynamicLinearImpl::forward(const at::Tensor& x) {
  HOTLOOP_CHECK(
      x.device().is_cpu(),
      "an int8 (dynamically quantized) Linear layer runs on the CPU only, "
      "its input is on ",
      x.device());
  c10::IValue packed;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto engine =
        static_cast<int64_t>(at::globalContext().qEngine());
    std::vector<std::pair<const void*, int64_t>> from;
    for (const at::Tensor* t : {&weight_, &scale_, &zero_point_, &bias_}) {
      if (t->defined()) {
        from.emplace_back(t->data_ptr(), static_cast<int64_t>(t->_version()));
      }
    }
    if (packed_.isNone() || from != packed_from_ || packed_engine_ != engine) {
      const c10::optional<at::Tensor> bias =
          bias_.defined() ? c10::optional<at::Tensor>(bias_) : c10::nullopt;
      packed_ = detail::call_quantized(
          "quantized::linear_prepack", "", {quantized_weight(), bias});
      packed_from_ = std::move(from);
      packed_engine_ = engine;
    }
    packed = packed_;
  }
  return detail::call_quantized(
             "quantized::linear_dynamic",
             "",
             {x.to(at::kFloat).contiguous(), packed, /*reduce_range=*/true})
      .toTensor();
}

} // namespace hotloop::compress
