#pragma once

#include "hotloop/optim/optimizer_factory.h"
#include "hotloop/train/module.h"

#include <torch/nn/modules/container/any.h>

namespace hotloop::train {

/// A Module around one network, trained with the config's optimizer and
/// schedule: what ImageClassifier and LanguageModel share. Subclasses write
/// the steps.
class NetworkModule : public Module {
 public:
  /// The optimizer and schedule are built from the given options in
  /// configure_optimizers, sized for the fit's plan.
  NetworkModule(
      torch::nn::AnyModule network,
      optim::OptimizerOptions optimizer,
      optim::SchedulerOptions scheduler);

  /// The network's forward.
  at::Tensor forward(const at::Tensor& input);
  /// The network itself.
  std::shared_ptr<torch::nn::Module> network() const {
    return network_.ptr();
  }

  OptimizerSetup configure_optimizers(const FitPlan& plan) override;

  double flops_per_sample() const override {
    return flops_per_sample_;
  }
  /// The network's forward FLOPs per sample, for the step profile.
  void set_flops_per_sample(double flops) {
    flops_per_sample_ = flops;
  }

  /// The learning rate the next configure_optimizers builds with (what
  /// Lightning's tuners update as the module's `lr`).
  double learning_rate() const {
    return optimizer_options_.lr;
  }
  void set_learning_rate(double lr) {
    optimizer_options_.lr = lr;
  }

 private:
  torch::nn::AnyModule network_;
  optim::OptimizerOptions optimizer_options_;
  optim::SchedulerOptions scheduler_options_;
  double flops_per_sample_ = 0;
};

} // namespace hotloop::train
