#pragma once

#include "hotloop/data/batch.h"
#include "hotloop/train/metrics.h"

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hotloop::optim {
class LRScheduler;
} // namespace hotloop::optim

namespace hotloop::train {

/// When a learning-rate schedule steps.
enum class ScheduleInterval { kStep, kEpoch };

/// A learning-rate schedule and when the Trainer steps it (Lightning's
/// lr_scheduler_config).
struct ScheduleConfig {
  /// Sets the rates of one of the setup's optimizers (its `optimizer()`).
  std::unique_ptr<optim::LRScheduler> scheduler;
  ScheduleInterval interval = ScheduleInterval::kStep;
  /// Step every `frequency` intervals (> 0): after optimizer steps
  /// `frequency`, 2 x `frequency`, ... or after epochs likewise.
  int64_t frequency = 1;
  /// For a schedule that watches a metric (plateau): its name, a key of
  /// the Trainer's callback_metrics when the epoch ends.
  std::string monitor = "val_loss";
};

/// What `Module::configure_optimizers` returns: one or more optimizers and
/// any number of schedules. With several optimizers (say, one for an
/// embedding and one for the rest), each owns its own parameters and all of
/// them step together at the end of every accumulation window, with one
/// loss scale for all (PyTorch's GradScaler rules for several optimizers).
struct OptimizerSetup {
  OptimizerSetup() = default;
  /// The common case: one optimizer and, unless `scheduler` is null, its
  /// schedule stepped every `interval`.
  explicit OptimizerSetup(
      std::unique_ptr<torch::optim::Optimizer> optimizer,
      std::unique_ptr<optim::LRScheduler> scheduler = nullptr,
      ScheduleInterval interval = ScheduleInterval::kStep,
      std::string monitor = "val_loss");
  OptimizerSetup(OptimizerSetup&&) noexcept;
  OptimizerSetup& operator=(OptimizerSetup&&) noexcept;
  ~OptimizerSetup();

  /// At least one; no parameter in two of them.
  std::vector<std::unique_ptr<torch::optim::Optimizer>> optimizers;
  std::vector<ScheduleConfig> schedules;
};

/// How long a fit will run, for schedules that need the horizon.
struct FitPlan {
  /// Optimizer steps over the whole fit; -1 when the fit has no end
  /// (max_epochs=-1 without max_steps).
  int64_t total_steps = 0;
  /// Optimizer steps in one epoch.
  int64_t steps_per_epoch = 0;
  /// Epochs of the fit; -1 for no limit.
  int64_t max_epochs = 0;
};

/// What a user subclasses to train with the Trainer: the model's parameters
/// plus the steps that turn a batch into a loss or metrics (Lightning's
/// LightningModule). The Trainer owns the loop: it calls these with the
/// module in train or eval mode and gradients on or off as appropriate.
class Module : public torch::nn::Module {
 public:
  /// Returns the scalar loss for `batch`; log anything else into `metrics`.
  virtual at::Tensor training_step(
      const data::Batch& batch,
      int64_t batch_idx,
      MetricCollection& metrics) = 0;

  /// Logs validation metrics (such as val_loss, val_acc) for `batch`; runs
  /// under no-grad in eval mode.
  virtual void validation_step(
      const data::Batch& batch,
      int64_t batch_idx,
      MetricCollection& metrics) = 0;

  /// Like validation_step for the test split; defaults to validation_step.
  virtual void test_step(
      const data::Batch& batch, int64_t batch_idx, MetricCollection& metrics) {
    validation_step(batch, batch_idx, metrics);
  }

  /// Returns the predictions for `batch` (Lightning's predict_step); runs
  /// without gradients in eval mode. The default throws Error: a Module
  /// that supports Trainer::predict overrides it.
  virtual at::Tensor predict_step(const data::Batch& batch, int64_t batch_idx);

  /// Forward FLOPs for one sample, when known (0: unknown). The step
  /// profile reports achieved FLOP/s as 3x this (forward + backward) per
  /// trained sample.
  virtual double flops_per_sample() const {
    return 0;
  }

  /// Tokens in one training sample, for models of sequences (0: not one):
  /// throughput is then reported in tokens/s besides samples/s.
  virtual int64_t tokens_per_sample() const {
    return 0;
  }

  /// Builds the optimizers and schedules for a fit as long as `plan`.
  virtual OptimizerSetup configure_optimizers(const FitPlan& plan) = 0;

  /// For a module that places its own submodules (an encoder on one GPU, a
  /// decoder on another): the device its batches go to. The Trainer then
  /// keeps that placement, and DistributedDataParallel wraps the module
  /// as it is, without device ids. nullopt (the default): the Trainer
  /// moves the whole module to its device.
  virtual std::optional<c10::Device> input_device() const {
    return std::nullopt;
  }

  /// Why this module's training step cannot be captured as a CUDA graph
  /// (trainer.cuda_graphs), in a phrase; empty (the default) when it can.
  /// A step that draws on the host or reads device values back (MixUp's
  /// draws) would be replayed with the captured values.
  virtual std::string cuda_graph_obstacle() const {
    return "";
  }
};

} // namespace hotloop::train
