#include "hotloop/train/precision.h"

#include "hotloop/core/compat.h"
#include "hotloop/core/error.h"

#include <ATen/autocast_mode.h>
#include <ATen/core/grad_mode.h>

namespace hotloop::train {
namespace {

void check_autocast_device(c10::DeviceType type) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      type == c10::DeviceType::CPU || type == c10::DeviceType::CUDA,
      "autocast: expected a CPU or CUDA device type, got ",
      c10::DeviceTypeName(type, /*lower_case=*/true));
}

bool is_mixed(PrecisionMode mode) {
  return mode == PrecisionMode::k16Mixed || mode == PrecisionMode::kBf16Mixed;
}

} // namespace

PrecisionMode parse_precision_mode(const std::string& text) {
  if (text == "32-true" || text == "32") {
    return PrecisionMode::k32True;
  }
  if (text == "16-mixed" || text == "16") {
    return PrecisionMode::k16Mixed;
  }
  if (text == "bf16-mixed" || text == "bf16") {
    return PrecisionMode::kBf16Mixed;
  }
  if (text == "bf16-true") {
    return PrecisionMode::kBf16True;
  }
  if (text == "64-true" || text == "64") {
    return PrecisionMode::k64True;
  }
  throw ConfigError(
      "trainer.precision: expected one of 32-true, 16-mixed, bf16-mixed, "
      "bf16-true, 64-true, got '" +
      text + "'");
}

bool is_autocast_enabled(c10::DeviceType device_type) {
  check_autocast_device(device_type);
  return compat::autocast_enabled(device_type);
}

at::ScalarType autocast_dtype(c10::DeviceType device_type) {
  check_autocast_device(device_type);
  return compat::autocast_dtype(device_type);
}

const char* to_string(PrecisionMode mode) {
  switch (mode) {
    case PrecisionMode::k32True:
      return "32-true";
    case PrecisionMode::k16Mixed:
      return "16-mixed";
    case PrecisionMode::kBf16Mixed:
      return "bf16-mixed";
    case PrecisionMode::kBf16True:
      return "bf16-true";
    case PrecisionMode::k64True:
      return "64-true";
  }
  return "unknown";
}

// ---------------------------------------------------------------------------
// AutocastGuard: torch.autocast's __enter__ and __exit__ (1.13).

AutocastGuard::AutocastGuard(
    c10::DeviceType device_type, at::ScalarType dtype, bool enabled)
    : device_type_(device_type) {
  check_autocast_device(device_type);
  prev_cache_enabled_ = at::autocast::is_autocast_cache_enabled();
  prev_enabled_ = compat::autocast_enabled(device_type);
  prev_dtype_ = compat::autocast_dtype(device_type);
  compat::set_autocast_dtype(device_type, dtype);
  compat::set_autocast_enabled(device_type, enabled);
  at::autocast::increment_nesting();
  active_ = true;
}

AutocastGuard::~AutocastGuard() {
  if (!active_) {
    return;
  }
  // Drop the cast weights when leaving the outermost autocast region.
  if (at::autocast::decrement_nesting() == 0) {
    at::autocast::clear_cache();
  }
  compat::set_autocast_enabled(device_type_, prev_enabled_);
  compat::set_autocast_dtype(device_type_, prev_dtype_);
  at::autocast::set_autocast_cache_enabled(prev_cache_enabled_);
}

bool AutocastGuard::active() const {
  return active_;
}

// ---------------------------------------------------------------------------
// Precision

Precision::Precision(PrecisionMode mode, c10::Device device)
    : mode_(mode), device_(device) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      !(mode == PrecisionMode::k16Mixed && device.is_cpu()),
      "trainer.precision=16-mixed needs a CUDA device; use bf16-mixed on CPU");
  HOTLOOP_CHECK_AS(
      ConfigError,
      !is_mixed(mode) || device.is_cpu() || device.is_cuda(),
      "trainer.precision=",
      to_string(mode),
      " needs a CPU or CUDA device, got ",
      device.str());
}

PrecisionMode Precision::mode() const {
  return mode_;
}

const c10::Device& Precision::device() const {
  return device_;
}

AutocastGuard Precision::autocast() const {
  if (!is_mixed(mode_)) {
    return AutocastGuard();
  }
  return AutocastGuard(device_.type(), compute_dtype());
}

bool Precision::converts_dtype() const {
  return mode_ == PrecisionMode::kBf16True || mode_ == PrecisionMode::k64True;
}

void Precision::convert_module(torch::nn::Module& module) const {
  if (!converts_dtype()) {
    return;
  }
  at::NoGradGuard no_grad;
  // set_data swaps the storage of the tensors the module holds, as
  // Module::to does; unlike Module::to(dtype), integer buffers are kept.
  const at::ScalarType dtype = compute_dtype();
  for (auto& tensor : module.parameters()) {
    if (tensor.is_floating_point()) {
      tensor.set_data(tensor.to(dtype));
    }
  }
  for (auto& tensor : module.buffers()) {
    if (tensor.is_floating_point()) {
      tensor.set_data(tensor.to(dtype));
    }
  }
}

at::Tensor Precision::convert_input(const at::Tensor& input) const {
  if (converts_dtype() && input.is_floating_point()) {
    return input.to(compute_dtype());
  }
  return input;
}

bool Precision::needs_scaler() const {
  return mode_ == PrecisionMode::k16Mixed;
}

at::ScalarType Precision::compute_dtype() const {
  switch (mode_) {
    case PrecisionMode::k32True:
      return at::kFloat;
    case PrecisionMode::k16Mixed:
      return at::kHalf;
    case PrecisionMode::kBf16Mixed:
    case PrecisionMode::kBf16True:
      return at::kBFloat16;
    case PrecisionMode::k64True:
      return at::kDouble;
  }
  return at::kFloat;
}

} // namespace hotloop::train
