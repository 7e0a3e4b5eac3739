#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <torch/arg.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <cstdint>
#include <unordered_map>

namespace hotloop::train {

/// Options of GradScaler; names and defaults as in PyTorch's
/// `torch.cuda.amp.GradScaler`.
struct GradScalerOptions {
  /// Scale before the first update (> 0 and finite).
  TORCH_ARG(double, init_scale) = 65536.0;
  /// Multiplier after growth_interval finite steps in a row (> 1).
  TORCH_ARG(double, growth_factor) = 2.0;
  /// Multiplier after a step with an inf/NaN gradient, in (0, 1).
  TORCH_ARG(double, backoff_factor) = 0.5;
  /// Finite steps in a row that grow the scale (> 0).
  TORCH_ARG(int64_t, growth_interval) = 2000;
  /// When false every method is a pass-through (see GradScaler).
  TORCH_ARG(bool, enabled) = true;
};

/// Dynamic loss scaling for float16 mixed precision, step for step the same
/// as PyTorch's `GradScaler` (1.13 and 2.x):
///
///     scaler.scale(loss).backward();
///     scaler.unscale_(optimizer);   // optional: before clipping
///     scaler.step(optimizer);       // skipped if a grad is inf/NaN
///     scaler.update();
///
/// The scale (float32 [1]) and growth tracker (int32 [1]) live on the
/// device of the first loss passed to `scale()`; unscaling and the update
/// run on that device without reading values back, except for the one read
/// of the inf/NaN flag in `step()` that PyTorch also does. Where LibTorch
/// has the fused kernels for the device (`_amp_foreach_non_finite_check_and_
/// unscale_`, `_amp_update_scale_`: CUDA always, CPU from LibTorch 2.3) they
/// are used; elsewhere (CPU on 1.13 to 2.2) plain tensor ops compute the
/// same values bit for bit.
///
/// Unlike PyTorch 1.13, which disables its scaler when CUDA is absent, this
/// one also scales CPU losses (as `torch.amp.GradScaler("cpu")` does from
/// 2.3). Errors from calling the methods out of order are `hotloop::Error`
/// with PyTorch's messages. Not thread-safe; an optimizer must outlive its
/// use within an iteration (state is keyed by its address until `update()`).
class GradScaler {
 public:
  /// Validates `options` (`hotloop::ConfigError` naming the bad option).
  explicit GradScaler(GradScalerOptions options = {});
  GradScaler(const GradScaler&) = delete;
  GradScaler& operator=(const GradScaler&) = delete;

  /// `loss * scale` (PyTorch's broadcasting: a 0-dim loss gives a [1]
  /// float32 tensor). The first call creates the scale on `loss`'s device.
  /// Disabled: returns `loss` itself.
  at::Tensor scale(const at::Tensor& loss);

  /// Divides every gradient of `optimizer` by the scale in place and records
  /// whether any was inf/NaN (checked before dividing). At most once per
  /// optimizer between `update()`s; call before clipping. Throws
  /// `hotloop::Error` if called twice, after `step(optimizer)`, before any
  /// `scale()`, or on float16 gradients. Disabled: does nothing.
  void unscale_(torch::optim::Optimizer& optimizer);

  /// Unscales (unless `unscale_` already did) and runs `optimizer.step()`
  /// unless a gradient was inf/NaN; returns whether it stepped. Reads the
  /// inf/NaN flag back once (a device sync). Throws `hotloop::Error` if
  /// called twice for `optimizer` between `update()`s, before any `scale()`,
  /// or when the optimizer had no gradients to check. Disabled: just steps.
  bool step(torch::optim::Optimizer& optimizer);

  /// Ends the iteration: if any optimizer saw an inf/NaN gradient, scale *=
  /// backoff_factor and the tracker restarts; else the tracker counts one
  /// more finite step, and at growth_interval scale *= growth_factor (kept
  /// when the product would overflow float32) and the tracker restarts.
  /// Throws `hotloop::Error` when no optimizer was stepped or unscaled since
  /// the last update. Disabled: does nothing.
  void update();

  /// Ends the iteration by setting the scale to `new_scale` (> 0); the
  /// growth tracker is left as it is (PyTorch's `update(new_scale)`).
  void update(double new_scale);

  /// The current scale (a device sync); `init_scale` before the first
  /// `scale()`, 1.0 when disabled.
  double get_scale() const;

  /// Finite steps counted towards the next growth (a device sync); 0 when
  /// disabled.
  int64_t growth_tracker() const;

  /// The scale tensor, float32 [1], for logging without a sync; undefined
  /// before the first `scale()` and when disabled.
  const at::Tensor& scale_tensor() const;

  bool is_enabled() const;

  /// The options, with factors and interval as last loaded by `load`.
  const GradScalerOptions& options() const;

  /// Writes PyTorch's `state_dict` entries: `scale`, `growth_factor`,
  /// `backoff_factor` (double), `growth_interval`, `_growth_tracker` (int).
  /// Writes nothing when disabled, like PyTorch. Call after `update()`.
  void save(torch::serialize::OutputArchive& archive) const;

  /// Restores what `save` wrote, options included (PyTorch's
  /// `load_state_dict`), so the next steps continue exactly as the saved
  /// scaler's would have. Disabled: does nothing. Throws
  /// `hotloop::ConfigError` if the archive came from a disabled scaler.
  void load(torch::serialize::InputArchive& archive);

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  struct OptimizerState {
    Stage stage = Stage::kReady;
    // float32 [1] on the scale's device: > 0 if any grad was inf/NaN.
    at::Tensor found_inf;
  };

  void check_initialized(const char* function) const;

  GradScalerOptions options_;
  // Lazily created on the first loss's device, as in PyTorch.
  at::Tensor scale_;
  at::Tensor growth_tracker_;
  double init_scale_;
  int64_t init_growth_tracker_ = 0;
  std::unordered_map<const torch::optim::Optimizer*, OptimizerState>
      per_optimizer_;
};

namespace detail {
/// Whether this LibTorch has the fused GradScaler kernels for `device_type`
/// (CUDA: always; CPU: from 2.3). Exposed for tests.
bool has_amp_scaler_kernels(c10::DeviceType device_type);
} // namespace detail

} // namespace hotloop::train
