#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/QScheme.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <utility>

namespace hotloop::compress {

/// A scale and zero point: per tensor ([1] each) or per channel ([C]).
struct QParams {
  /// float32
  at::Tensor scale;
  /// int32 or int64, as torch.ao returns them
  at::Tensor zero_point;
  /// The channel axis of per-channel parameters; -1 per tensor.
  int64_t axis = -1;
};

/// What an observer quantizes to (torch.ao.quantization's observer
/// arguments): the dtype (quint8 or qint8), the scheme (per-tensor or
/// per-channel, affine or symmetric) and the range.
struct ObserverOptions {
  at::ScalarType dtype = at::kQUInt8;
  at::QScheme qscheme = at::kPerTensorAffine;
  /// Halves the range: 0..127 for quint8, -64..63 for qint8 (what FBGEMM's
  /// and x86's activations need against overflow).
  bool reduce_range = false;
  /// The channel axis of a per-channel observer.
  int64_t ch_axis = 0;
  /// MovingAverage observers: the weight of each new batch's min and max.
  double averaging_constant = 0.01;

  /// torch.ao's calculate_qmin_qmax.
  std::pair<int64_t, int64_t> quant_range() const;
};

/// torch.ao's _calculate_qparams: the scale ([1], or [C] per channel;
/// float32) and zero point (int64) of a running min and max (per tensor:
/// [] float32; per channel: [C]), bit for bit. Scale 1 and zero point 0
/// when nothing was observed (min +inf, or an empty per-channel min).
QParams calculate_qparams(
    const at::Tensor& min_val,
    const at::Tensor& max_val,
    const ObserverOptions& options);

/// One observation of `x` (detached; float32): the new running min and max,
/// as torch.ao's observers update them. MinMax: the extremes so far;
/// moving average: min + averaging_constant * (batch min - min), the batch's
/// own at the first observation. Per channel (a per-channel qscheme): over
/// every axis but options.ch_axis.
std::pair<at::Tensor, at::Tensor> observe_min_max(
    const at::Tensor& x,
    const at::Tensor& min_val,
    const at::Tensor& max_val,
    const ObserverOptions& options,
    bool moving_average);

/// torch.ao.quantization's MinMaxObserver (per tensor), or with
/// averaging_constant its MovingAverageMinMaxObserver, or with a
/// per-channel qscheme its PerChannelMinMaxObserver (with
/// moving_average, MovingAveragePerChannelMinMaxObserver): the running min and
/// max of what it sees, and the scale and zero point they give, computed
/// as torch.ao computes them (the same tensors, bit for bit).
class Observer {
 public:
  /// Throws ConfigError for a dtype other than quint8/qint8 or a scheme it
  /// does not have, or an averaging constant outside (0, 1].
  explicit Observer(ObserverOptions options = {}, bool moving_average = false);

  /// Records `x` (detached; float32).
  void observe(const at::Tensor& x);
  /// The scale and zero point of what was seen: torch.ao's
  /// _calculate_qparams (scale 1, zero point 0 before anything was seen).
  QParams calculate_qparams() const;

  bool observed() const;
  const at::Tensor& min_val() const {
    return min_val_;
  }
  const at::Tensor& max_val() const {
    return max_val_;
  }
  const ObserverOptions& options() const {
    return options_;
  }
  bool per_channel() const;

 private:
  ObserverOptions options_;
  bool moving_average_;
  at::Tensor min_val_;
  at::Tensor max_val_;
};

} // namespace hotloop::compress
