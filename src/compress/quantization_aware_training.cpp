#include "hotloop/compress/quantization_aware_training.h"

#include "hotloop/core/error.h"
#include "hotloop/train/network_module.h"
#include "hotloop/train/trainer.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace hotloop::compress {

QuantizationAwareTraining::QuantizationAwareTraining(
    QuantizationAwareTrainingOptions options)
    : options_(std::move(options)) {
  for (const std::string& stage : options_.observer_enabled_stages()) {
    HOTLOOP_CHECK_AS(
        ConfigError,
        stage == "train" || stage == "validate" || stage == "test",
        "quantization.observer_enabled_stages: expected train, validate or "
        "test, got '",
        stage,
        "'");
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.freeze_bn_epoch() >= -1,
      "quantization.freeze_bn_epoch must be an epoch (from 0) or -1, got ",
      options_.freeze_bn_epoch());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.disable_observer_epoch() >= -1,
      "quantization.disable_observer_epoch must be an epoch (from 0) or -1, "
      "got ",
      options_.disable_observer_epoch());
}

QatNetImpl& QuantizationAwareTraining::network_of(train::Module& module) {
  auto* network_module = dynamic_cast<train::NetworkModule*>(&module);
  QatNetImpl* net =
      network_module != nullptr
          ? dynamic_cast<QatNetImpl*>(network_module->network().get())
          : nullptr;
  HOTLOOP_CHECK_AS(
      ConfigError,
      net != nullptr,
      "QuantizationAwareTraining needs a network prepared with "
      "compress::prepare_qat (quantization.qat=true)");
  return *net;
}

void QuantizationAwareTraining::setup(
    train::Trainer& trainer, train::Module& module) {
  network_of(module);
  converted_.reset();
}

void QuantizationAwareTraining::set_observers(
    train::Module& module, const std::string& stage) {
  const auto& stages = options_.observer_enabled_stages();
  const bool stopped = options_.disable_observer_epoch() >= 0 &&
                       epoch_ >= options_.disable_observer_epoch();
  network_of(module).enable_observers(
      !stopped &&
      std::find(stages.begin(), stages.end(), stage) != stages.end());
}

void QuantizationAwareTraining::on_train_epoch_start(
    train::Trainer& trainer, train::Module& module) {
  epoch_ = trainer.current_epoch();
  if (options_.freeze_bn_epoch() >= 0 && epoch_ >= options_.freeze_bn_epoch()) {
    network_of(module).freeze_bn(true);
  }
  set_observers(module, "train");
}

void QuantizationAwareTraining::on_validation_start(
    train::Trainer& trainer, train::Module& module) {
  set_observers(module, "validate");
}

void QuantizationAwareTraining::on_validation_end(
    train::Trainer& trainer, train::Module& module) {
  set_observers(module, "train");
}

void QuantizationAwareTraining::on_test_start(
    train::Trainer& trainer, train::Module& module) {
  set_observers(module, "test");
}

void QuantizationAwareTraining::on_fit_end(
    train::Trainer& trainer, train::Module& module) {
  if (!options_.quantize_on_fit_end()) {
    return;
  }
  QatNetImpl& net = network_of(module);
  const bool was_training = net.is_training();
  net.eval();
  converted_ = convert_qat(net);
  net.train(was_training);
  if (!options_.output().empty() && trainer.is_global_zero()) {
    save_quantized(options_.output(), **converted_, options_.extra());
    trainer.out() << "quantization-aware training: int8 model ("
                  << (*converted_)->engine() << ") written to "
                  << options_.output() << "\n";
  }
}

nlohmann::json QuantizationAwareTraining::summary() const {
  if (!converted_) {
    return nullptr;
  }
  nlohmann::json qat = {
      {"engine", (*converted_)->engine()},
      {"kind", (*converted_)->kind()},
      {"int8_weight_bytes", (*converted_)->weight_bytes()}};
  if (!options_.output().empty()) {
    qat["int8_checkpoint"] = options_.output();
  }
  return {{"quantization_aware_training", qat}};
}

} // namespace hotloop::compress
