#include "hotloop/train/detail/optimization_step.h"

#include "hotloop/core/compat.h"
#include "hotloop/optim/clip_grad.h"
#include "hotloop/optim/lr_scheduler.h"
#include "hotloop/train/detail/graphed_step.h"
#include "hotloop/train/detail/step_clock.h"
#include "hotloop/train/grad_scaler.h"
#include "hotloop/train/precision.h"
#include "hotloop/train/strategy.h"
#include "hotloop/train/trainer.h"

#include "hotloop/core/error.h"

#include <torch/nn/utils/clip_grad.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

namespace hotloop::train::detail {

OptimizationStep::OptimizationStep(
    Trainer& trainer,
    Module& module,
    const OptimizerSetup& setup,
    const Precision& precision,
    GradScaler& scaler,
    StepClock& clock,
    int64_t accumulate)
    : trainer_(trainer),
      module_(module),
      setup_(setup),
      precision_(precision),
      scaler_(scaler),
      clock_(clock),
      accumulate_(accumulate),
      guard_losses_(
          !scaler.is_enabled() &&
          trainer.options().on_nonfinite_loss() != "ignore") {
  for (const auto& optimizer : setup_.optimizers) {
    std::vector<at::Tensor> parameters;
    for (const auto& group : optimizer->param_groups()) {
      parameters.insert(
          parameters.end(), group.params().begin(), group.params().end());
    }
    parameters_.push_back(std::move(parameters));
  }
  if (trainer.options().cuda_graphs()) {
    use_cuda_graphs();
  }
}

OptimizationStep::~OptimizationStep() = default;

void OptimizationStep::use_cuda_graphs() {
  const std::string conflict = cuda_graphs_conflict(trainer_.options());
  HOTLOOP_CHECK_AS(ConfigError, conflict.empty(), conflict);
  const std::string obstacle = module_.cuda_graph_obstacle();
  HOTLOOP_CHECK_AS(
      ConfigError,
      obstacle.empty(),
      "trainer.cuda_graphs=true cannot capture this module's training step: ",
      obstacle);
  HOTLOOP_CHECK_AS(
      ConfigError,
      trainer_.strategy().world_size() == 1,
      "trainer.cuda_graphs=true is not supported with data parallelism (",
      trainer_.strategy().world_size(),
      " processes): the all-reduce runs from autograd hooks outside a "
      "capture");
  graphed_ = std::make_unique<GraphedStep>(module_, setup_, precision_, [this] {
    for (const auto& parameters : parameters_) {
      clip_gradients(parameters);
    }
  });
  const c10::Device device = trainer_.device();
  HOTLOOP_CHECK_AS(
      ConfigError,
      device.is_cuda(),
      "trainer.cuda_graphs=true needs a CUDA device; this fit runs on ",
      device);
  HOTLOOP_CHECK_AS(
      ConfigError,
      GraphedStep::available(),
      "trainer.cuda_graphs=true: this build of hotloop has no CUDA graph "
      "capture (ATen/cuda/CUDAGraph.h did not compile with its LibTorch; "
      "see the configure output)");
}

at::Tensor OptimizationStep::run_graphed(
    const data::Batch& batch, int64_t batch_idx, MetricCollection& metrics) {
  clock_.begin(Phase::kForward);
  pruned_.recompute(module_);
  HOTLOOP_CHECK_AS(
      ConfigError,
      !pruned_.any(),
      "trainer.cuda_graphs=true cannot train a pruned model: its masked "
      "weights are recomputed before each forward, outside the captured "
      "step");
  const bool captured = graphed_->captured();
  const at::Tensor loss = graphed_->run(batch, batch_idx, metrics);
  if (!captured && graphed_->captured() && trainer_.shows_progress()) {
    trainer_.out() << "trainer.cuda_graphs: the training step is captured at "
                   << "step " << trainer_.progress_.global_step + 1
                   << " and replayed for batches of shape "
                   << batch.input.sizes() << "\n";
  }
  if (guard_losses_) {
    loss_is_usable(loss, batch_idx); // stop throws; ignore trains on
  }
  clock_.begin(Phase::kOptimizer);
  {
    // After the update here: the gradients are this step's, clipped.
    const auto logging = clock_.time(Phase::kLogging);
    trainer_.each_callback(
        [&](Callback& c) { c.on_before_backward(trainer_, module_, loss); });
    trainer_.each_callback(
        [&](Callback& c) { c.on_after_backward(trainer_, module_); });
    for (const auto& optimizer : setup_.optimizers) {
      trainer_.each_callback([&](Callback& c) {
        c.on_before_optimizer_step(trainer_, module_, *optimizer);
      });
    }
    for (const auto& optimizer : setup_.optimizers) {
      trainer_.each_callback([&](Callback& c) {
        c.on_before_zero_grad(trainer_, module_, *optimizer);
      });
    }
  }
  const int64_t steps = ++trainer_.progress_.global_step;
  step_schedules(setup_.schedules, ScheduleInterval::kStep, steps);
  return loss;
}

at::Tensor OptimizationStep::run(
    const data::Batch& batch,
    int64_t batch_idx,
    bool last,
    MetricCollection& metrics) {
  if (graphed_ != nullptr) {
    return run_graphed(batch, batch_idx, metrics);
  }
  clock_.begin(Phase::kForward);
  at::Tensor loss;
  std::map<std::string, std::pair<double, double>> logged;
  if (guard_losses_ && trainer_.options().on_nonfinite_loss() == "skip_step") {
    logged = metrics.state(); // a skipped step's metrics are taken back
  }
  pruned_.recompute(module_);
  {
    const AutocastGuard autocast = precision_.autocast();
    loss = module_.training_step(batch, batch_idx, metrics);
  }
  const at::Tensor loss_value = loss.detach();
  if (guard_losses_ && !loss_is_usable(loss_value, batch_idx)) {
    skipping_ = true;
    metrics.load_state(logged);
  }
  if (skipping_) {
    // No backward: the step's gradients are dropped on its last
    // micro-batch and no optimizer or schedule steps.
    if (last) {
      zero_grad();
      skipping_ = false;
    }
    clock_.begin(Phase::kOptimizer);
    return loss_value;
  }
  // The micro-batches' gradients add up: dividing each loss by their count
  // makes the sum the gradient of their mean, as one whole batch's.
  if (accumulate_ > 1) {
    loss = loss / static_cast<double>(accumulate_);
  }

  clock_.begin(Phase::kBackward);
  // Only the step's last backward all-reduces; the others just add up
  // locally (DDP's no_sync).
  Strategy& strategy = trainer_.strategy();
  strategy.before_backward(loss, last);
  {
    const auto logging = clock_.time(Phase::kLogging);
    trainer_.each_callback(
        [&](Callback& c) { c.on_before_backward(trainer_, module_, loss); });
  }
  (scaler_.is_enabled() ? scaler_.scale(loss) : loss).backward();
  if (last && strategy.world_size() > 1) {
    // Backward returns once every process's gradients are in: its end was
    // waiting for them.
    clock_.begin(Phase::kComm, strategy.gradient_wait());
  }

  clock_.begin(Phase::kOptimizer);
  const auto after_backward = [&] {
    const auto logging = clock_.time(Phase::kLogging);
    trainer_.each_callback(
        [&](Callback& c) { c.on_after_backward(trainer_, module_); });
  };
  if (!last) {
    after_backward();
    return loss_value;
  }
  // The all-reduce ran in buckets during backward; the last ones may still
  // be in flight. Unscaling and clipping must see the mean over processes.
  strategy.wait_for_gradients();
  after_backward();
  for (size_t i = 0; i < setup_.optimizers.size(); ++i) {
    torch::optim::Optimizer& optimizer = *setup_.optimizers[i];
    if (scaler_.is_enabled()) {
      scaler_.unscale_(optimizer); // callbacks and clipping see true grads
    }
    {
      const auto logging = clock_.time(Phase::kLogging);
      trainer_.each_callback([&](Callback& c) {
        c.on_before_optimizer_step(trainer_, module_, optimizer);
      });
    }
    clip_gradients(parameters_[i]);
    if (scaler_.is_enabled()) {
      scaler_.step(optimizer); // skipped on inf/NaN gradients
    } else {
      optimizer.step();
    }
  }
  if (scaler_.is_enabled()) {
    scaler_.update(); // one scale for all optimizers
  }
  {
    const auto logging = clock_.time(Phase::kLogging);
    for (const auto& optimizer : setup_.optimizers) {
      trainer_.each_callback([&](Callback& c) {
        c.on_before_zero_grad(trainer_, module_, *optimizer);
      });
    }
  }
  // Dropped, not zero-filled: the next backward writes fresh gradients.
  zero_grad();
  const int64_t steps = ++trainer_.progress_.global_step;
  step_schedules(setup_.schedules, ScheduleInterval::kStep, steps);
  return loss_value;
}

constexpr const char* kDivergenceAdvice =
    ". Lower optimizer.lr, clip gradients (trainer.gradient_clip_val), or "
    "train in float32 (trainer.precision=32); "
    "trainer.on_nonfinite_loss=skip_step skips such steps";

bool OptimizationStep::loss_is_usable(
    const at::Tensor& loss, int64_t batch_idx) {
  Strategy& strategy = trainer_.strategy();
  const int64_t step = trainer_.progress().global_step + 1;
  if (!loss.device().is_cpu() &&
      trainer_.options().on_nonfinite_loss() == "stop") {
    // Reading the loss every step would make the host wait for the GPU
    // every step. The losses are summed on the device in float64, finite
    // exactly when each loss was (finite float32 losses cannot overflow
    // it), and the sum is read every log_every_n_steps steps, when the
    // logged loss is read anyway; checkpoints still refuse non-finite
    // weights. One add a step, where isfinite, logical_not and logical_or
    // launched six kernels (logical_or's first call, in the second step,
    // took 17-22 ms on the H200; the traces' launch calls over 1 ms will
    // say what the add's first call costs).
    if (loss_sum_.defined()) {
      loss_sum_.add_(loss.detach());
    } else {
      loss_sum_ =
          loss.detach().to(at::kDouble, /*non_blocking=*/false, /*copy=*/true);
    }
    const int64_t every =
        std::max<int64_t>(trainer_.options().log_every_n_steps(), 1);
    if (step % every != 0) {
      return true;
    }
    bool found = !std::isfinite(loss_sum_.item<double>());
    loss_sum_ = at::Tensor();
    if (strategy.world_size() > 1) {
      found = strategy.any(found);
    }
    HOTLOOP_CHECK(
        !found,
        "training diverged: a loss was not finite between step ",
        std::max<int64_t>(step - every + 1, 1),
        " and step ",
        step,
        " (read every trainer.log_every_n_steps=",
        every,
        " steps on ",
        loss.device(),
        ")",
        kDivergenceAdvice);
    return true;
  }
  // Reading the loss makes the host wait for the device, once a step.
  const double value = loss.item<double>();
  bool finite = std::isfinite(value);
  if (strategy.world_size() > 1) {
    finite = !strategy.any(!finite); // all stop or skip together
  }
  if (finite) {
    last_finite_loss_ = value;
    last_finite_step_ = step;
    return true;
  }
  const std::string last = last_finite_step_ < 0
                               ? std::string("no step had a finite loss")
                               : hotloop::detail::str_cat(
                                     "the last finite loss was ",
                                     last_finite_loss_,
                                     " at step ",
                                     last_finite_step_);
  if (trainer_.options().on_nonfinite_loss() == "skip_step") {
    if (trainer_.shows_progress()) {
      trainer_.out() << "step " << step << " skipped: the loss is "
                     << (std::isfinite(value) ? "not finite on another process"
                                              : hotloop::detail::str_cat(value))
                     << " (trainer.on_nonfinite_loss=skip_step)\n";
    }
    return false;
  }
  throw Error(hotloop::detail::str_cat(
      "training diverged: the loss is ",
      std::isfinite(value) ? std::string("not finite on another process")
                           : hotloop::detail::str_cat(value),
      " at step ",
      step,
      " (epoch ",
      trainer_.current_epoch() + 1,
      ", batch ",
      batch_idx + 1,
      "); ",
      last,
      kDivergenceAdvice));
}

void OptimizationStep::zero_grad() {
  for (const auto& optimizer : setup_.optimizers) {
    if (trainer_.options().zero_grad_set_to_none()) {
      compat::zero_grad_set_to_none(*optimizer);
      continue;
    }
    for (auto& group : optimizer->param_groups()) {
      for (auto& parameter : group.params()) {
        if (parameter.mutable_grad().defined()) {
          parameter.mutable_grad().detach_().zero_();
        }
      }
    }
  }
}

void OptimizationStep::clip_gradients(
    const std::vector<at::Tensor>& parameters) const {
  const TrainerOptions& options = trainer_.options();
  if (options.gradient_clip_val() <= 0) {
    return;
  }
  if (options.gradient_clip_algorithm() == "value") {
    torch::nn::utils::clip_grad_value_(parameters, options.gradient_clip_val());
  } else {
    // Ours, not LibTorch's: the same arithmetic without reading the norm
    // back, which would make the host wait for the device every step.
    optim::clip_grad_norm_(parameters, options.gradient_clip_val());
  }
}

void step_schedules(
    const std::vector<ScheduleConfig>& schedules,
    ScheduleInterval interval,
    int64_t count) {
  for (const ScheduleConfig& schedule : schedules) {
    if (schedule.interval == interval && !schedule.scheduler->needs_metric() &&
        count % schedule.frequency == 0) {
      schedule.scheduler->step();
    }
  }
}

} // namespace hotloop::train::detail
