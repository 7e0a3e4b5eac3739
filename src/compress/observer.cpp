#include "hotloop/compress/observer.h"

#include "hotloop/core/error.h"

#include <ATen/ATen.h>

#include <limits>
#include <numeric>
#include <tuple>
#include <vector>

namespace hotloop::compress {

std::pair<int64_t, int64_t> ObserverOptions::quant_range() const {
  if (dtype == at::kQInt8) {
    return reduce_range ? std::make_pair(int64_t{-64}, int64_t{63})
                        : std::make_pair(int64_t{-128}, int64_t{127});
  }
  return reduce_range ? std::make_pair(int64_t{0}, int64_t{127})
                      : std::make_pair(int64_t{0}, int64_t{255});
}

namespace {

bool is_per_channel(at::QScheme qscheme) {
  return qscheme == at::kPerChannelAffine ||
         qscheme == at::kPerChannelSymmetric;
}

// Whether a running min holds an observation: a per-tensor one is +inf
// before the first; a per-channel one empty, or all +inf where its length
// was set up front (FakeQuantize).
bool has_observed(const at::Tensor& min_val) {
  if (min_val.numel() == 0) {
    return false;
  }
  return !at::isposinf(min_val).all().item<bool>();
}

} // namespace

QParams calculate_qparams(
    const at::Tensor& min_val,
    const at::Tensor& max_val,
    const ObserverOptions& options) {
  QParams result;
  result.axis = is_per_channel(options.qscheme) ? options.ch_axis : -1;
  const c10::Device device = min_val.device();
  if (!has_observed(min_val)) {
    result.scale = at::ones({1}, at::TensorOptions(device));
    result.zero_point =
        at::zeros({1}, at::TensorOptions(device).dtype(at::kLong));
    return result;
  }
  const at::Tensor eps = at::full(
      {1}, std::numeric_limits<float>::epsilon(), at::TensorOptions(device));
  const auto [quant_min, quant_max] = options.quant_range();
  const at::Tensor min_val_neg = at::min(min_val, at::zeros_like(min_val));
  at::Tensor max_val_pos = at::max(max_val, at::zeros_like(max_val));
  at::Tensor scale;
  at::Tensor zero_point =
      at::zeros(min_val_neg.sizes(), min_val_neg.options().dtype(at::kLong));
  if (options.qscheme == at::kPerTensorSymmetric ||
      options.qscheme == at::kPerChannelSymmetric) {
    max_val_pos = at::max(-min_val_neg, max_val_pos);
    scale = max_val_pos / (static_cast<double>(quant_max - quant_min) / 2);
    scale = at::max(scale, eps);
    if (options.dtype == at::kQUInt8) {
      zero_point = at::full(zero_point.sizes(), 128, zero_point.options());
    }
  } else {
    scale = (max_val_pos - min_val_neg) /
            static_cast<double>(quant_max - quant_min);
    scale = at::max(scale, eps);
    zero_point = quant_min - at::round(min_val_neg / scale).to(at::kInt);
    zero_point = at::clamp(zero_point, quant_min, quant_max);
  }
  if (scale.dim() == 0) {
    scale = at::full({1}, scale.item<float>(), scale.options());
  }
  if (zero_point.dim() == 0) {
    zero_point =
        at::full({1}, zero_point.item<int64_t>(), zero_point.options());
  }
  result.scale = scale;
  result.zero_point = zero_point;
  return result;
}

std::pair<at::Tensor, at::Tensor> observe_min_max(
    const at::Tensor& input,
    const at::Tensor& min_val,
    const at::Tensor& max_val,
    const ObserverOptions& options,
    bool moving_average) {
  const at::NoGradGuard no_grad;
  at::Tensor x = input.detach().to(min_val.device(), min_val.scalar_type());
  at::Tensor low;
  at::Tensor high;
  if (is_per_channel(options.qscheme)) {
    std::vector<int64_t> axes(x.dim());
    std::iota(axes.begin(), axes.end(), 0);
    axes[options.ch_axis] = 0;
    axes[0] = options.ch_axis;
    std::tie(low, high) =
        at::aminmax(x.permute(axes).flatten(/*start_dim=*/1), /*dim=*/1);
  } else {
    std::tie(low, high) = at::aminmax(x);
  }
  if (!has_observed(min_val)) {
    return {low, high};
  }
  if (moving_average) {
    const double c = options.averaging_constant;
    return {min_val + c * (low - min_val), max_val + c * (high - max_val)};
  }
  return {at::min(low, min_val), at::max(high, max_val)};
}

Observer::Observer(ObserverOptions options, bool moving_average)
    : options_(options), moving_average_(moving_average) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.dtype == at::kQUInt8 || options_.dtype == at::kQInt8,
      "an observer quantizes to quint8 or qint8, not ",
      c10::toString(options_.dtype));
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.qscheme == at::kPerTensorAffine ||
          options_.qscheme == at::kPerTensorSymmetric ||
          options_.qscheme == at::kPerChannelAffine ||
          options_.qscheme == at::kPerChannelSymmetric,
      "an observer's qscheme is per-tensor or per-channel, affine or "
      "symmetric, not ",
      c10::toString(options_.qscheme));
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.averaging_constant > 0 && options_.averaging_constant <= 1,
      "an observer's averaging_constant must be in (0, 1], got ",
      options_.averaging_constant);
  if (per_channel()) {
    min_val_ = at::empty({0});
    max_val_ = at::empty({0});
  } else {
    min_val_ = at::scalar_tensor(std::numeric_limits<float>::infinity());
    max_val_ = at::scalar_tensor(-std::numeric_limits<float>::infinity());
  }
}

bool Observer::per_channel() const {
  return is_per_channel(options_.qscheme);
}

bool Observer::observed() const {
  return has_observed(min_val_);
}

void Observer::observe(const at::Tensor& input) {
  if (input.numel() == 0) {
    return;
  }
  if (min_val_.device() != input.device()) {
    min_val_ = min_val_.to(input.device());
    max_val_ = max_val_.to(input.device());
  }
  std::tie(min_val_, max_val_) =
      observe_min_max(input, min_val_, max_val_, options_, moving_average_);
}

QParams Observer::calculate_qparams() const {
  return compress::calculate_qparams(min_val_, max_val_, options_);
}

} // namespace hotloop::compress
