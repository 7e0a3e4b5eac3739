#pragma once

#include "hotloop/train/network_module.h"

namespace hotloop::train {

/// Predicts one number per sample (a table's target column): mean squared
/// error to train on; validation and test log `<split>_loss` (the MSE),
/// `<split>_rmse` and `<split>_mae`, exact over uneven batches.
///
/// With a target scale (set_target_scale, as the CLI sets it from a
/// table's training rows) the network learns the standardized target
/// (target - mean) / std, which keeps its output and gradients near unit
/// size whatever the target's units: `train_loss` and `<split>_loss` are
/// the MSE in standardized units, while predictions, `<split>_rmse` and
/// `<split>_mae` are in the target's own units.
class Regressor : public NetworkModule {
 public:
  /// `network`: input -> [B, 1] or [B] predictions. The optimizer and
  /// schedule are built from the given options in configure_optimizers.
  Regressor(
      torch::nn::AnyModule network,
      optim::OptimizerOptions optimizer,
      optim::SchedulerOptions scheduler);

  at::Tensor training_step(
      const data::Batch& batch,
      int64_t batch_idx,
      MetricCollection& metrics) override;
  void validation_step(
      const data::Batch& batch,
      int64_t batch_idx,
      MetricCollection& metrics) override;
  void test_step(
      const data::Batch& batch,
      int64_t batch_idx,
      MetricCollection& metrics) override;
  /// The predictions [B], in the target's units.
  at::Tensor predict_step(const data::Batch& batch, int64_t batch_idx) override;

  /// The target's mean and standard deviation (> 0) over the training
  /// data; (0, 1), the default, trains on the target as it is.
  void set_target_scale(double mean, double std);
  double target_mean() const {
    return target_mean_;
  }
  double target_std() const {
    return target_std_;
  }

 private:
  double target_mean_ = 0;
  double target_std_ = 1;
  // The network's [B] outputs: the standardized target's prediction.
  at::Tensor standardized(const data::Batch& batch);
  // [B] predictions for the batch's inputs.
  at::Tensor predict(const data::Batch& batch);
  void evaluate(
      const data::Batch& batch,
      const std::string& prefix,
      MetricCollection& metrics);
};

} // namespace hotloop::train
