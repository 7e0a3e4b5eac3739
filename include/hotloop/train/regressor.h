#pragma once

#include "hotloop/train/network_module.h"

namespace hotloop::train {

/// Predicts one number per sample (a table's target column): mean squared
/// error to train on; validation and test log `<split>_loss` (the MSE),
/// `<split>_rmse` and `<split>_mae`, exact over uneven batches.
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
  /// The predictions [B].
  at::Tensor predict_step(const data::Batch& batch, int64_t batch_idx) override;

 private:
  // [B] predictions for the batch's inputs.
  at::Tensor predict(const data::Batch& batch);
  void evaluate(
      const data::Batch& batch,
      const std::string& prefix,
      MetricCollection& metrics);
};

} // namespace hotloop::train
