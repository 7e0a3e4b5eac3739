#pragma once

#include "hotloop/train/batch_mixing.h"
#include "hotloop/train/network_module.h"

#include <cstdint>
#include <vector>

namespace hotloop::train {

/// How an ImageClassifier makes its training loss and its metrics.
struct ClassifierOptions {
  /// The k of the extra top-k accuracy (1: none); >= 1.
  int64_t top_k = 1;
  /// In [0, 1]: the training loss's targets mix the true class with the
  /// uniform distribution, as `torch.nn.CrossEntropyLoss(label_smoothing)`.
  double label_smoothing = 0.0;
  /// One weight per class (each finite and >= 0, not all 0), or none: the
  /// training loss weighs each sample's term by its class's weight and
  /// divides by the batch's sum of those weights, as
  /// `torch.nn.CrossEntropyLoss(weight)`; for classes seen unequally often,
  /// say each class's inverse frequency. In the loss's dtype (bfloat16
  /// under bf16-true, so rounded to its 8 bits). With MixUp/CutMix the loss
  /// is the mix of the two labels' weighted losses, each divided by its
  /// own sum of weights (torchvision's soft-target loss divides by the
  /// batch size instead).
  std::vector<double> class_weights = {};
  /// MixUp/CutMix of each training batch (mix_batch), the loss the same mix
  /// of the two labels' losses; randomness from the default CPU generator,
  /// a host read per batch, so not under trainer.cuda_graphs (a captured
  /// step would replay one mix).
  BatchMixingOptions mixing = {};
};

/// A Module for classification: any network mapping input to logits,
/// trained with cross-entropy. Logs train_loss; val_loss/val_acc in
/// validation (plus val_acc_top<k> for top_k > 1 when there are more than k
/// classes); test_loss/test_acc (/test_acc_top<k>) in test; and, for up to
/// kConfusionClasses classes, counts val_confusion / test_confusion (the
/// [C, C] confusion_counts of the pass: Trainer::callback_counts), so that
/// a confusion matrix costs no pass of its own. predict_step returns class
/// probabilities [B, num_classes].
class ImageClassifier : public NetworkModule {
 public:
  /// The most classes whose confusion an evaluation counts: ImageNet's
  /// thousand, an 8 MB matrix made and added at every batch (it grows with
  /// the square of the classes).
  static constexpr int64_t kConfusionClasses = 1000;

  /// `network`: input -> logits [B, num_classes]. The optimizer and schedule
  /// are built from the given options in configure_optimizers. `options`
  /// shape the training loss (label smoothing, class weights, MixUp or
  /// CutMix); val_loss and test_loss stay the plain cross-entropy,
  /// comparable between runs. Throws ConfigError naming a bad option; a
  /// network whose classes are not as many as the class weights is named
  /// at its first training step.
  ImageClassifier(
      torch::nn::AnyModule network,
      optim::OptimizerOptions optimizer,
      optim::SchedulerOptions scheduler,
      ClassifierOptions options);
  /// The same with the options given one by one.
  ImageClassifier(
      torch::nn::AnyModule network,
      optim::OptimizerOptions optimizer,
      optim::SchedulerOptions scheduler,
      int64_t top_k = 1,
      double label_smoothing = 0.0,
      BatchMixingOptions mixing = {});

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
  /// With MixUp or CutMix: each batch's draws are made on the host.
  std::string cuda_graph_obstacle() const override;

 private:
  void evaluate(
      const data::Batch& batch,
      const std::string& prefix,
      MetricCollection& metrics);

  // The class weights on the logits' device, in the loss's dtype;
  // undefined without class weights.
  at::Tensor class_weights_for(const at::Tensor& logits);

  ClassifierOptions options_;
  at::Tensor class_weights_; // cached by class_weights_for
};

} // namespace hotloop::train
