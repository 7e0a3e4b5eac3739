#include "hotloop/compress/quantize.h"

#include "detail/quantized_weights.h"
#include "hotloop/compress/quantized_engine.h"
#include "hotloop/core/error.h"
#include "hotloop/models/max_pool2x2.h"

#include <ATen/ATen.h>
#include <c10/util/Type.h>
#include <torch/nn/modules/batchnorm.h>

namespace hotloop::compress {
namespace {

using Kind = QuantizedStage::Kind;

using detail::child;
using detail::quantize_weight;

at::Tensor value(torch::nn::Module& module, const std::string& name) {
  return detail::forward_value(module, name);
}

at::Tensor buffer(torch::nn::Module& module, const std::string& name) {
  return detail::buffer_value(module, name);
}

ObserverOptions activation_options(
    const StaticQuantizationOptions& options, const std::string& engine) {
  ObserverOptions o;
  o.dtype = at::kQUInt8;
  o.qscheme = at::kPerTensorAffine;
  o.reduce_range = engine_reduces_range(engine);
  return o;
}

ObserverOptions weight_options(bool per_channel) {
  ObserverOptions o;
  o.dtype = at::kQInt8;
  o.qscheme = per_channel ? at::kPerChannelSymmetric : at::kPerTensorSymmetric;
  o.ch_axis = 0;
  return o;
}

Observer activation_observer(
    const StaticQuantizationOptions& options, const std::string& engine) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.observer() == "minmax" || options.observer() == "moving_average",
      "quantization observer must be minmax or moving_average, got '",
      options.observer(),
      "'");
  return Observer(
      activation_options(options, engine),
      options.observer() == "moving_average");
}

void check_calibration(const std::vector<at::Tensor>& calibration) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      !calibration.empty(),
      "static quantization needs at least one calibration batch");
}

// A float layer of the fused model and the observer after it.
struct FusedLayer {
  at::Tensor weight;
  at::Tensor bias;
  bool relu = false;
  bool conv = false;
  Observer observer;
};

QuantizedStage weighted_stage(
    const FusedLayer& layer,
    const StaticQuantizationOptions& options,
    CalibrationRecord* record) {
  Observer weight_observer(weight_options(options.per_channel_weights()));
  weight_observer.observe(layer.weight);
  const QParams wq = weight_observer.calculate_qparams();
  const QParams aq = layer.observer.calculate_qparams();
  if (record != nullptr) {
    record->weights.push_back(wq);
    record->activations.push_back(aq);
  }
  QuantizedStage stage;
  stage.kind = layer.conv ? Kind::kConv2d : Kind::kLinear;
  stage.relu = layer.relu;
  stage.weight = quantize_weight(layer.weight, wq);
  stage.bias = layer.bias.defined() ? layer.bias.to(at::kFloat) : at::Tensor();
  stage.scale = aq.scale.item<double>();
  stage.zero_point = aq.zero_point.item<int64_t>();
  if (layer.conv) {
    stage.padding = {1, 1};
  }
  return stage;
}

QuantizedStage quantize_stage(
    const Observer& input, CalibrationRecord* record) {
  const QParams q = input.calculate_qparams();
  if (record != nullptr) {
    record->activations.insert(record->activations.begin(), q);
  }
  QuantizedStage stage;
  stage.kind = Kind::kQuantize;
  stage.scale = q.scale.item<double>();
  stage.zero_point = q.zero_point.item<int64_t>();
  return stage;
}

QuantizedStage simple(Kind kind) {
  QuantizedStage stage;
  stage.kind = kind;
  return stage;
}

} // namespace

std::pair<at::Tensor, at::Tensor> fuse_conv_bn_weights(
    const at::Tensor& conv_weight,
    const at::Tensor& conv_bias,
    const at::Tensor& running_mean,
    const at::Tensor& running_var,
    double eps,
    const at::Tensor& bn_weight,
    const at::Tensor& bn_bias) {
  const at::Tensor b =
      conv_bias.defined() ? conv_bias : at::zeros_like(running_mean);
  const at::Tensor gamma =
      bn_weight.defined() ? bn_weight : at::ones_like(running_mean);
  const at::Tensor beta =
      bn_bias.defined() ? bn_bias : at::zeros_like(running_mean);
  const at::Tensor var_rsqrt = at::rsqrt(running_var + eps);
  std::vector<int64_t> shape(conv_weight.dim(), 1);
  shape[0] = -1;
  const at::Tensor weight = (conv_weight * (gamma * var_rsqrt).reshape(shape))
                                .to(conv_weight.scalar_type());
  const at::Tensor bias =
      ((b - running_mean) * var_rsqrt * gamma + beta).to(b.scalar_type());
  return {weight, bias};
}

QuantizedNet quantize_static(
    models::FashionCnnImpl& model,
    const std::vector<at::Tensor>& calibration,
    const StaticQuantizationOptions& options,
    CalibrationRecord* record) {
  check_calibration(calibration);
  const std::string engine = select_quantized_engine(options.engine());
  const at::NoGradGuard no_grad;
  const models::FashionCnnOptions& shape = model.options();
  const auto blocks = static_cast<int64_t>(shape.channels.size());
  std::vector<FusedLayer> layers;
  for (int64_t b = 0; b < blocks; ++b) {
    torch::nn::Module& conv = child(model, "features." + std::to_string(4 * b));
    torch::nn::Module& norm =
        child(model, "features." + std::to_string(4 * b + 1));
    const auto* bn = norm.as<torch::nn::BatchNorm2d>();
    const double eps = bn != nullptr ? bn->options.eps() : 1e-5;
    HOTLOOP_CHECK_AS(
        ConfigError,
        buffer(norm, "running_mean").defined(),
        "quantize: features.",
        4 * b + 1,
        " keeps no running statistics to fold into its conv");
    auto [weight, bias] = fuse_conv_bn_weights(
        value(conv, "weight"),
        value(conv, "bias"),
        buffer(norm, "running_mean"),
        buffer(norm, "running_var"),
        eps,
        value(norm, "weight"),
        value(norm, "bias"));
    layers.push_back(
        {weight, bias, true, true, activation_observer(options, engine)});
  }
  const int64_t final_index =
      static_cast<int64_t>(child(model, "head").children().size()) - 1;
  if (shape.hidden > 0) {
    torch::nn::Module& linear = child(model, "head.1");
    layers.push_back(
        {value(linear, "weight"),
         value(linear, "bias"),
         true,
         false,
         activation_observer(options, engine)});
  }
  torch::nn::Module& last = child(model, "head." + std::to_string(final_index));
  layers.push_back(
      {value(last, "weight"),
       value(last, "bias"),
       false,
       false,
       activation_observer(options, engine)});

  // Calibration: the fused float model, observed as torch.ao observes it.
  Observer input = activation_observer(options, engine);
  for (const at::Tensor& batch : calibration) {
    at::Tensor x = batch.to(layers.front().weight.device(), at::kFloat);
    input.observe(x);
    for (int64_t b = 0; b < blocks; ++b) {
      FusedLayer& layer = layers[b];
      x = at::relu(at::conv2d(x, layer.weight, layer.bias, 1, 1));
      layer.observer.observe(x);
      x = models::max_pool2x2(x);
    }
    x = x.flatten(1);
    for (size_t l = blocks; l < layers.size(); ++l) {
      FusedLayer& layer = layers[l];
      x = at::linear(x, layer.weight, layer.bias);
      if (layer.relu) {
        x = at::relu(x);
      }
      layer.observer.observe(x);
    }
  }

  std::vector<QuantizedStage> stages;
  for (int64_t b = 0; b < blocks; ++b) {
    stages.push_back(weighted_stage(layers[b], options, record));
    QuantizedStage pool = simple(Kind::kMaxPool2d);
    pool.kernel = 2;
    stages.push_back(pool);
  }
  stages.push_back(simple(Kind::kFlatten));
  for (size_t l = blocks; l < layers.size(); ++l) {
    stages.push_back(weighted_stage(layers[l], options, record));
  }
  stages.insert(stages.begin(), quantize_stage(input, record));
  stages.push_back(simple(Kind::kDequantize));
  return QuantizedNet(std::move(stages), "fashion_cnn static", engine);
}

QuantizedNet quantize_static(
    models::MlpImpl& model,
    const std::vector<at::Tensor>& calibration,
    const StaticQuantizationOptions& options,
    CalibrationRecord* record) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      model.options().activation() == "relu",
      "cannot quantize an mlp with ",
      model.options().activation(),
      " statically: LibTorch has no quantized ",
      model.options().activation(),
      " kernel to fuse with quantized::linear (quantize_dynamic keeps it in "
      "float)");
  check_calibration(calibration);
  const std::string engine = select_quantized_engine(options.engine());
  const at::NoGradGuard no_grad;
  const auto count = static_cast<int64_t>(model.options().hidden().size()) + 1;
  std::vector<FusedLayer> layers;
  for (int64_t l = 0; l < count; ++l) {
    torch::nn::Module& linear = child(model, "layers." + std::to_string(l));
    layers.push_back(
        {value(linear, "weight"),
         value(linear, "bias"),
         l + 1 < count,
         false,
         activation_observer(options, engine)});
  }
  Observer input = activation_observer(options, engine);
  for (const at::Tensor& batch : calibration) {
    at::Tensor x = batch.to(layers.front().weight.device(), at::kFloat);
    input.observe(x);
    x = x.flatten(1);
    for (FusedLayer& layer : layers) {
      x = at::linear(x, layer.weight, layer.bias);
      if (layer.relu) {
        x = at::relu(x);
      }
      layer.observer.observe(x);
    }
  }
  std::vector<QuantizedStage> stages;
  stages.push_back(quantize_stage(input, record));
  stages.push_back(simple(Kind::kFlatten));
  for (const FusedLayer& layer : layers) {
    stages.push_back(weighted_stage(layer, options, record));
  }
  stages.push_back(simple(Kind::kDequantize));
  return QuantizedNet(std::move(stages), "mlp static", engine);
}

QuantizedNet quantize_static(
    torch::nn::Module& network,
    const std::vector<at::Tensor>& calibration,
    const StaticQuantizationOptions& options,
    CalibrationRecord* record) {
  if (auto* cnn = dynamic_cast<models::FashionCnnImpl*>(&network)) {
    return quantize_static(*cnn, calibration, options, record);
  }
  if (auto* mlp = dynamic_cast<models::MlpImpl*>(&network)) {
    return quantize_static(*mlp, calibration, options, record);
  }
  throw ConfigError(hotloop::detail::str_cat(
      "cannot quantize ",
      network.name(),
      " statically: hotloop has quantized kernels for fashion_cnn and mlp"));
}

QuantizedNet quantize_dynamic(
    models::MlpImpl& model, const std::string& engine) {
  const std::string chosen = select_quantized_engine(engine);
  const at::NoGradGuard no_grad;
  const auto count = static_cast<int64_t>(model.options().hidden().size()) + 1;
  const bool gelu = model.options().activation() == "gelu";
  std::vector<QuantizedStage> stages;
  stages.push_back(simple(Kind::kFlatten));
  for (int64_t l = 0; l < count; ++l) {
    torch::nn::Module& linear = child(model, "layers." + std::to_string(l));
    Observer observer(weight_options(/*per_channel=*/false));
    const at::Tensor weight = value(linear, "weight");
    observer.observe(weight);
    QuantizedStage stage;
    stage.kind = Kind::kLinearDynamic;
    stage.relu = l + 1 < count && !gelu;
    stage.weight = quantize_weight(weight, observer.calculate_qparams());
    stage.bias = value(linear, "bias");
    stage.reduce_range = true;
    stages.push_back(stage);
    if (l + 1 < count && gelu) {
      stages.push_back(simple(Kind::kGelu));
    }
  }
  return QuantizedNet(std::move(stages), "mlp dynamic", chosen);
}

QuantizedNet quantize_dynamic(
    torch::nn::Module& network, const std::string& engine) {
  if (auto* mlp = dynamic_cast<models::MlpImpl*>(&network)) {
    return quantize_dynamic(*mlp, engine);
  }
  throw ConfigError(hotloop::detail::str_cat(
      "cannot quantize ",
      network.name(),
      " dynamically: hotloop quantizes the Linear layers of an mlp "
      "(quantize_dynamic) and of a gpt (quantize_dynamic_inplace)"));
}

} // namespace hotloop::compress
