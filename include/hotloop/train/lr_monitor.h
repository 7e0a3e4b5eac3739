#pragma once

#include "hotloop/train/callback.h"

#include <map>
#include <string>

namespace hotloop::train {

/// Logs every parameter group's learning rate (Lightning's
/// LearningRateMonitor): `lr-<Optimizer>` for one group,
/// `lr-<Optimizer>/pg<i>` (from 1) for several; with log_momentum also
/// `lr-<Optimizer>-momentum` (SGD's momentum, Adam's beta1).
class LearningRateMonitor : public Callback {
 public:
  /// logging_interval: "step" (the rate each log_every_n_steps-th optimizer
  /// step uses, in that step's record), "epoch" (at each epoch start), or ""
  /// (the schedule's own interval). Throws ConfigError on another value.
  explicit LearningRateMonitor(
      std::string logging_interval = "", bool log_momentum = false);

  void on_train_epoch_start(Trainer& trainer, Module& module) override;
  void on_before_optimizer_step(
      Trainer& trainer,
      Module& module,
      torch::optim::Optimizer& optimizer) override;

  /// The values it would log now for the Trainer's optimizer.
  std::map<std::string, double> learning_rates(Trainer& trainer) const;

 private:
  bool by_step(Trainer& trainer) const;

  std::string logging_interval_;
  bool log_momentum_;
};

} // namespace hotloop::train
