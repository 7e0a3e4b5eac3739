#pragma once

// The one place that hides differences between LibTorch 1.13 (Debian, CPU)
// and LibTorch 2.x (the CUDA wheels). Code elsewhere calls these helpers
// instead of testing TORCH_VERSION_* itself.

#include <ATen/autocast_mode.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <torch/optim/optimizer.h>
#include <torch/version.h>

/// LibTorch's version as one comparable number: 1.13 -> 113, 2.4 -> 204.
#define HOTLOOP_TORCH_VERSION (TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR)

namespace hotloop::compat {

/// Drops every gradient of `optimizer`'s parameters (PyTorch's
/// `zero_grad(set_to_none=True)`): the next backward writes fresh gradient
/// tensors instead of adding into zero-filled ones, which saves a memset per
/// parameter and lets the allocator reuse the memory. LibTorch 1.13's
/// `zero_grad()` has no such flag and zero-fills; 2.x defaults to it.
inline void zero_grad_set_to_none(torch::optim::Optimizer& optimizer) {
#if HOTLOOP_TORCH_VERSION >= 200
  optimizer.zero_grad(/*set_to_none=*/true);
#else
  for (auto& group : optimizer.param_groups()) {
    for (auto& param : group.params()) {
      if (param.mutable_grad().defined()) {
        param.mutable_grad().reset();
      }
    }
  }
#endif
}

/// Autocast state per device type (CPU or CUDA). LibTorch 2.4 replaced the
/// per-device
// functions (`set_cpu_enabled`, `set_autocast_gpu_dtype`, ...) with ones
// taking the device type and deprecated the old names; 1.13 to 2.3 have only
// the old ones. Callers pass CPU or CUDA only (check_autocast_device).
#if HOTLOOP_TORCH_VERSION >= 204
inline bool autocast_enabled(c10::DeviceType type) {
  return at::autocast::is_autocast_enabled(type);
}
inline void set_autocast_enabled(c10::DeviceType type, bool enabled) {
  at::autocast::set_autocast_enabled(type, enabled);
}
inline at::ScalarType autocast_dtype(c10::DeviceType type) {
  return at::autocast::get_autocast_dtype(type);
}
inline void set_autocast_dtype(c10::DeviceType type, at::ScalarType dtype) {
  at::autocast::set_autocast_dtype(type, dtype);
}
#else
inline bool autocast_enabled(c10::DeviceType type) {
  return type == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled()
                                      : at::autocast::is_enabled();
}
inline void set_autocast_enabled(c10::DeviceType type, bool enabled) {
  if (type == c10::DeviceType::CPU) {
    at::autocast::set_cpu_enabled(enabled);
  } else {
    at::autocast::set_enabled(enabled);
  }
}
inline at::ScalarType autocast_dtype(c10::DeviceType type) {
  return type == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype()
                                      : at::autocast::get_autocast_gpu_dtype();
}
inline void set_autocast_dtype(c10::DeviceType type, at::ScalarType dtype) {
  if (type == c10::DeviceType::CPU) {
    at::autocast::set_autocast_cpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
}
#endif

/// Whether ATen has CPU kernels for `_amp_foreach_non_finite_check_and_
/// unscale_` and `_amp_update_scale_`: PyTorch registered them in 2.3
/// (pytorch/pytorch#109281, for `torch.amp.GradScaler("cpu")`); 1.13 has
/// them for CUDA (and Meta) only. The GradScaler test checks this against
/// the dispatcher of the LibTorch it is built with.
constexpr bool cpu_has_amp_scaler_kernels() {
  return HOTLOOP_TORCH_VERSION >= 203;
}

} // namespace hotloop::compat
