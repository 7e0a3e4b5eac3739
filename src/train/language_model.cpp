#include "hotloop/train/language_model.h"

#include "hotloop/train/optimizer_setup.h"

#include <ATen/ATen.h>

namespace hotloop::train {
namespace {

// Mean cross-entropy over every position of logits [B, T, V], targets [B, T].
at::Tensor token_loss(const at::Tensor& logits, const at::Tensor& targets) {
  return at::cross_entropy_loss(
      logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

} // namespace

LanguageModel::LanguageModel(
    torch::nn::AnyModule network,
    optim::OptimizerOptions optimizer,
    optim::SchedulerOptions scheduler)
    : network_(std::move(network)),
      optimizer_options_(std::move(optimizer)),
      scheduler_options_(std::move(scheduler)) {
  register_module("network", network_.ptr());
}

at::Tensor LanguageModel::forward(const at::Tensor& tokens) {
  return network_.forward(tokens);
}

at::Tensor LanguageModel::training_step(
    const data::Batch& batch, int64_t batch_idx, MetricCollection& metrics) {
  at::Tensor loss = token_loss(forward(batch.input), batch.target);
  metrics.log("train_loss", loss, static_cast<double>(batch.size()));
  return loss;
}

void LanguageModel::evaluate(
    const data::Batch& batch,
    const std::string& prefix,
    MetricCollection& metrics) {
  const at::Tensor logits = forward(batch.input);
  const auto tokens = static_cast<double>(batch.target.numel());
  metrics.log(prefix + "_loss", token_loss(logits, batch.target), tokens);
  metrics.log(
      prefix + "_acc",
      logits.argmax(-1).eq(batch.target).sum().item<double>() / tokens,
      tokens);
}

void LanguageModel::validation_step(
    const data::Batch& batch, int64_t batch_idx, MetricCollection& metrics) {
  evaluate(batch, "val", metrics);
}

void LanguageModel::test_step(
    const data::Batch& batch, int64_t batch_idx, MetricCollection& metrics) {
  evaluate(batch, "test", metrics);
}

at::Tensor LanguageModel::predict_step(
    const data::Batch& batch, int64_t batch_idx) {
  return forward(batch.input).argmax(-1);
}

OptimizerSetup LanguageModel::configure_optimizers(const FitPlan& plan) {
  return make_optimizer_setup(
      *this, optimizer_options_, scheduler_options_, plan);
}

} // namespace hotloop::train
