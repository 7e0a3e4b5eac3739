#pragma once

#include "hotloop/compress/observer.h"
#include "hotloop/compress/quantized_net.h"
#include "hotloop/models/fashion_cnn.h"
#include "hotloop/models/mlp.h"

#include <ATen/core/Tensor.h>
#include <torch/arg.h>
#include <torch/nn/module.h>

#include <string>
#include <vector>

namespace hotloop::compress {

/// Post-training static quantization's settings (torch.ao's eager mode:
/// fuse, prepare with a qconfig, calibrate, convert).
struct StaticQuantizationOptions {
  /// The quantized engine: "auto" (quantized_engine.h) or a name.
  TORCH_ARG(std::string, engine) = "auto";
  /// Activation observers: "minmax" (MinMaxObserver) or "moving_average"
  /// (MovingAverageMinMaxObserver, averaging_constant 0.01); quint8,
  /// per-tensor affine, the range reduced on FBGEMM and x86.
  TORCH_ARG(std::string, observer) = "minmax";
  /// Weight observers: PerChannelMinMaxObserver (qint8, per-channel
  /// symmetric; torch.ao's default for onednn, fbgemm and x86), or
  /// MinMaxObserver per tensor (qint8, symmetric) when false.
  TORCH_ARG(bool, per_channel_weights) = true;
};

/// The observers' results, for comparison with torch.ao's.
struct CalibrationRecord {
  /// The input's, then each conv/linear output's, in order.
  std::vector<QParams> activations;
  /// Each conv/linear weight's (after BatchNorm folding).
  std::vector<QParams> weights;
};

/// torch.ao's fuse_conv_bn_weights: the conv weight and bias with an
/// eval-mode BatchNorm folded in (bias: zeros for a conv without one).
std::pair<at::Tensor, at::Tensor> fuse_conv_bn_weights(
    const at::Tensor& conv_weight,
    const at::Tensor& conv_bias,
    const at::Tensor& running_mean,
    const at::Tensor& running_var,
    double eps,
    const at::Tensor& bn_weight,
    const at::Tensor& bn_bias);

/// Quantizes a FashionCnn as torch.ao's eager static quantization does with
/// the same observers: each conv -> BatchNorm -> ReLU fused (BatchNorm
/// folded into the conv) and run by quantized::conv2d_relu, max-pooling on
/// the quantized tensor, the head's Linear(+ReLU) by quantized::linear
/// (_relu); an observer on the input and after each fused layer sees the
/// float model run over `calibration` ([B, C, H, W] batches, eval mode);
/// weights quantized per channel. The model may be pruned (its masked
/// weights are used). Throws ConfigError for no calibration batch.
QuantizedNet quantize_static(
    models::FashionCnnImpl& model,
    const std::vector<at::Tensor>& calibration,
    const StaticQuantizationOptions& options = {},
    CalibrationRecord* record = nullptr);
/// The same for an Mlp: Linear(+ReLU) layers on quantized::linear(_relu).
/// Throws ConfigError for a GELU model (no quantized GELU kernel here:
/// quantize_dynamic keeps GELU in float).
QuantizedNet quantize_static(
    models::MlpImpl& model,
    const std::vector<at::Tensor>& calibration,
    const StaticQuantizationOptions& options = {},
    CalibrationRecord* record = nullptr);
/// Dispatches on the network's type (FashionCnn, Mlp); throws ConfigError
/// naming any other (`cannot quantize <type> statically: hotloop has
/// quantized kernels for fashion_cnn and mlp`).
QuantizedNet quantize_static(
    torch::nn::Module& network,
    const std::vector<at::Tensor>& calibration,
    const StaticQuantizationOptions& options = {},
    CalibrationRecord* record = nullptr);

/// torch.ao.quantization.quantize_dynamic of an Mlp's Linear layers: int8
/// weights (MinMaxObserver, qint8 per-tensor symmetric, torch.ao's
/// default_dynamic_qconfig), activations quantized per batch by
/// quantized::linear_dynamic; GELU stays in float. Inference is often
/// slower than float on CPUs without VNNI (measured: bench/compress).
QuantizedNet quantize_dynamic(
    models::MlpImpl& model, const std::string& engine = "auto");
/// Dispatches on the network's type; ConfigError for one without Linear
/// layers hotloop can quantize dynamically (a Gpt's are quantized in place:
/// quantized_gpt.h).
QuantizedNet quantize_dynamic(
    torch::nn::Module& network, const std::string& engine = "auto");

} // namespace hotloop::compress
