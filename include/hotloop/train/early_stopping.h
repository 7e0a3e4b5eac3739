#pragma once

#include "hotloop/train/callback.h"

#include <torch/arg.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

namespace hotloop::train {

/// EarlyStopping settings, named as Lightning's.
struct EarlyStoppingOptions {
  explicit EarlyStoppingOptions(std::string monitor)
      : monitor_(std::move(monitor)) {}
  /// The metric to watch (a key of callback_metrics).
  TORCH_ARG(std::string, monitor);
  /// A change smaller than this is no improvement; >= 0.
  TORCH_ARG(double, min_delta) = 0;
  /// Checks without improvement before stopping; >= 1.
  TORCH_ARG(int64_t, patience) = 3;
  /// "min" or "max": which values of `monitor` are better.
  TORCH_ARG(std::string, mode) = "min";
  /// Throw when `monitor` was not logged; false: skip the check.
  TORCH_ARG(bool, strict) = true;
  /// Stop when the metric becomes NaN or infinite.
  TORCH_ARG(bool, check_finite) = true;
  /// Stop as soon as the metric is this good.
  TORCH_ARG(std::optional<double>, stopping_threshold);
  /// Stop as soon as the metric is this bad.
  TORCH_ARG(std::optional<double>, divergence_threshold);
  /// Print why training stops.
  TORCH_ARG(bool, verbose) = true;
};

/// Stops the fit when a monitored metric stops improving (Lightning's
/// EarlyStopping), checked after every validation (or at each epoch end
/// when the fit does not validate). The Trainer honours the stop after
/// min_epochs. Its counters are saved in checkpoints.
class EarlyStopping : public Callback {
 public:
  /// Throws ConfigError naming the option that is invalid.
  explicit EarlyStopping(EarlyStoppingOptions options);

  std::string state_key() const override;
  std::string required_metric() const override;
  void on_validation_end(Trainer& trainer, Module& module) override;
  void on_train_epoch_end(Trainer& trainer, Module& module) override;
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;

  const EarlyStoppingOptions& options() const {
    return options_;
  }
  /// Checks in a row without improvement.
  int64_t wait_count() const {
    return wait_count_;
  }
  /// The best value seen (+-inf before the first check).
  double best_score() const {
    return best_score_;
  }
  /// The epoch (from 0) in which it asked to stop; 0 when it has not.
  int64_t stopped_epoch() const {
    return stopped_epoch_;
  }
  /// Why it asked to stop; empty when it has not.
  const std::string& reason() const {
    return reason_;
  }

 private:
  void check(Trainer& trainer);
  bool better(double current, double reference) const;

  EarlyStoppingOptions options_;
  int64_t wait_count_ = 0;
  double best_score_;
  int64_t stopped_epoch_ = 0;
  std::string reason_;
};

} // namespace hotloop::train
