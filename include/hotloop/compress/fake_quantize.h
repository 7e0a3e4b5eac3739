#pragma once

#include "hotloop/compress/observer.h"

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <string>

namespace hotloop::compress {

/// What a FakeQuantize simulates and how it observes: torch.ao's
/// FakeQuantize (an observer, then fake_quantize_per_tensor/per_channel
/// _affine) or its FusedMovingAvgObsFakeQuantize (both in one ATen op,
/// fused_moving_avg_obs_fake_quant: what torch.ao's default QAT qconfigs
/// use).
struct FakeQuantizeOptions {
  /// dtype, qscheme, range, channel axis and averaging constant.
  ObserverOptions observer;
  /// "moving_average" (MovingAverageMinMaxObserver, or its per-channel
  /// version) or "minmax" (MinMaxObserver, PerChannelMinMaxObserver).
  std::string observer_kind = "moving_average";
  /// One ATen op for observing and fake-quantizing (moving average only).
  bool fused = true;
  /// Per channel: the number of channels (the scale's and the running
  /// min/max's length, known up front so that checkpoints keep one shape).
  int64_t channels = 1;
};

/// torch.ao.quantization's FakeQuantize / FusedMovingAvgObsFakeQuantize as
/// a module: in forward, while the observer is enabled, the running min and
/// max take in the input and the scale and zero point follow them; while
/// fake quantization is enabled, the output is
/// (clamp(round(x / scale + zero_point), quant_min, quant_max) - zero_point)
/// * scale, with the straight-through gradient. Both flags are on at first,
/// in training and in evaluation alike (as in torch.ao; the
/// QuantizationAwareTraining callback switches the observers by stage).
///
/// Buffers (saved in checkpoints): fake_quant_enabled, observer_enabled
/// ([1] int64), scale ([channels] float32), zero_point ([channels] int32),
/// min_val, max_val (per tensor: [] float32; per channel: [channels]).
class FakeQuantizeImpl : public torch::nn::Module {
 public:
  /// Throws ConfigError for an observer kind it does not have, a fused
  /// MinMax observer, or fewer than one channel.
  explicit FakeQuantizeImpl(FakeQuantizeOptions options = {});

  /// x: any shape, float32 (per channel: the channel on the observer's
  /// ch_axis, 0 for the fused op).
  at::Tensor forward(const at::Tensor& x);

  /// The scale and zero point of the running min and max as torch.ao's
  /// observer computes them (what conversion to int8 uses; the fused op's
  /// own `scale` buffer may differ from it in the last bit).
  QParams calculate_qparams() const;

  void enable_fake_quant(bool enabled = true);
  void enable_observer(bool enabled = true);
  bool fake_quant_enabled() const;
  bool observer_enabled() const;

  const FakeQuantizeOptions& options() const {
    return options_;
  }
  const at::Tensor& scale() const {
    return scale_;
  }
  const at::Tensor& zero_point() const {
    return zero_point_;
  }
  const at::Tensor& min_val() const {
    return min_val_;
  }
  const at::Tensor& max_val() const {
    return max_val_;
  }

 private:
  bool per_channel() const;

  FakeQuantizeOptions options_;
  at::Tensor fake_quant_enabled_;
  at::Tensor observer_enabled_;
  at::Tensor scale_;
  at::Tensor zero_point_;
  at::Tensor min_val_;
  at::Tensor max_val_;
};
TORCH_MODULE(FakeQuantize);

} // namespace hotloop::compress
