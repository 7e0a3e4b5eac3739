#include "hotloop/compress/qat.h"

#include "detail/quantized_weights.h"
#include "hotloop/compress/quantized_engine.h"
#include "hotloop/core/error.h"
#include "hotloop/models/max_pool2x2.h"

#include <ATen/ATen.h>
#include <torch/nn/modules/batchnorm.h>

namespace hotloop::compress {
namespace {

using Kind = QuantizedStage::Kind;

FakeQuantizeOptions with_channels(FakeQuantizeOptions options, int64_t n) {
  options.channels = n;
  return options;
}

at::Tensor parameter_copy(const at::Tensor& t) {
  return t.defined() ? t.detach().clone() : at::Tensor();
}

QuantizedStage simple(Kind kind) {
  QuantizedStage stage;
  stage.kind = kind;
  return stage;
}

QuantizedStage output_of(
    QuantizedStage stage, FakeQuantizeImpl& activation, QParams* recorded) {
  QParams q = activation.calculate_qparams();
  q.scale = q.scale.cpu();
  q.zero_point = q.zero_point.cpu();
  stage.scale = q.scale.item<double>();
  stage.zero_point = q.zero_point.item<int64_t>();
  *recorded = q;
  return stage;
}

// torch.ao's get_qconv / Linear.from_float: the weight fake quantizer runs
// once more on the weight the int8 layer gets, then its observer's qparams
// quantize it.
at::Tensor converted_weight(
    FakeQuantizeImpl& weight_quant, const at::Tensor& weight, QParams* q) {
  weight_quant.forward(weight);
  *q = weight_quant.calculate_qparams();
  q->scale = q->scale.cpu();
  q->zero_point = q->zero_point.cpu();
  return detail::quantize_weight(weight.cpu(), *q);
}

} // namespace

// ---- QatConvBnReLU2d ----

QatConvBnReLU2dImpl::QatConvBnReLU2dImpl(
    const at::Tensor& weight,
    const at::Tensor& bias,
    const torch::nn::BatchNorm2dImpl& bn,
    const FakeQuantizeOptions& weight_quant,
    const FakeQuantizeOptions& activation_quant) {
  weight_ = register_parameter("weight", parameter_copy(weight));
  if (bias.defined()) {
    bias_ = register_parameter("bias", parameter_copy(bias));
  }
  bn_ = register_module(
      "bn",
      torch::nn::BatchNorm2d(
          std::dynamic_pointer_cast<torch::nn::BatchNorm2dImpl>(bn.clone())));
  weight_fake_quant_ = register_module(
      "weight_fake_quant",
      FakeQuantize(with_channels(weight_quant, weight.size(0))));
  activation_post_process_ = register_module(
      "activation_post_process", FakeQuantize(activation_quant));
}

at::Tensor QatConvBnReLU2dImpl::forward(const at::Tensor& input) {
  // torch.ao's _forward_approximate.
  const auto& bn = *bn_;
  const at::Tensor running_std = at::sqrt(bn.running_var + bn.options.eps());
  const at::Tensor scale_factor = bn.weight / running_std;
  const at::Tensor scaled_weight = weight_fake_quant_->forward(
      weight_ * scale_factor.reshape({-1, 1, 1, 1}));
  const at::Tensor zero_bias = at::zeros(
      {weight_.size(0)},
      at::TensorOptions().device(scaled_weight.device()).dtype(input.dtype()));
  at::Tensor conv = at::conv2d(input, scaled_weight, zero_bias, 1, 1);
  at::Tensor conv_orig = conv / scale_factor.reshape({1, -1, 1, 1});
  if (bias_.defined()) {
    conv_orig = conv_orig + bias_.reshape({1, -1, 1, 1});
  }
  return activation_post_process_->forward(at::relu(bn_->forward(conv_orig)));
}

void QatConvBnReLU2dImpl::freeze_bn(bool frozen) {
  frozen_ = frozen;
  bn_->train(!frozen && is_training());
}

void QatConvBnReLU2dImpl::train(bool on) {
  torch::nn::Module::train(on);
  if (frozen_) {
    bn_->eval();
  }
}

std::pair<at::Tensor, at::Tensor> QatConvBnReLU2dImpl::folded() const {
  const auto& bn = *bn_;
  return fuse_conv_bn_weights(
      weight_.detach(),
      bias_.defined() ? bias_.detach() : at::Tensor(),
      bn.running_mean,
      bn.running_var,
      bn.options.eps(),
      bn.weight.detach(),
      bn.bias.detach());
}

// ---- QatLinear ----

QatLinearImpl::QatLinearImpl(
    const at::Tensor& weight,
    const at::Tensor& bias,
    bool relu,
    const FakeQuantizeOptions& weight_quant,
    const FakeQuantizeOptions& activation_quant)
    : relu_(relu) {
  weight_ = register_parameter("weight", parameter_copy(weight));
  if (bias.defined()) {
    bias_ = register_parameter("bias", parameter_copy(bias));
  }
  weight_fake_quant_ = register_module(
      "weight_fake_quant",
      FakeQuantize(with_channels(weight_quant, weight.size(0))));
  activation_post_process_ = register_module(
      "activation_post_process", FakeQuantize(activation_quant));
}

at::Tensor QatLinearImpl::forward(const at::Tensor& input) {
  at::Tensor x = at::linear(input, weight_fake_quant_->forward(weight_), bias_);
  if (relu_) {
    x = at::relu(x);
  }
  return activation_post_process_->forward(x);
}

// ---- QatNet ----

QatNetImpl::QatNetImpl(
    std::string source,
    std::string engine,
    double dropout,
    FakeQuantize quant,
    const std::vector<QatConvBnReLU2d>& features,
    const std::vector<QatLinear>& head)
    : source_(std::move(source)),
      engine_(std::move(engine)),
      dropout_(dropout) {
  HOTLOOP_CHECK(!head.empty(), "a QAT network needs at least one Linear");
  quant_ = register_module("quant", std::move(quant));
  features_ = register_module("features", torch::nn::ModuleList());
  for (const auto& layer : features) {
    features_->push_back(layer);
  }
  head_ = register_module("head", torch::nn::ModuleList());
  for (const auto& layer : head) {
    head_->push_back(layer);
  }
}

at::Tensor QatNetImpl::forward(const at::Tensor& input) {
  at::Tensor x = quant_->forward(input);
  for (const auto& layer : *features_) {
    // FashionCnn's own pooling kernel: equal to at::max_pool2d, faster on
    // the CPU.
    x = models::max_pool2x2(layer->as<QatConvBnReLU2dImpl>()->forward(x));
  }
  x = x.flatten(/*start_dim=*/1);
  const size_t last = head_->size() - 1;
  for (size_t i = 0; i <= last; ++i) {
    const bool before_last = source_ == "fashion_cnn" && i == last;
    if (dropout_ > 0 && before_last) {
      x = at::dropout(x, dropout_, is_training());
    }
    x = head_[i]->as<QatLinearImpl>()->forward(x);
    if (dropout_ > 0 && source_ == "mlp" && i < last) {
      x = at::dropout(x, dropout_, is_training());
    }
  }
  return x;
}

void QatNetImpl::freeze_bn(bool frozen) {
  for (const auto& layer : *features_) {
    layer->as<QatConvBnReLU2dImpl>()->freeze_bn(frozen);
  }
}

void QatNetImpl::enable_observers(bool enabled) {
  for (const auto& module : modules()) {
    if (auto* fq = module->as<FakeQuantizeImpl>()) {
      fq->enable_observer(enabled);
    }
  }
}

void QatNetImpl::enable_fake_quant(bool enabled) {
  for (const auto& module : modules()) {
    if (auto* fq = module->as<FakeQuantizeImpl>()) {
      fq->enable_fake_quant(enabled);
    }
  }
}

// ---- prepare and convert ----

std::pair<FakeQuantizeOptions, FakeQuantizeOptions> qat_qconfig(
    const QatOptions& options, std::string* engine) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.observer() == "moving_average" || options.observer() == "minmax",
      "quantization.observer must be moving_average or minmax, got '",
      options.observer(),
      "'");
  HOTLOOP_CHECK_AS(
      ConfigError,
      !options.fused() || options.observer() == "moving_average",
      "quantization.observer=minmax needs quantization.fused=false (the "
      "fused fake quantizer observes a moving average)");
  const std::string chosen = select_quantized_engine(options.engine());
  if (engine != nullptr) {
    *engine = chosen;
  }
  FakeQuantizeOptions activation;
  activation.observer.dtype = at::kQUInt8;
  activation.observer.qscheme = at::kPerTensorAffine;
  activation.observer.reduce_range = engine_reduces_range(chosen);
  activation.observer_kind = options.observer();
  activation.fused = options.fused();
  FakeQuantizeOptions weight;
  weight.observer.dtype = at::kQInt8;
  weight.observer.qscheme =
      chosen == "qnnpack" ? at::kPerTensorSymmetric : at::kPerChannelSymmetric;
  weight.observer.ch_axis = 0;
  weight.fused = options.fused();
  // Both versions average the weights' ranges with torch.ao's default
  // constant, 0.01 (its docstrings call version 0's weight fake quantizers
  // memoryless, but their qconfig passes no averaging_constant).
  weight.observer.averaging_constant = 0.01;
  return {activation, weight};
}

QatNet prepare_qat(models::FashionCnnImpl& model, const QatOptions& options) {
  const models::FashionCnnOptions& shape = model.options();
  HOTLOOP_CHECK_AS(
      ConfigError,
      !shape.sync_batchnorm,
      "quantization-aware training folds plain BatchNorm: train with "
      "trainer.sync_batchnorm=false");
  std::string engine;
  const auto [activation, weight] = qat_qconfig(options, &engine);
  const at::NoGradGuard no_grad;
  std::vector<QatConvBnReLU2d> features;
  for (size_t b = 0; b < shape.channels.size(); ++b) {
    torch::nn::Module& conv =
        detail::child(model, "features." + std::to_string(4 * b));
    torch::nn::Module& norm =
        detail::child(model, "features." + std::to_string(4 * b + 1));
    const auto* bn = norm.as<torch::nn::BatchNorm2dImpl>();
    HOTLOOP_CHECK(
        bn != nullptr,
        "prepare_qat: features.",
        4 * b + 1,
        " is not a BatchNorm2d");
    features.emplace_back(
        detail::forward_value(conv, "weight"),
        detail::forward_value(conv, "bias"),
        *bn,
        weight,
        activation);
  }
  torch::nn::Module& head = detail::child(model, "head");
  const auto count = static_cast<int64_t>(head.children().size());
  std::vector<QatLinear> linears;
  if (shape.hidden > 0) {
    torch::nn::Module& linear = detail::child(model, "head.1");
    linears.emplace_back(
        detail::forward_value(linear, "weight"),
        detail::forward_value(linear, "bias"),
        true,
        weight,
        activation);
  }
  torch::nn::Module& last =
      detail::child(model, "head." + std::to_string(count - 1));
  linears.emplace_back(
      detail::forward_value(last, "weight"),
      detail::forward_value(last, "bias"),
      false,
      weight,
      activation);
  QatNet net(
      "fashion_cnn",
      engine,
      shape.dropout,
      FakeQuantize(activation),
      features,
      linears);
  net->train(model.is_training());
  return net;
}

QatNet prepare_qat(models::MlpImpl& model, const QatOptions& options) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      model.options().activation() == "relu",
      "cannot train an mlp with ",
      model.options().activation(),
      " quantization-aware: LibTorch has no quantized ",
      model.options().activation(),
      " kernel to fuse with quantized::linear");
  std::string engine;
  const auto [activation, weight] = qat_qconfig(options, &engine);
  const at::NoGradGuard no_grad;
  const auto count = static_cast<int64_t>(model.options().hidden().size()) + 1;
  std::vector<QatLinear> linears;
  for (int64_t l = 0; l < count; ++l) {
    torch::nn::Module& linear =
        detail::child(model, "layers." + std::to_string(l));
    linears.emplace_back(
        detail::forward_value(linear, "weight"),
        detail::forward_value(linear, "bias"),
        l + 1 < count,
        weight,
        activation);
  }
  QatNet net(
      "mlp",
      engine,
      model.options().dropout(),
      FakeQuantize(activation),
      std::vector<QatConvBnReLU2d>(),
      linears);
  net->train(model.is_training());
  return net;
}

QatNet prepare_qat(torch::nn::Module& network, const QatOptions& options) {
  if (auto* cnn = dynamic_cast<models::FashionCnnImpl*>(&network)) {
    return prepare_qat(*cnn, options);
  }
  if (auto* mlp = dynamic_cast<models::MlpImpl*>(&network)) {
    return prepare_qat(*mlp, options);
  }
  throw ConfigError(hotloop::detail::str_cat(
      "cannot train ",
      network.name(),
      " quantization-aware: hotloop has quantized kernels for fashion_cnn "
      "and mlp"));
}

QuantizedNet convert_qat(QatNetImpl& net, CalibrationRecord* record) {
  const std::string engine = select_quantized_engine(net.engine());
  const at::NoGradGuard no_grad;
  CalibrationRecord local;
  CalibrationRecord& r = record != nullptr ? *record : local;
  r.activations.clear();
  r.weights.clear();
  std::vector<QuantizedStage> stages;
  r.activations.emplace_back();
  stages.push_back(
      output_of(simple(Kind::kQuantize), *net.quant(), &r.activations.back()));
  if (net.source() == "mlp") {
    stages.push_back(simple(Kind::kFlatten));
  }
  for (const auto& module : *net.features()) {
    auto* layer = module->as<QatConvBnReLU2dImpl>();
    auto [weight, bias] = layer->folded();
    QuantizedStage stage;
    stage.kind = Kind::kConv2d;
    stage.relu = true;
    stage.padding = {1, 1};
    r.weights.emplace_back();
    stage.weight = converted_weight(
        *layer->weight_fake_quant(), weight, &r.weights.back());
    stage.bias = bias.cpu().to(at::kFloat);
    r.activations.emplace_back();
    stages.push_back(output_of(
        stage, *layer->activation_post_process(), &r.activations.back()));
    QuantizedStage pool = simple(Kind::kMaxPool2d);
    pool.kernel = 2;
    stages.push_back(pool);
  }
  if (net.source() == "fashion_cnn") {
    stages.push_back(simple(Kind::kFlatten));
  }
  for (const auto& module : *net.head()) {
    auto* layer = module->as<QatLinearImpl>();
    QuantizedStage stage;
    stage.kind = Kind::kLinear;
    stage.relu = layer->relu();
    r.weights.emplace_back();
    stage.weight = converted_weight(
        *layer->weight_fake_quant(),
        layer->weight().detach(),
        &r.weights.back());
    stage.bias = layer->bias().defined()
                     ? layer->bias().detach().cpu().to(at::kFloat)
                     : at::Tensor();
    r.activations.emplace_back();
    stages.push_back(output_of(
        stage, *layer->activation_post_process(), &r.activations.back()));
  }
  stages.push_back(simple(Kind::kDequantize));
  return QuantizedNet(std::move(stages), net.source() + " qat", engine);
}

} // namespace hotloop::compress
