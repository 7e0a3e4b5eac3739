#include "hotloop/train/language_model.h"

#include "hotloop/train/token_loss.h"

#include <ATen/ATen.h>

namespace hotloop::train {
namespace {

// Every target below 0 as -1, the one ignored value that the plain loss
// below and TokenLossNetwork::token_loss take.
at::Tensor ignoring_negatives(const at::Tensor& targets) {
  return targets.clamp_min(-1);
}

// Mean cross-entropy of logits [B, T, V] against targets [B, T] over the
// positions whose target is not -1.
at::Tensor token_loss(const at::Tensor& logits, const at::Tensor& targets) {
  return at::cross_entropy_loss(
      logits.reshape({-1, logits.size(-1)}),
      targets.reshape({-1}),
      /*weight=*/{},
      at::Reduction::Mean,
      /*ignore_index=*/-1);
}

} // namespace

at::Tensor LanguageModel::training_step(
    const data::Batch& batch, int64_t batch_idx, MetricCollection& metrics) {
  tokens_per_sample_ = batch.input.size(1);
  const at::Tensor targets = ignoring_negatives(batch.target);
  // A network that computes its own loss need not hand back the whole
  // batch's logits (models::Gpt: model.loss_chunk_size).
  auto* own = dynamic_cast<TokenLossNetwork*>(network().get());
  at::Tensor loss = own != nullptr ? own->token_loss(batch.input, targets)
                                   : token_loss(forward(batch.input), targets);
  metrics.log("train_loss", loss, static_cast<double>(batch.size()));
  return loss;
}

void LanguageModel::evaluate(
    const data::Batch& batch,
    const std::string& prefix,
    MetricCollection& metrics) {
  const at::Tensor targets = ignoring_negatives(batch.target);
  // The means' weight: the positions counted. Read back (the one wait for
  // the device per batch), so that batches with more ignored positions
  // weigh less and a batch with none counted adds nothing.
  const auto tokens = targets.ne(-1).sum().item<double>();
  if (tokens == 0) {
    // Weight 0: nothing added, but the metrics exist on every process.
    metrics.log(prefix + "_loss", 0.0, 0.0);
    metrics.log(prefix + "_acc", 0.0, 0.0);
    return;
  }
  const at::Tensor logits = forward(batch.input);
  metrics.log(prefix + "_loss", token_loss(logits, targets), tokens);
  // An ignored position's -1 never equals a predicted token.
  metrics.log(
      prefix + "_acc",
      logits.argmax(-1).eq(targets).sum().to(at::kDouble) / tokens,
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
