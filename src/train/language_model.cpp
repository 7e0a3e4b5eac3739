#include "hotloop/train/language_model.h"

#include "hotloop/train/token_loss.h"

#include <ATen/ATen.h>

namespace hotloop::train {
namespace {

// Mean cross-entropy over every position of logits [B, T, V], targets [B, T].
at::Tensor token_loss(const at::Tensor& logits, const at::Tensor& targets) {
  return at::cross_entropy_loss(
      logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

} // namespace

at::Tensor LanguageModel::training_step(
    const data::Batch& batch, int64_t batch_idx, MetricCollection& metrics) {
  tokens_per_sample_ = batch.input.size(1);
  // A network that computes its own loss need not hand back the whole
  // batch's logits (models::Gpt: model.loss_chunk_size).
  auto* own = dynamic_cast<TokenLossNetwork*>(network().get());
  at::Tensor loss = own != nullptr
                        ? own->token_loss(batch.input, batch.target)
                        : token_loss(forward(batch.input), batch.target);
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
      logits.argmax(-1).eq(batch.target).sum().to(at::kDouble) / tokens,
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

} // namespace hotloop::train
