#include "hotloop/train/regressor.h"

#include <ATen/ATen.h>

namespace hotloop::train {

Regressor::Regressor(
    torch::nn::AnyModule network,
    optim::OptimizerOptions optimizer,
    optim::SchedulerOptions scheduler)
    : NetworkModule(
          std::move(network), std::move(optimizer), std::move(scheduler)) {}

at::Tensor Regressor::predict(const data::Batch& batch) {
  return forward(batch.input).reshape({batch.size()});
}

at::Tensor Regressor::training_step(
    const data::Batch& batch, int64_t batch_idx, MetricCollection& metrics) {
  at::Tensor loss =
      at::mse_loss(predict(batch), batch.target.to(at::kFloat).view({-1}));
  metrics.log("train_loss", loss, static_cast<double>(batch.size()));
  return loss;
}

void Regressor::evaluate(
    const data::Batch& batch,
    const std::string& prefix,
    MetricCollection& metrics) {
  const at::Tensor error =
      predict(batch).to(at::kFloat) - batch.target.to(at::kFloat).view({-1});
  const auto n = static_cast<double>(batch.size());
  const at::Tensor squared = error.square().mean();
  metrics.log(prefix + "_loss", squared, n);
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
