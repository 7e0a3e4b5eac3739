#pragma once

#include "hotloop/train/network_module.h"

namespace hotloop::train {

/// A Module for next-token prediction: any network mapping token ids
/// [B, T] int64 to logits [B, T, vocab] (such as models::Gpt), trained with
/// cross-entropy over every position (through the network's own
/// TokenLossNetwork::token_loss where it has one). Logs train_loss; val_loss
/// and val_acc (next-token accuracy) in validation, test_loss/test_acc in test.
/// predict_step returns the most likely next token at every position
/// [B, T] int64.
///
/// A target below 0 is ignored: -100 (PyTorch's ignore_index, Hugging
/// Face's labels) or -1 (nanoGPT's), such as a prompt's positions when
/// fine-tuning on its answers, or padding. The loss and accuracy are means
/// over the other positions; an evaluation's means weigh each batch by
/// them (read back once per batch), a batch with none adding nothing. A
/// training batch with none has a NaN loss, as in PyTorch
/// (trainer.on_nonfinite_loss says what follows).
class LanguageModel : public NetworkModule {
 public:
  /// `network`: tokens [B, T] int64 -> logits [B, T, vocab].
  using NetworkModule::NetworkModule;

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
  /// The sequence length of the last training batch.
  int64_t tokens_per_sample() const override {
    return tokens_per_sample_;
  }

 private:
  void evaluate(
      const data::Batch& batch,
      const std::string& prefix,
      MetricCollection& metrics);

  int64_t tokens_per_sample_ = 0;
};

} // namespace hotloop::train
