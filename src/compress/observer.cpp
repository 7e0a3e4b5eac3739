#include "hotloop/compress/observer.h"

#include "hotloop/core/error.h"

#include <ATen/ATen.h>

#include <limits>
#include <numeric>
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
      !(per_channel() && moving_average_),
      "a moving-average observer is per tensor here");
  if (per_channel()) {
    min_val_ = at::empty({0});
    max_val_ = at::empty({0});
  } else {
    min_val_ = at::scalar_tensor(std::numeric_limits<float>::infinity());
    max_val_ = at::scalar_tensor(-std::numeric_limits<float>::infinity());
  }
  eps_ = at::full({1}, std::numeric_limits<float>::epsilon());
}

bool Observer::per_channel() const {
  return options_.qscheme == at::kPerChannelAffine ||
         options_.qscheme == at::kPerChannelSymmetric;
}

bool Observer::observed() const {
  return per_channel()
             ? min_val_.numel() > 0
             : min_val_.item<float>() != std::numeric_limits<float>::infinity();
}

void Observer::observe(const at::Tensor& input) {
  if (input.numel() == 0) {
    return;
  }
  const at::NoGradGuard no_grad;
  at::Tensor x = input.detach();
  if (min_val_.device() != x.device()) {
    min_val_ = min_val_.to(x.device());
    max_val_ = max_val_.to(x.device());
    eps_ = eps_.to(x.device());
  }
  if (per_channel()) {
    std::vector<int64_t> axes(x.dim());
    std::iota(axes.begin(), axes.end(), 0);
    axes[options_.ch_axis] = 0;
    axes[0] = options_.ch_axis;
    const at::Tensor y =
        x.permute(axes).to(min_val_.scalar_type()).flatten(/*start_dim=*/1);
    auto [low, high] = at::aminmax(y, /*dim=*/1);
    if (min_val_.numel() > 0) {
      low = at::min(low, min_val_);
      high = at::max(high, max_val_);
    }
    min_val_ = low;
    max_val_ = high;
    return;
  }
  x = x.to(min_val_.scalar_type());
  const auto [low, high] = at::aminmax(x);
  if (moving_average_ && observed()) {
    const double c = options_.averaging_constant;
    min_val_ = min_val_ + c * (low - min_val_);
    max_val_ = max_val_ + c * (high - max_val_);
  } else if (moving_average_) {
    min_val_ = low;
    max_val_ = high;
  } else {
    min_val_ = at::min(low, min_val_);
    max_val_ = at::max(high, max_val_);
  }
}

QParams Observer::calculate_qparams() const {
  QParams result;
  result.axis = per_channel() ? options_.ch_axis : -1;
  const c10::Device device = min_val_.device();
  if (!observed()) {
    result.scale = at::ones({1}, at::TensorOptions(device));
    result.zero_point =
        at::zeros({1}, at::TensorOptions(device).dtype(at::kLong));
    return result;
  }
  const auto [quant_min, quant_max] = options_.quant_range();
  const at::Tensor min_val_neg = at::min(min_val_, at::zeros_like(min_val_));
  at::Tensor max_val_pos = at::max(max_val_, at::zeros_like(max_val_));
  at::Tensor scale;
  at::Tensor zero_point =
      at::zeros(min_val_neg.sizes(), min_val_neg.options().dtype(at::kLong));
  if (options_.qscheme == at::kPerTensorSymmetric ||
      options_.qscheme == at::kPerChannelSymmetric) {
    max_val_pos = at::max(-min_val_neg, max_val_pos);
    scale = max_val_pos / (static_cast<double>(quant_max - quant_min) / 2);
    scale = at::max(scale, eps_);
    if (options_.dtype == at::kQUInt8) {
      zero_point = at::full(zero_point.sizes(), 128, zero_point.options());
    }
  } else {
    scale = (max_val_pos - min_val_neg) /
            static_cast<double>(quant_max - quant_min);
    scale = at::max(scale, eps_);
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

} // namespace hotloop::compress
