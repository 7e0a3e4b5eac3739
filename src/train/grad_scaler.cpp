#include "hotloop/train/grad_scaler.h"

#include "hotloop/core/compat.h"
#include "hotloop/core/error.h"

#include <ATen/Functions.h>
#include <ATen/core/grad_mode.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cmath>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

namespace hotloop::train {
namespace {

// The kernels' unscale for devices without them. Like the kernels, checks
// the values before dividing (a finite grad that overflows when divided by a
// scale < 1 does not count) and multiplies in float for reduced-precision
// grads, double for double ones.
void check_and_unscale_with_tensor_ops(
    const std::vector<at::Tensor>& grads,
    at::Tensor& found_inf,
    const at::Tensor& inv_scale) {
  std::vector<at::Tensor> finite;
  finite.reserve(grads.size());
  for (const auto& grad : grads) {
    finite.push_back(at::isfinite(grad).all());
  }
  // One flag per group, set on the device: no host sync per parameter.
  found_inf.masked_fill_(at::stack(finite).all().logical_not(), 1.0);
  const at::Tensor factor = inv_scale.reshape({}); // 0-dim: keeps grad dtype
  for (auto grad : grads) {
    if (grad.scalar_type() == at::kHalf ||
        grad.scalar_type() == at::kBFloat16) {
      grad.copy_(grad.to(at::kFloat).mul_(factor));
    } else {
      grad.mul_(factor);
    }
  }
}

// `_amp_update_scale_` for devices without the kernel, as tensor ops on the
// scale's device. The products are rounded as the kernel's
// `float(double(scale) * factor)`.
void update_scale_with_tensor_ops(
    at::Tensor& scale,
    at::Tensor& growth_tracker,
    const at::Tensor& found_inf,
    double growth_factor,
    double backoff_factor,
    int64_t growth_interval) {
  const at::Tensor found = found_inf.ne(0);
  const at::Tensor successful = growth_tracker + 1;
  const at::Tensor grow =
      successful.eq(growth_interval).logical_and_(found.logical_not());
  const at::Tensor scale64 = scale.to(at::kDouble);
  const at::Tensor grown = scale64.mul(growth_factor).to(at::kFloat);
  const at::Tensor backed_off = scale64.mul(backoff_factor).to(at::kFloat);
  // The kernel keeps the scale when growing would overflow float32.
  const at::Tensor grown_or_kept =
      at::where(grow.logical_and(at::isfinite(grown)), grown, scale);
  scale.copy_(at::where(found, backed_off, grown_or_kept));
  growth_tracker.copy_(at::where(
      found.logical_or(grow), at::zeros_like(successful), successful));
}

c10::IValue read_value(
    torch::serialize::InputArchive& archive, const std::string& key) {
  c10::IValue value;
  archive.read(key, value);
  return value;
}

void validate(const GradScalerOptions& options) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.init_scale() > 0 && std::isfinite(options.init_scale()),
      "grad_scaler.init_scale must be positive and finite, got ",
      options.init_scale());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.growth_factor() > 1.0,
      "grad_scaler.growth_factor must be > 1, got ",
      options.growth_factor());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.backoff_factor() > 0.0 && options.backoff_factor() < 1.0,
      "grad_scaler.backoff_factor must be in (0, 1), got ",
      options.backoff_factor());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.growth_interval() > 0,
      "grad_scaler.growth_interval must be positive, got ",
      options.growth_interval());
}

} // namespace

namespace detail {
bool has_amp_scaler_kernels(c10::DeviceType device_type) {
  switch (device_type) {
    case c10::DeviceType::CUDA:
      return true;
    case c10::DeviceType::CPU:
      return compat::cpu_has_amp_scaler_kernels();
    default:
      return false;
  }
}
} // namespace detail

GradScaler::GradScaler(GradScalerOptions options)
    : options_(std::move(options)), init_scale_(options_.init_scale()) {
  if (options_.enabled()) {
    validate(options_);
  }
}

at::Tensor GradScaler::scale(const at::Tensor& loss) {
  if (!options_.enabled()) {
    return loss;
  }
  if (!scale_.defined()) {
    const auto on_device = at::TensorOptions().device(loss.device());
    scale_ = at::full({1}, init_scale_, on_device.dtype(at::kFloat));
    growth_tracker_ =
        at::full({1}, init_growth_tracker_, on_device.dtype(at::kInt));
  }
  return loss * scale_.to(loss.device(), at::kFloat, /*non_blocking=*/true);
}

void GradScaler::unscale_(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled()) {
    return;
  }
  check_initialized("unscale_()");
  OptimizerState& state = per_optimizer_[&optimizer];
  HOTLOOP_CHECK(
      state.stage != Stage::kUnscaled,
      "unscale_() has already been called on this optimizer since the last "
      "update().");
  HOTLOOP_CHECK(
      state.stage != Stage::kStepped,
      "unscale_() is being called after step().");

  at::NoGradGuard no_grad;
  const at::Tensor inv_scale =
      scale_.to(at::kDouble).reciprocal().to(at::kFloat);
  // The kernels need the grads of one call on one device with one dtype.
  std::unordered_map<
      c10::Device,
      std::map<at::ScalarType, std::vector<at::Tensor>>>
      grads_by_device;
  for (auto& group : optimizer.param_groups()) {
    for (auto& param : group.params()) {
      const at::Tensor& grad = param.grad();
      if (!grad.defined()) {
        continue;
      }
      HOTLOOP_CHECK(
          grad.scalar_type() != at::kHalf,
          "Attempting to unscale FP16 gradients.");
      at::Tensor to_unscale = grad.is_sparse() ? grad._values() : grad;
      grads_by_device[to_unscale.device()][to_unscale.scalar_type()].push_back(
          std::move(to_unscale));
    }
  }

  at::Tensor found_inf_total;
  for (auto& [device, grads_by_dtype] : grads_by_device) {
    at::Tensor found_inf = at::zeros({1}, inv_scale.options().device(device));
    const at::Tensor device_inv_scale =
        inv_scale.to(device, at::kFloat, /*non_blocking=*/true);
    for (auto& [dtype, grads] : grads_by_dtype) {
      if (detail::has_amp_scaler_kernels(device.type())) {
        at::_amp_foreach_non_finite_check_and_unscale_(
            grads, found_inf, device_inv_scale);
      } else {
        check_and_unscale_with_tensor_ops(grads, found_inf, device_inv_scale);
      }
    }
    found_inf =
        found_inf.to(scale_.device(), at::kFloat, /*non_blocking=*/true);
    found_inf_total =
        found_inf_total.defined() ? found_inf_total + found_inf : found_inf;
  }
  state.found_inf = found_inf_total; // undefined if there were no grads
  state.stage = Stage::kUnscaled;
}

bool GradScaler::step(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled()) {
    optimizer.step();
    return true;
  }
  check_initialized("step()");
  HOTLOOP_CHECK(
      per_optimizer_[&optimizer].stage != Stage::kStepped,
      "step() has already been called since the last update().");
  if (per_optimizer_[&optimizer].stage == Stage::kReady) {
    unscale_(optimizer);
  }
  OptimizerState& state = per_optimizer_[&optimizer];
  HOTLOOP_CHECK(
      state.found_inf.defined(),
      "No inf checks were recorded for this optimizer.");
  // The one host sync of the iteration, as in PyTorch's _maybe_opt_step.
  const bool finite = state.found_inf.item<float>() == 0.0f;
  if (finite) {
    optimizer.step();
  }
  state.stage = Stage::kStepped;
  return finite;
}

void GradScaler::update() {
  if (!options_.enabled()) {
    return;
  }
  check_initialized("update()");
  at::Tensor found_inf;
  for (const auto& [optimizer, state] : per_optimizer_) {
    if (state.found_inf.defined()) {
      found_inf =
          found_inf.defined() ? found_inf + state.found_inf : state.found_inf;
    }
  }
  HOTLOOP_CHECK(
      found_inf.defined(), "No inf checks were recorded prior to update().");
  at::NoGradGuard no_grad;
  if (detail::has_amp_scaler_kernels(scale_.device().type())) {
    at::_amp_update_scale_(
        scale_,
        growth_tracker_,
        found_inf,
        options_.growth_factor(),
        options_.backoff_factor(),
        options_.growth_interval());
  } else {
    update_scale_with_tensor_ops(
        scale_,
        growth_tracker_,
        found_inf,
        options_.growth_factor(),
        options_.backoff_factor(),
        options_.growth_interval());
  }
  per_optimizer_.clear();
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled()) {
    return;
  }
  check_initialized("update()");
  HOTLOOP_CHECK(
      new_scale > 0 && std::isfinite(new_scale),
      "GradScaler::update: new_scale must be positive and finite, got ",
      new_scale);
  scale_.fill_(new_scale);
  per_optimizer_.clear();
}

double GradScaler::get_scale() const {
  if (!options_.enabled()) {
    return 1.0;
  }
  return scale_.defined() ? static_cast<double>(scale_.item<float>())
                          : init_scale_;
}

int64_t GradScaler::growth_tracker() const {
  if (!options_.enabled()) {
    return 0;
  }
  return growth_tracker_.defined() ? growth_tracker_.item<int32_t>()
                                   : init_growth_tracker_;
}

const at::Tensor& GradScaler::scale_tensor() const {
  return scale_;
}

bool GradScaler::is_enabled() const {
  return options_.enabled();
}

const GradScalerOptions& GradScaler::options() const {
  return options_;
}

void GradScaler::save(torch::serialize::OutputArchive& archive) const {
  if (!options_.enabled()) {
    return;
  }
  archive.write("scale", c10::IValue(get_scale()));
  archive.write("growth_factor", c10::IValue(options_.growth_factor()));
  archive.write("backoff_factor", c10::IValue(options_.backoff_factor()));
  archive.write("growth_interval", c10::IValue(options_.growth_interval()));
  archive.write("_growth_tracker", c10::IValue(growth_tracker()));
}

void GradScaler::load(torch::serialize::InputArchive& archive) {
  if (!options_.enabled()) {
    return;
  }
  c10::IValue scale;
  HOTLOOP_CHECK_AS(
      ConfigError,
      archive.try_read("scale", scale),
      "grad_scaler: the saved state is empty, possibly because it was saved "
      "from a disabled GradScaler (trainer.precision other than 16-mixed)");
  init_scale_ = scale.toDouble();
  options_.growth_factor(read_value(archive, "growth_factor").toDouble());
  options_.backoff_factor(read_value(archive, "backoff_factor").toDouble());
  options_.growth_interval(read_value(archive, "growth_interval").toInt());
  init_growth_tracker_ = read_value(archive, "_growth_tracker").toInt();
  if (scale_.defined()) {
    scale_.fill_(init_scale_);
    growth_tracker_.fill_(init_growth_tracker_);
  }
}

void GradScaler::check_initialized(const char* function) const {
  HOTLOOP_CHECK(
      scale_.defined(),
      "Attempted ",
      function,
      " before the scale was created. This may indicate your script did not "
      "use scaler.scale(loss) earlier in the iteration.");
}

} // namespace hotloop::train
