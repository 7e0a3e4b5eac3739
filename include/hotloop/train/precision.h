#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <torch/nn/module.h>

#include <string>

namespace hotloop::train {

/// The Trainer's `precision` flag, as in Lightning.
enum class PrecisionMode {
  /// "32-true": float32 everywhere.
  k32True,
  /// "16-mixed": float32 weights, float16 autocast, loss scaling (CUDA only).
  k16Mixed,
  /// "bf16-mixed": float32 weights, bfloat16 autocast.
  kBf16Mixed,
  /// "bf16-true": weights, buffers and inputs in bfloat16, no autocast.
  kBf16True,
  /// "64-true": weights, buffers and inputs in float64, no autocast.
  k64True,
};

/// Parses Lightning's precision strings: "32-true", "16-mixed",
/// "bf16-mixed", "bf16-true", "64-true", and the short forms "32", "16",
/// "bf16", "64" (which Lightning maps to 32-true, 16-mixed, bf16-mixed,
/// 64-true). Anything else throws `hotloop::ConfigError`
/// `trainer.precision: expected one of 32-true, 16-mixed, bf16-mixed,
/// bf16-true, 64-true, got '<text>'`.
PrecisionMode parse_precision_mode(const std::string& text);

/// The canonical string of `mode`, such as "bf16-mixed".
const char* to_string(PrecisionMode mode);

/// Whether autocast is on for `device_type` (CPU or CUDA, else
/// `hotloop::ConfigError`) in this thread.
bool is_autocast_enabled(c10::DeviceType device_type);

/// The dtype autocast casts to on `device_type` (CPU or CUDA) in this
/// thread, whether or not autocast is on.
at::ScalarType autocast_dtype(c10::DeviceType device_type);

/// Autocast for one device type while alive, like `torch.autocast`: the
/// constructor saves the thread's autocast state for that device type (on or
/// off, dtype, cache flag), sets the new one and enters a nesting level; the
/// destructor leaves the level, clears the autocast weight cache when it
/// leaves the outermost level, and restores the saved state. Guards nest;
/// destroy them in reverse order (as scopes do). Autocast state is
/// thread-local, so a guard affects only the thread that built it.
class AutocastGuard {
 public:
  /// A guard that changes nothing (the true modes).
  AutocastGuard() = default;

  /// `torch.autocast(device_type, dtype, enabled)`. `device_type` is CPU or
  /// CUDA (else `hotloop::ConfigError`); `enabled = false` turns autocast
  /// off inside an enclosing autocast region. LibTorch throws `c10::Error`
  /// for a dtype it does not support on the device (CPU autocast in 1.13:
  /// bfloat16 only), leaving the state unchanged.
  AutocastGuard(
      c10::DeviceType device_type, at::ScalarType dtype, bool enabled = true);

  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;
  AutocastGuard(AutocastGuard&&) = delete;
  AutocastGuard& operator=(AutocastGuard&&) = delete;

  /// Whether this guard changed the autocast state (false for the default).
  bool active() const;

 private:
  bool active_ = false;
  c10::DeviceType device_type_ = c10::DeviceType::CPU;
  bool prev_enabled_ = false;
  at::ScalarType prev_dtype_ = at::kFloat;
  bool prev_cache_enabled_ = true;
};

/// What the Trainer's precision flag means for one device: the autocast
/// region around forward passes, the dtype of weights, and whether the loss
/// needs a GradScaler. Lightning's precision plugins in one class.
///
/// Usage in a training step:
///
///     Precision precision(mode, device);
///     precision.convert_module(model);            // once, after moving it
///     {
///       auto autocast = precision.autocast();
///       loss = model.forward(precision.convert_input(x), ...);
///     }
///     (precision.needs_scaler() ? scaler.scale(loss) : loss).backward();
class Precision {
 public:
  /// Throws `hotloop::ConfigError` for 16-mixed on CPU
  /// (`trainer.precision=16-mixed needs a CUDA device; use bf16-mixed on
  /// CPU`: CPU autocast in LibTorch 1.13 supports bfloat16 only) and for
  /// mixed modes on devices other than CPU and CUDA.
  Precision(PrecisionMode mode, c10::Device device);

  PrecisionMode mode() const;
  const c10::Device& device() const;

  /// Autocast to `compute_dtype()` on the device's type while the returned
  /// guard lives, for the mixed modes; a guard that changes nothing for
  /// the true modes. Use it around forward passes and the loss, not
  /// around backward (as in PyTorch's AMP recipe).
  [[nodiscard]] AutocastGuard autocast() const;

  /// bf16-true and 64-true: casts every floating-point parameter and buffer
  /// of `module` (recursively) to bfloat16 or float64 in place, leaving
  /// integer buffers (such as BatchNorm's num_batches_tracked) alone, like
  /// PyTorch's `module.to(torch.bfloat16)`. Other modes: nothing. Call before
  /// building the optimizer, since parameters are replaced in place (set_data).
  void convert_module(torch::nn::Module& module) const;

  /// bf16-true, 64-true: `input` cast to bfloat16 or float64 if it is
  /// floating point. Other
  /// modes (and non-floating inputs such as labels): `input` itself.
  at::Tensor convert_input(const at::Tensor& input) const;

  /// True for 16-mixed: gradients need a GradScaler.
  bool needs_scaler() const;

  /// The dtype most math runs in: float32 (32-true), float16 (16-mixed),
  /// bfloat16 (bf16-mixed, bf16-true), float64 (64-true).
  at::ScalarType compute_dtype() const;

 private:
  // bf16-true or 64-true: the module and inputs go to compute_dtype().
  bool converts_dtype() const;

  PrecisionMode mode_;
  c10::Device device_;
};

} // namespace hotloop::train
