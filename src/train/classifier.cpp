#include "hotloop/train/classifier.h"

#include "hotloop/core/error.h"

#include <ATen/ATen.h>

namespace hotloop::train {

ImageClassifier::ImageClassifier(
    torch::nn::AnyModule network,
    optim::OptimizerOptions optimizer,
    optim::SchedulerOptions scheduler,
    int64_t top_k,
    double label_smoothing,
    BatchMixingOptions mixing)
    : NetworkModule(
          std::move(network), std::move(optimizer), std::move(scheduler)),
      top_k_(top_k),
      label_smoothing_(label_smoothing),
      mixing_(mixing) {
  mixing_.check();
  HOTLOOP_CHECK_AS(
      ConfigError, top_k_ >= 1, "model.top_k must be >= 1, got ", top_k_);
  HOTLOOP_CHECK_AS(
      ConfigError,
      label_smoothing >= 0 && label_smoothing <= 1,
      "model.label_smoothing must be in [0, 1], got ",
      label_smoothing);
}

std::string ImageClassifier::cuda_graph_obstacle() const {
  return mixing_.cuda_graph_obstacle();
}

at::Tensor ImageClassifier::training_step(
    const data::Batch& batch, int64_t batch_idx, MetricCollection& metrics) {
  const auto cross_entropy = [&](const at::Tensor& logits,
                                 const at::Tensor& target) {
    return at::cross_entropy_loss(
        logits,
        target,
        /*weight=*/{},
        at::Reduction::Mean,
        /*ignore_index=*/-100,
        label_smoothing_);
  };
  at::Tensor loss;
  if (mixing_.enabled()) {
    const MixedBatch mixed = mix_batch(batch, mixing_);
    const at::Tensor logits = forward(mixed.input);
    loss = cross_entropy(logits, mixed.target) * mixed.lam +
           cross_entropy(logits, mixed.rolled_target) * (1.0 - mixed.lam);
  } else {
    loss = cross_entropy(forward(batch.input), batch.target);
  }
  metrics.log("train_loss", loss, static_cast<double>(batch.size()));
  return loss;
}

void ImageClassifier::evaluate(
    const data::Batch& batch,
    const std::string& prefix,
    MetricCollection& metrics) {
  const at::Tensor logits = forward(batch.input);
  const auto n = static_cast<double>(batch.size());
  metrics.log(
      prefix + "_loss", at::cross_entropy_loss(logits, batch.target), n);
  // Counts stay on the device: no wait for it at every batch.
  metrics.log(
      prefix + "_acc",
      correct_count(logits, batch.target).to(at::kDouble) / n,
      n);
  if (top_k_ > 1 && top_k_ < logits.size(1)) {
    metrics.log(
        prefix + "_acc_top" + std::to_string(top_k_),
        correct_count(logits, batch.target, top_k_).to(at::kDouble) / n,
        n);
  }
  if (logits.size(1) <= kConfusionClasses) {
    metrics.count(
        prefix + "_confusion", confusion_counts(logits, batch.target));
  }
}

at::Tensor ImageClassifier::predict_step(
    const data::Batch& batch, int64_t batch_idx) {
  return at::softmax(forward(batch.input), /*dim=*/1);
}

void ImageClassifier::validation_step(
    const data::Batch& batch, int64_t batch_idx, MetricCollection& metrics) {
  evaluate(batch, "val", metrics);
}

void ImageClassifier::test_step(
    const data::Batch& batch, int64_t batch_idx, MetricCollection& metrics) {
  evaluate(batch, "test", metrics);
}

} // namespace hotloop::train
