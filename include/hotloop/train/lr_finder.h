#pragma once

#include "hotloop/data/dataloader.h"
#include "hotloop/train/module.h"
#include "hotloop/train/trainer_options.h"

#include <torch/arg.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hotloop::train {

/// The learning-rate range test's settings, Lightning's `lr_find`
/// arguments and defaults.
struct LrFinderOptions {
  /// The rates tried go from min_lr to max_lr; 0 < min_lr < max_lr.
  TORCH_ARG(double, min_lr) = 1e-8;
  TORCH_ARG(double, max_lr) = 1;
  /// Optimizer steps, one rate each; >= 2.
  TORCH_ARG(int64_t, num_training) = 100;
  /// "exponential" (rates evenly spaced on a log scale) or "linear".
  TORCH_ARG(std::string, mode) = "exponential";
  /// Stop once the smoothed loss exceeds this many times the best one so
  /// far (the loss diverges); 0: never. A non-finite loss always stops.
  TORCH_ARG(double, early_stop_threshold) = 4.0;
};

/// The outcome of a learning-rate range test: the rate of every step and
/// the smoothed loss after it, and the suggested rate (Lightning's
/// `_LRFinder`).
class LrFinder {
 public:
  /// Throws ConfigError naming the option that is out of range.
  explicit LrFinder(LrFinderOptions options);

  /// The rate of the range test's step `step` (from 0), as Lightning's
  /// `_ExponentialLR`/`_LinearLR` set it: min_lr at step 0, then
  /// min_lr * (max_lr / min_lr)^((step + 1) / num_training), or
  /// min_lr + (step + 1) / num_training * (max_lr - min_lr).
  double lr_at(int64_t step) const;

  /// Records step `lrs().size()`'s rate and loss. The loss is smoothed as
  /// Lightning's `_LRCallback` does (an exponential moving average with
  /// beta 0.98, bias-corrected by 1 - beta^(steps + 1)). Returns true when
  /// the test should stop: the smoothed loss passed early_stop_threshold
  /// times the best one (after the first two steps), or the loss is not
  /// finite.
  bool record(double lr, double loss);

  /// The suggested rate: where the smoothed loss falls fastest against
  /// the rate (the minimum of torch.gradient(losses, spacing=[lrs]) over
  /// the finite points, the first `skip_begin` and last `skip_end` left
  /// out); nullopt with fewer than two such points.
  std::optional<double> suggestion(
      int64_t skip_begin = 10, int64_t skip_end = 1) const;
  /// The index of suggestion() in lrs() and losses().
  std::optional<int64_t> suggestion_index(
      int64_t skip_begin = 10, int64_t skip_end = 1) const;

  const LrFinderOptions& options() const {
    return options_;
  }
  const std::vector<double>& lrs() const {
    return lrs_;
  }
  /// Smoothed losses, one per rate.
  const std::vector<double>& losses() const {
    return losses_;
  }
  /// Whether the test ended before num_training steps (divergence).
  bool stopped_early() const {
    return static_cast<int64_t>(lrs_.size()) < options_.num_training();
  }

  /// Writes `step,lr,loss` rows, and `suggested` on the suggestion's row,
  /// atomically to `path`.
  void write_csv(const std::string& path) const;

 private:
  LrFinderOptions options_;
  std::vector<double> lrs_;
  std::vector<double> losses_;
  double average_ = 0;
  double best_ = 0;
};

/// Lightning's `Tuner.lr_find`: trains `module` on `train` for up to
/// num_training optimizer steps at rates rising from min_lr to max_lr
/// (every parameter group of every optimizer of configure_optimizers, its
/// own schedules overruled), with the settings of `trainer` (device,
/// precision, accumulation, clipping) but no validation, checkpoints,
/// loggers or run folder; then puts back the module's parameters, buffers
/// and the random generators' states, so that what follows runs as if the
/// test never happened. Lightning's loss is the last micro-batch's divided
/// by accumulate_grad_batches; here it is the last micro-batch's as
/// training_step returned it (the same with no accumulation). Progress
/// lines go to `out`.
LrFinder lr_find(
    Module& module,
    data::DataLoader& train,
    TrainerOptions trainer,
    LrFinderOptions options = {},
    std::ostream* out = nullptr);

} // namespace hotloop::train
