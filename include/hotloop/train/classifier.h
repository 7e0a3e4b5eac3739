#pragma once

#include "hotloop/optim/optimizer_factory.h"
#include "hotloop/train/module.h"

#include <torch/nn/modules/container/any.h>

namespace hotloop::train {

/// A Module for classification: any network mapping input to logits,
/// trained with cross-entropy. Logs train_loss; val_loss/val_acc in
/// validation (plus val_acc_top<k> for top_k > 1 when there are more than k
/// classes); test_loss/test_acc (/test_acc_top<k>) in test. predict_step
/// returns class probabilities [B, num_classes].
class ImageClassifier : public Module {
 public:
  /// `network`: input -> logits [B, num_classes]. The optimizer and schedule
  /// are built from the given options in configure_optimizers. `top_k`:
  /// the k of the extra top-k accuracy (1: none); throws ConfigError < 1.
  ImageClassifier(
      torch::nn::AnyModule network,
      optim::OptimizerOptions optimizer,
      optim::SchedulerOptions scheduler,
      int64_t top_k = 1);

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
  at::Tensor predict_step(const data::Batch& batch, int64_t batch_idx) override;
  OptimizerSetup configure_optimizers(const FitPlan& plan) override;
  double flops_per_sample() const override {
    return flops_per_sample_;
  }
  /// The network's forward FLOPs per sample, for the step profile.
  void set_flops_per_sample(double flops) {
    flops_per_sample_ = flops;
  }

 private:
  void evaluate(
      const data::Batch& batch,
      const std::string& prefix,
      MetricCollection& metrics);

  torch::nn::AnyModule network_;
  optim::OptimizerOptions optimizer_options_;
  optim::SchedulerOptions scheduler_options_;
  int64_t top_k_;
  double flops_per_sample_ = 0;
};

} // namespace hotloop::train
