#pragma once

#include "hotloop/optim/optimizer_factory.h"
#include "hotloop/train/module.h"

#include <torch/nn/modules/container/any.h>

namespace hotloop::train {

/// A Module for next-token prediction: any network mapping token ids
/// [B, T] int64 to logits [B, T, vocab] (such as models::Gpt), trained with
/// cross-entropy over every position. Logs train_loss; val_loss and val_acc
/// (next-token accuracy) in validation, test_loss/test_acc in test.
/// predict_step returns the most likely next token at every position
/// [B, T] int64.
class LanguageModel : public Module {
 public:
  LanguageModel(
      torch::nn::AnyModule network,
      optim::OptimizerOptions optimizer,
      optim::SchedulerOptions scheduler);

  /// tokens: [B, T] int64 -> logits [B, T, vocab].
  at::Tensor forward(const at::Tensor& tokens);

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
  /// The network's forward FLOPs per sequence, for the step profile.
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
  double flops_per_sample_ = 0;
};

} // namespace hotloop::train
