#include "hotloop/compress/dynamic_linear.h"

#include "hotloop/compress/observer.h"
#include "hotloop/core/error.h"
#include "detail/quantized_ops.h"
#include "detail/quantized_weights.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/native/quantized/cpu/QuantUtils.h>
#include <torch/utils.h>

#include <initializer_list>

namespace hotloop::compress {
namespace {

// A call runs in float (the class comment) where the weight has at most
// 2^20 values and the call at most 2^24 multiply-adds: there the float
// product takes less time than onednn's kernel set-up for a new input range
// (bench/int8_linear_calls).
constexpr int64_t kFloatPathWeights = int64_t{1} << 20;
constexpr int64_t kFloatPathMacs = int64_t{1} << 24;

using Sources = std::vector<std::pair<const void*, int64_t>>;

// Each defined tensor's storage and version: what a cache made from them
// is checked against.
Sources sources_of(std::initializer_list<const at::Tensor*> tensors) {
  Sources from;
  for (const at::Tensor* t : tensors) {
    if (t->defined()) {
      from.emplace_back(t->data_ptr(), static_cast<int64_t>(t->_version()));
    }
  }
  return from;
}

} // namespace

DynamicLinearImpl::DynamicLinearImpl(
    int64_t in_features, int64_t out_features, bool bias)
    : in_features_(in_features), out_features_(out_features) {
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

bool DynamicLinearImpl::runs_in_float(int64_t rows) const {
  return runs_in_float(rows, at::globalContext().qEngine());
}

bool DynamicLinearImpl::runs_in_float(int64_t rows, at::QEngine engine) const {
  const int64_t weights = in_features_ * out_features_;
  return (engine == at::QEngine::ONEDNN || engine == at::QEngine::QNNPACK) &&
         rows > 0 && weights <= kFloatPathWeights &&
         rows * weights <= kFloatPathMacs;
}

int64_t DynamicLinearImpl::float_copy_bytes() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return float_weight_.defined() ? float_weight_.nbytes() : 0;
}

at::Tensor DynamicLinearImpl::forward(const at::Tensor& x) {
  HOTLOOP_CHECK(
      x.device().is_cpu(),
      "an int8 (dynamically quantized) Linear layer runs on the CPU only, "
      "its input is on ",
      x.device());
  const at::Tensor input = x.to(at::kFloat).contiguous();
  const at::QEngine engine = at::globalContext().qEngine();
  const bool in_float = runs_in_float(input.numel() / in_features_, engine);
  c10::IValue packed;
  at::Tensor float_weight;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    Sources from = sources_of({&weight_, &scale_, &zero_point_, &bias_});
    if (in_float) {
      if (!float_weight_.defined() || from != float_from_) {
        float_weight_ = quantized_weight().dequantize();
        float_from_ = std::move(from);
      }
      float_weight = float_weight_;
    } else {
      if (packed_.isNone() || from != packed_from_ ||
          packed_engine_ != static_cast<int64_t>(engine)) {
        const c10::optional<at::Tensor> bias =
            bias_.defined() ? c10::optional<at::Tensor>(bias_) : c10::nullopt;
        packed_ = detail::call_quantized(
            "quantized::linear_prepack", "", {quantized_weight(), bias});
        packed_from_ = std::move(from);
        packed_engine_ = static_cast<int64_t>(engine);
      }
      packed = packed_;
    }
  }
  // torch.ao's dynamic Linear asks for the input's range reduced to
  // 0..127; qnnpack ignores that (warning at each call) and uses 0..255.
  const bool reduce_range = engine != at::QEngine::QNNPACK;
  if (!in_float) {
    return detail::call_quantized(
               "quantized::linear_dynamic", "", {input, packed, reduce_range})
        .toTensor();
  }
  // The input quantized as quantized::linear_dynamic quantizes it: quint8
  // from its own range.
  const auto [low, high] = at::aminmax(input);
  const auto q = quant_utils::ChooseQuantizationParams(
      low.item<float>(),
      high.item<float>(),
      /*qmin=*/0,
      /*qmax=*/255,
      /*preserve_sparsity=*/false,
      /*force_scale_power_of_two=*/false,
      reduce_range);
  const at::Tensor quantized = at::fake_quantize_per_tensor_affine(
      input, q.scale, q.zero_point, 0, reduce_range ? 127 : 255);
  return at::linear(quantized, float_weight, bias_);
}

} // namespace hotloop::compress
