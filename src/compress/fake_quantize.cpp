#include "hotloop/compress/fake_quantize.h"

#include "hotloop/core/error.h"

#include <ATen/ATen.h>

#include <limits>

namespace hotloop::compress {

FakeQuantizeImpl::FakeQuantizeImpl(FakeQuantizeOptions options)
    : options_(std::move(options)) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.observer_kind == "moving_average" ||
          options_.observer_kind == "minmax",
      "a fake quantizer's observer must be moving_average or minmax, got '",
      options_.observer_kind,
      "'");
  HOTLOOP_CHECK_AS(
      ConfigError,
      !options_.fused || options_.observer_kind == "moving_average",
      "the fused fake quantizer (fused_moving_avg_obs_fake_quant) observes a "
      "moving average; use fused=false for a minmax observer");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.channels >= 1,
      "a fake quantizer needs at least one channel, got ",
      options_.channels);
  // Checks the dtype, the scheme and the averaging constant.
  const Observer check(options_.observer, false);
  HOTLOOP_CHECK_AS(
      ConfigError,
      !options_.fused || !per_channel() || options_.observer.ch_axis == 0,
      "the fused fake quantizer is per channel on axis 0 only, got axis ",
      options_.observer.ch_axis);
  const int64_t channels = per_channel() ? options_.channels : 1;
  // Long flags, as the fused op reads them (torch.ao's unfused
  // FakeQuantize keeps uint8 ones; the values are the same).
  fake_quant_enabled_ =
      register_buffer("fake_quant_enabled", at::ones({1}, at::kLong));
  observer_enabled_ =
      register_buffer("observer_enabled", at::ones({1}, at::kLong));
  scale_ = register_buffer("scale", at::ones({channels}, at::kFloat));
  zero_point_ = register_buffer("zero_point", at::zeros({channels}, at::kInt));
  const float inf = std::numeric_limits<float>::infinity();
  if (per_channel()) {
    min_val_ = register_buffer("min_val", at::full({channels}, inf));
    max_val_ = register_buffer("max_val", at::full({channels}, -inf));
  } else {
    min_val_ = register_buffer("min_val", at::scalar_tensor(inf));
    max_val_ = register_buffer("max_val", at::scalar_tensor(-inf));
  }
}

bool FakeQuantizeImpl::per_channel() const {
  return options_.observer.qscheme == at::kPerChannelAffine ||
         options_.observer.qscheme == at::kPerChannelSymmetric;
}

at::Tensor FakeQuantizeImpl::forward(const at::Tensor& x) {
  const auto [quant_min, quant_max] = options_.observer.quant_range();
  if (options_.fused) {
    // Updates min_val, max_val, scale and zero_point in place.
    return at::fused_moving_avg_obs_fake_quant(
        x,
        observer_enabled_,
        fake_quant_enabled_,
        min_val_,
        max_val_,
        scale_,
        zero_point_,
        options_.observer.averaging_constant,
        quant_min,
        quant_max,
        per_channel() ? options_.observer.ch_axis : -1,
        per_channel(),
        options_.observer.qscheme == at::kPerTensorSymmetric ||
            options_.observer.qscheme == at::kPerChannelSymmetric);
  }
  if (observer_enabled() && x.numel() > 0) {
    const at::NoGradGuard no_grad;
    auto [low, high] = observe_min_max(
        x,
        min_val_,
        max_val_,
        options_.observer,
        options_.observer_kind == "moving_average");
    min_val_.copy_(low);
    max_val_.copy_(high);
    const QParams q = calculate_qparams();
    scale_.copy_(q.scale);
    zero_point_.copy_(q.zero_point);
  }
  if (!fake_quant_enabled()) {
    return x;
  }
  if (per_channel()) {
    return at::fake_quantize_per_channel_affine(
        x,
        scale_,
        zero_point_,
        options_.observer.ch_axis,
        quant_min,
        quant_max);
  }
  return at::fake_quantize_per_tensor_affine(
      x, scale_, zero_point_, quant_min, quant_max);
}

QParams FakeQuantizeImpl::calculate_qparams() const {
  return compress::calculate_qparams(min_val_, max_val_, options_.observer);
}

void FakeQuantizeImpl::enable_fake_quant(bool enabled) {
  fake_quant_enabled_.fill_(enabled ? 1 : 0);
}

void FakeQuantizeImpl::enable_observer(bool enabled) {
  observer_enabled_.fill_(enabled ? 1 : 0);
}

bool FakeQuantizeImpl::fake_quant_enabled() const {
  return fake_quant_enabled_.item<int64_t>() == 1;
}

bool FakeQuantizeImpl::observer_enabled() const {
  return observer_enabled_.item<int64_t>() == 1;
}

} // namespace hotloop::compress
