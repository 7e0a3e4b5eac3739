#pragma once

#include "hotloop/optim/optimizer_factory.h"
#include "hotloop/train/module.h"

#include <torch/nn/modules/container/any.h>

namespace hotloop::train {

/// A Module for classification: any network mapping input to logits,
/// trained with cross-entropy. Logs train_loss; val_loss/val_acc in
/// validation; test_loss/test_acc in test.
class ImageClassifier : public Module {
 public:
  /// `network`: input -> logits [B, num_classes]. The optimizer and schedule
  /// are built from the given options in configure_optimizers.
  ImageClassifier(
      torch::nn::AnyModule network,
      optim::OptimizerOptions optimizer,
      optim::SchedulerOptions scheduler);

  at::Tensor forward(const at::Tensor& input);

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
  OptimizerSetup configure_optimizers(const FitPlan& plan) override;

 private:
  void evaluate(
      const data::Batch& batch,
      const std::string& prefix,
      MetricCollection& metrics);

  torch::nn::AnyModule network_;
  optim::OptimizerOptions optimizer_options_;
  optim::SchedulerOptions scheduler_options_;
};

} // namespace hotloop::train
