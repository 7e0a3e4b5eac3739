#include "hotloop/train/regressor.h"

#include "hotloop/core/error.h"

#include <ATen/ATen.h>

#include <cmath>

namespace hotloop::train {

Regressor::Regressor(
    torch::nn::AnyModule network,
    optim::OptimizerOptions optimizer,
    optim::SchedulerOptions scheduler)
    : NetworkModule(
          std::move(network), std::move(optimizer), std::move(scheduler)) {}

void Regressor::set_target_scale(double mean, double std) {
  HOTLOOP_CHECK(
      std::isfinite(mean) && std::isfinite(std) && std > 0,
      "Regressor: the target's scale must be finite with std > 0, got mean ",
      mean,
      ", std ",
      std);
  target_mean_ = mean;
  target_std_ = std;
}

at::Tensor Regressor::standardized(const data::Batch& batch) {
  return forward(batch.input).reshape({batch.size()});
}

at::Tensor Regressor::predict(const data::Batch& batch) {
  const at::Tensor out = standardized(batch);
  if (target_mean_ == 0 && target_std_ == 1) {
    return out;
  }
  return out * target_std_ + target_mean_;
}

at::Tensor Regressor::training_step(
    const data::Batch& batch, int64_t batch_idx, MetricCollection& metrics) {
  const at::Tensor target =
      (batch.target.to(at::kFloat).view({-1}) - target_mean_) / target_std_;
  at::Tensor loss = at::mse_loss(standardized(batch), target);
  metrics.log("train_loss", loss, static_cast<double>(batch.size()));
  return loss;
}

void Regressor::evaluate(
    const data::Batch& batch,
    const std::string& prefix,
    MetricCollection& metrics) {
  // The error in the target's units; the loss, as in training, in the
  // standardized ones.
  const at::Tensor error =
      predict(batch).to(at::kFloat) - batch.target.to(at::kFloat).view({-1});
  const auto n = static_cast<double>(batch.size());
  const at::Tensor squared = error.square().mean();
  metrics.log(prefix + "_loss", squared / (target_std_ * target_std_), n);
  metrics.log(prefix + "_rmse", squared, n);
  metrics.log(prefix + "_mae", error.abs().mean(), n);
}

at::Tensor Regressor::predict_step(
    const data::Batch& batch, int64_t batch_idx) {
  return predict(batch);
}

void Regressor::validation_step(
    const data::Batch& batch, int64_t batch_idx, MetricCollection& metrics) {
  evaluate(batch, "val", metrics);
}

void Regressor::test_step(
    const data::Batch& batch, int64_t batch_idx, MetricCollection& metrics) {
  evaluate(batch, "test", metrics);
}

} // namespace hotloop::train
