#include "hotloop/cli/quantization_config.h"

#include "hotloop/core/error.h"

#include <sstream>
#include <string>
#include <vector>

namespace hotloop::cli {
namespace {

OptionSpec option(
    std::string key,
    OptionType type,
    std::string default_value,
    std::string help,
    std::vector<std::string> choices = {},
    std::optional<double> min = std::nullopt) {
  OptionSpec spec;
  spec.key = std::move(key);
  spec.type = type;
  spec.default_value = std::move(default_value);
  spec.help = std::move(help);
  spec.choices = std::move(choices);
  spec.min = min;
  return spec;
}

} // namespace

void add_quantization_options(ConfigSchema& s) {
  using T = OptionType;
  s.add(option(
      "quantization.qat",
      T::kBool,
      "false",
      "train quantization-aware (torch.ao's QAT: fake-quantized weights and "
      "activations, conv-BN-ReLU fused); fashion_cnn and mlp"));
  s.add(option(
      "quantization.engine",
      T::kString,
      "auto",
      "the int8 engine the model is trained for (its qconfig): auto picks "
      "x86, fbgemm, onednn or qnnpack, the first LibTorch has",
      {"auto", "x86", "fbgemm", "onednn", "qnnpack"}));
  s.add(option(
      "quantization.fused",
      T::kBool,
      "true",
      "fused observer and fake quantizer (torch.ao's default QAT qconfig, "
      "version 1); false: FakeQuantize with an observer (version 0)"));
  s.add(option(
      "quantization.observer",
      T::kString,
      "moving_average",
      "activation observers: moving_average (MovingAverageMinMaxObserver) "
      "or minmax (MinMaxObserver; needs quantization.fused=false)",
      {"moving_average", "minmax"}));
  s.add(option(
      "quantization.observer_enabled_stages",
      T::kString,
      "train",
      "the stages whose forwards move the observers, separated by commas "
      "(train, validate, test)"));
  s.add(option(
      "quantization.freeze_bn_epoch",
      T::kInt,
      "-1",
      "from this epoch on (from 0), BatchNorm keeps its running statistics; "
      "-1: never",
      {},
      -1));
  s.add(option(
      "quantization.disable_observer_epoch",
      T::kInt,
      "-1",
      "from this epoch on, the observers stop (scales and zero points "
      "stay); -1: never",
      {},
      -1));
  s.add(option(
      "quantization.quantize_on_fit_end",
      T::kBool,
      "true",
      "convert to int8 when the fit ends and write int8.ckpt in the run "
      "folder (hotloop test and predict run it)"));
}

std::optional<QuantizationConfig> quantization_options(const Config& c) {
  if (!c.get_bool("quantization.qat")) {
    return std::nullopt;
  }
  QuantizationConfig q;
  q.qat.engine(c.get_string("quantization.engine"))
      .fused(c.get_bool("quantization.fused"))
      .observer(c.get_string("quantization.observer"));
  HOTLOOP_CHECK_AS(
      ConfigError,
      !q.qat.fused() || q.qat.observer() == "moving_average",
      "quantization.observer=minmax needs quantization.fused=false (the "
      "fused fake quantizer observes a moving average)");
  std::vector<std::string> stages;
  std::stringstream in(c.get_string("quantization.observer_enabled_stages"));
  std::string stage;
  while (std::getline(in, stage, ',')) {
    stage.erase(0, stage.find_first_not_of(" \t"));
    stage.erase(stage.find_last_not_of(" \t") + 1);
    if (!stage.empty()) {
      stages.push_back(stage);
    }
  }
  q.callback.observer_enabled_stages(stages)
      .freeze_bn_epoch(c.get_int("quantization.freeze_bn_epoch"))
      .disable_observer_epoch(c.get_int("quantization.disable_observer_epoch"))
      .quantize_on_fit_end(c.get_bool("quantization.quantize_on_fit_end"));
  // Checks the stages.
  compress::QuantizationAwareTraining check(q.callback);
  return q;
}

} // namespace hotloop::cli
