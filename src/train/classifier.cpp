#include "hotloop/train/classifier.h"

#include "hotloop/core/compat.h"
#include "hotloop/core/error.h"

#include <ATen/ATen.h>

#include <cmath>

namespace hotloop::train {

ImageClassifier::ImageClassifier(
    torch::nn::AnyModule network,
    optim::OptimizerOptions optimizer,
    optim::SchedulerOptions scheduler,
    ClassifierOptions options)
    : NetworkModule(
          std::move(network), std::move(optimizer), std::move(scheduler)),
      options_(std::move(options)) {
  options_.mixing.check();
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.top_k >= 1,
      "model.top_k must be >= 1, got ",
      options_.top_k);
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.label_smoothing >= 0 && options_.label_smoothing <= 1,
      "model.label_smoothing must be in [0, 1], got ",
      options_.label_smoothing);
  const std::vector<double>& weights = options_.class_weights;
  for (size_t c = 0; c < weights.size(); ++c) {
    HOTLOOP_CHECK_AS(
        ConfigError,
        std::isfinite(weights[c]) && weights[c] >= 0,
        "model.class_weights[",
        c,
        "] is ",
        weights[c],
        ", expected a finite weight >= 0");
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      weights.empty() ||
          std::any_of(
              weights.begin(), weights.end(), [](double w) { return w > 0; }),
      "model.class_weights are all 0: no sample would count");
}

ImageClassifier::ImageClassifier(
    torch::nn::AnyModule network,
    optim::OptimizerOptions optimizer,
    optim::SchedulerOptions scheduler,
    int64_t top_k,
    double label_smoothing,
    BatchMixingOptions mixing)
    : ImageClassifier(
          std::move(network),
          std::move(optimizer),
          std::move(scheduler),
          ClassifierOptions{top_k, label_smoothing, {}, mixing}) {}

std::string ImageClassifier::cuda_graph_obstacle() const {
  return options_.mixing.cuda_graph_obstacle();
}

at::Tensor ImageClassifier::class_weights_for(const at::Tensor& logits) {
  const std::vector<double>& weights = options_.class_weights;
  if (weights.empty()) {
    return {};
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      logits.dim() == 2 &&
          logits.size(1) == static_cast<int64_t>(weights.size()),
      "model.class_weights has ",
      weights.size(),
      " weights but the network gives logits ",
      logits.sizes(),
      ": give one weight per class");
  // Autocast computes the loss in float32 whatever the logits' dtype;
  // otherwise the weights take the logits' dtype, as the loss requires.
  const at::ScalarType dtype =
      (logits.is_cpu() || logits.is_cuda()) &&
              compat::autocast_enabled(logits.device().type()) &&
              logits.scalar_type() != at::kDouble
          ? at::kFloat
          : logits.scalar_type();
  if (!class_weights_.defined() || class_weights_.device() != logits.device() ||
      class_weights_.scalar_type() != dtype) {
    class_weights_ =
        at::tensor(weights, at::kDouble).to(logits.device(), dtype);
  }
  return class_weights_;
}

at::Tensor ImageClassifier::training_step(
    const data::Batch& batch, int64_t batch_idx, MetricCollection& metrics) {
  const auto cross_entropy = [&](const at::Tensor& logits,
                                 const at::Tensor& target) {
    return at::cross_entropy_loss(
        logits,
        target,
        class_weights_for(logits),
        at::Reduction::Mean,
        /*ignore_index=*/-100,
        options_.label_smoothing);
  };
  at::Tensor loss;
  if (options_.mixing.enabled()) {
    const MixedBatch mixed = mix_batch(batch, options_.mixing);
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
  const int64_t k = options_.top_k;
  if (k > 1 && k < logits.size(1)) {
    metrics.log(
        prefix + "_acc_top" + std::to_string(k),
        correct_count(logits, batch.target, k).to(at::kDouble) / n,
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
