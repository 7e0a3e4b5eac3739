#pragma once

#include "hotloop/compress/fake_quantize.h"
#include "hotloop/compress/quantize.h"
#include "hotloop/compress/quantized_net.h"
#include "hotloop/models/fashion_cnn.h"
#include "hotloop/models/mlp.h"

#include <ATen/core/Tensor.h>
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace hotloop::compress {

/// Quantization-aware training's settings: torch.ao's
/// get_default_qat_qconfig(engine, version).
struct QatOptions {
  /// The quantized engine the int8 model will run on: "auto"
  /// (quantized_engine.h) or a name. It sets the qconfig as torch.ao's
  /// default for it does: activations quint8 0..255 per tensor (0..127 on
  /// fbgemm and x86); weights qint8 symmetric, per channel on onednn,
  /// fbgemm and x86, per tensor on qnnpack.
  TORCH_ARG(std::string, engine) = "auto";
  /// true: torch.ao's version 1 qconfig, FusedMovingAvgObsFakeQuantize on
  /// activations and weights (one ATen op). false: version 0, FakeQuantize
  /// with a MovingAverageMinMaxObserver (per channel for the weights). Both
  /// average ranges with the constant 0.01, weights' included.
  TORCH_ARG(bool, fused) = true;
  /// Activation observers: "moving_average" (torch.ao's default) or
  /// "minmax" (MinMaxObserver; unfused only).
  TORCH_ARG(std::string, observer) = "moving_average";
};

/// A conv -> BatchNorm -> ReLU of a QAT network: torch.ao's
/// nn.intrinsic.qat.ConvBnReLU2d (its approximate forward): the conv weight
/// scaled by gamma / sqrt(running_var + eps) is fake-quantized, the conv
/// output scaled back and given the conv bias, then BatchNorm (batch
/// statistics while training and not frozen, running ones otherwise) and
/// ReLU; the output fake-quantized. Parameters: weight, bias (optional),
/// bn.*; fake quantizers weight_fake_quant, activation_post_process.
class QatConvBnReLU2dImpl : public torch::nn::Module {
 public:
  /// Copies the float layers' parameters and statistics.
  QatConvBnReLU2dImpl(
      const at::Tensor& weight,
      const at::Tensor& bias,
      const torch::nn::BatchNorm2dImpl& bn,
      const FakeQuantizeOptions& weight_quant,
      const FakeQuantizeOptions& activation_quant);

  /// input: [B, C_in, H, W] -> [B, C_out, H, W] (3x3, padding 1).
  at::Tensor forward(const at::Tensor& input);

  /// torch.ao's freeze_bn_stats (true) / update_bn_stats (false): a frozen
  /// BatchNorm uses and keeps its running statistics in training too.
  void freeze_bn(bool frozen = true);
  bool bn_frozen() const {
    return frozen_;
  }
  /// Keeps a frozen BatchNorm in evaluation mode, as torch.ao's train().
  void train(bool on = true) override;

  /// torch.ao's fuse_conv_bn_weights with the running statistics: the
  /// weight and bias an int8 conv computes with.
  std::pair<at::Tensor, at::Tensor> folded() const;

  const at::Tensor& weight() const {
    return weight_;
  }
  const torch::nn::BatchNorm2d& bn() const {
    return bn_;
  }
  FakeQuantize& weight_fake_quant() {
    return weight_fake_quant_;
  }
  FakeQuantize& activation_post_process() {
    return activation_post_process_;
  }

 private:
  at::Tensor weight_;
  at::Tensor bias_;
  torch::nn::BatchNorm2d bn_{nullptr};
  FakeQuantize weight_fake_quant_{nullptr};
  FakeQuantize activation_post_process_{nullptr};
  bool frozen_ = false;
};
TORCH_MODULE(QatConvBnReLU2d);

/// A Linear(+ReLU) of a QAT network: torch.ao's nn.qat.Linear /
/// nn.intrinsic.qat.LinearReLU, linear(x, weight_fake_quant(weight), bias),
/// then its output fake-quantized.
class QatLinearImpl : public torch::nn::Module {
 public:
  QatLinearImpl(
      const at::Tensor& weight,
      const at::Tensor& bias,
      bool relu,
      const FakeQuantizeOptions& weight_quant,
      const FakeQuantizeOptions& activation_quant);

  /// input: [B, in] -> [B, out].
  at::Tensor forward(const at::Tensor& input);

  bool relu() const {
    return relu_;
  }
  const at::Tensor& weight() const {
    return weight_;
  }
  const at::Tensor& bias() const {
    return bias_;
  }
  FakeQuantize& weight_fake_quant() {
    return weight_fake_quant_;
  }
  FakeQuantize& activation_post_process() {
    return activation_post_process_;
  }

 private:
  at::Tensor weight_;
  at::Tensor bias_;
  bool relu_;
  FakeQuantize weight_fake_quant_{nullptr};
  FakeQuantize activation_post_process_{nullptr};
};
TORCH_MODULE(QatLinear);

/// A FashionCnn or an Mlp prepared for quantization-aware training, as
/// torch.ao's fuse_modules_qat + prepare_qat make it: the input
/// fake-quantized (`quant`, the QuantStub's observer), each conv ->
/// BatchNorm -> ReLU a QatConvBnReLU2d followed by max pooling
/// (`features.<i>`), each Linear(+ReLU) a QatLinear (`head.<i>`, dropout
/// before the last one as in the float model). Trains like any network
/// (float32; CPU or CUDA); `convert_qat` makes the int8 model.
///
/// input: as the float model's; output: logits [B, num_classes].
class QatNetImpl : public torch::nn::Module {
 public:
  /// Use prepare_qat. `source`: "fashion_cnn" (dropout before the last
  /// head layer) or "mlp" (dropout after each hidden layer).
  QatNetImpl(
      std::string source,
      std::string engine,
      double dropout,
      FakeQuantize quant,
      const std::vector<QatConvBnReLU2d>& features,
      const std::vector<QatLinear>& head);

  at::Tensor forward(const at::Tensor& input);

  /// freeze_bn_stats on every conv-BN (torch.ao's
  /// `model.apply(torch.nn.intrinsic.qat.freeze_bn_stats)`).
  void freeze_bn(bool frozen = true);
  /// torch.ao's enable_observer / disable_observer on every fake quantizer.
  void enable_observers(bool enabled = true);
  /// torch.ao's enable_fake_quant / disable_fake_quant on every one.
  void enable_fake_quant(bool enabled = true);

  /// "fashion_cnn" or "mlp": the float model it came from.
  const std::string& source() const {
    return source_;
  }
  /// The engine its qconfig is for (named by convert_qat's model).
  const std::string& engine() const {
    return engine_;
  }
  FakeQuantize& quant() {
    return quant_;
  }
  torch::nn::ModuleList& features() {
    return features_;
  }
  torch::nn::ModuleList& head() {
    return head_;
  }

 private:
  std::string source_;
  std::string engine_;
  double dropout_;
  FakeQuantize quant_{nullptr};
  torch::nn::ModuleList features_;
  torch::nn::ModuleList head_;
};
TORCH_MODULE(QatNet);

/// The fake quantizers' settings for `options` (torch.ao's default QAT
/// qconfig for the engine it selects): {activation, weight}; `channels`
/// left 1. Selects the engine (quantized_engine.h); throws ConfigError for
/// an unknown observer or a fused minmax one.
std::pair<FakeQuantizeOptions, FakeQuantizeOptions> qat_qconfig(
    const QatOptions& options, std::string* engine = nullptr);

/// A FashionCnn prepared for QAT (the float model is copied, not changed;
/// its masked weights where it is pruned). Throws ConfigError for a model
/// with synchronised BatchNorm.
QatNet prepare_qat(
    models::FashionCnnImpl& model, const QatOptions& options = {});
/// An Mlp prepared for QAT; ConfigError for a GELU one (no quantized GELU
/// kernel).
QatNet prepare_qat(models::MlpImpl& model, const QatOptions& options = {});
/// Dispatches on the network's type; ConfigError naming any other
/// (`cannot train <type> quantization-aware: hotloop has quantized kernels
/// for fashion_cnn and mlp`).
QatNet prepare_qat(torch::nn::Module& network, const QatOptions& options = {});

/// torch.ao's convert of a QAT model: BatchNorm folded into each conv with
/// the running statistics, every weight's fake quantizer run once more on
/// the (folded) weight (observing it while its observer is enabled), the
/// weights quantized with their observers' scales and zero points, each
/// layer's output scale and zero point from its activation observer. The
/// same int8 model kind as quantize_static ("fashion_cnn qat", "mlp qat"),
/// on the engine of the QAT qconfig. `record`: the observers' results.
QuantizedNet convert_qat(QatNetImpl& net, CalibrationRecord* record = nullptr);

} // namespace hotloop::compress
