#pragma once

#include "hotloop/train/callback.h"

#include <chrono>
#include <optional>
#include <string>

namespace hotloop::train {

/// Stops the fit once it has run for `duration` seconds (Lightning's
/// Timer; the Trainer adds one for trainer.max_time). Time spent in earlier
/// runs of a resumed fit counts: the elapsed time is saved in checkpoints.
class Timer : public Callback {
 public:
  /// duration: seconds, > 0; interval: "step" (checked after each batch)
  /// or "epoch" (after each epoch). Throws ConfigError naming a bad value.
  explicit Timer(
      double duration, std::string interval = "step", bool verbose = true);

  void on_fit_start(Trainer& trainer, Module& module) override;
  void on_fit_end(Trainer& trainer, Module& module) override;
  void on_train_batch_end(
      Trainer& trainer,
      Module& module,
      const at::Tensor& loss,
      const data::Batch& batch,
      int64_t batch_idx) override;
  void on_train_epoch_end(Trainer& trainer, Module& module) override;
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;

  /// Seconds of fitting so far, earlier runs included.
  double time_elapsed() const;
  /// Seconds left before the Timer stops the fit (may be negative).
  double time_remaining() const {
    return duration_ - time_elapsed();
  }

 private:
  void check(Trainer& trainer);

  double duration_;
  std::string interval_;
  bool verbose_;
  double offset_ = 0;
  std::optional<std::chrono::steady_clock::time_point> start_;
  std::optional<std::chrono::steady_clock::time_point> end_;
};

} // namespace hotloop::train
