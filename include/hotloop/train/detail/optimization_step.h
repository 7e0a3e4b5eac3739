#pragma once

#include "hotloop/compress/parametrization.h"
#include "hotloop/data/batch.h"
#include "hotloop/train/metrics.h"
#include "hotloop/train/module.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace hotloop::train {
class GradScaler;
class Precision;
class Trainer;
} // namespace hotloop::train

namespace hotloop::train::detail {

class GraphedStep;
class StepClock;

/// The training step of a fit, as llm.c's micro-step loop: forward under
/// autocast → loss ÷ accumulation → backward (scaled) → on the last
/// micro-batch of an optimizer step: wait for the gradients, unscale, clip,
/// step, update the scale, drop the gradients, step the schedules. Not
/// thread-safe.
class OptimizationStep {
 public:
  /// The optimizers and schedules are `setup`'s, which must outlive this.
  OptimizationStep(
      Trainer& trainer,
      Module& module,
      const OptimizerSetup& setup,
      const Precision& precision,
      GradScaler& scaler,
      StepClock& clock,
      int64_t accumulate);
  ~OptimizationStep();

  /// Trains on micro-batch `batch_idx` of the epoch, already on the device;
  /// `last` when it completes an optimizer step, which is then taken (and
  /// the Trainer's global_step counts it). Returns the batch's loss,
  /// detached, before the accumulation division.
  at::Tensor run(
      const data::Batch& batch,
      int64_t batch_idx,
      bool last,
      MetricCollection& metrics);

  /// Drops every optimizer's gradients (or zero-fills them when
  /// trainer.zero_grad_set_to_none is off).
  void zero_grad();

 private:
  void clip_gradients(const std::vector<at::Tensor>& parameters) const;
  // trainer.on_nonfinite_loss: whether this micro-batch's loss may train.
  // Throws Error (stop) naming the step and what to change; false to skip
  // the step. Every process decides the same.
  bool loss_is_usable(const at::Tensor& loss, int64_t batch_idx);
  // trainer.cuda_graphs: throws ConfigError for what a captured step
  // cannot hold, else makes graphed_.
  void use_cuda_graphs();
  // The step after a graphed forward, backward and update: the callbacks,
  // the step count and the schedules.
  at::Tensor run_graphed(
      const data::Batch& batch, int64_t batch_idx, MetricCollection& metrics);

  Trainer& trainer_;
  Module& module_;
  const OptimizerSetup& setup_;
  const Precision& precision_;
  GradScaler& scaler_;
  StepClock& clock_;
  int64_t accumulate_;
  // Each optimizer's parameters, for clipping.
  std::vector<std::vector<at::Tensor>> parameters_;
  // Checks losses (not under fp16, whose scaler skips overflowing steps).
  bool guard_losses_;
  // The optimizer step in progress is skipped (trainer.on_nonfinite_loss).
  bool skipping_ = false;
  double last_finite_loss_ = 0;
  // On a GPU: the float64 sum of the losses since the last read, not
  // finite when one of them was not.
  at::Tensor loss_sum_;
  int64_t last_finite_step_ = -1;
  std::unique_ptr<GraphedStep> graphed_; // trainer.cuda_graphs
  // A pruned model's masked weights, recomputed before each forward (what
  // PyTorch's pruning pre-hooks do).
  compress::PrunedForward pruned_;
};

/// Steps the schedules of `interval` that watch no metric and are due at
/// the `count`-th step or epoch (every `frequency`).
void step_schedules(
    const std::vector<ScheduleConfig>& schedules,
    ScheduleInterval interval,
    int64_t count);

} // namespace hotloop::train::detail
