#pragma once

#include "hotloop/cli/config.h"
#include "hotloop/compress/qat.h"
#include "hotloop/compress/quantization_aware_training.h"

#include <optional>

namespace hotloop::cli {

/// Quantization-aware training as the config asks for it: the qconfig of
/// prepare_qat and the QuantizationAwareTraining callback's schedule.
struct QuantizationConfig {
  compress::QatOptions qat;
  compress::QuantizationAwareTrainingOptions callback;
};

/// Adds the `quantization` section to `schema`: quantization.qat and the
/// QAT settings (engine, fused, observer, observer_enabled_stages,
/// freeze_bn_epoch, disable_observer_epoch, quantize_on_fit_end), each with
/// its default and help line.
void add_quantization_options(ConfigSchema& schema);

/// The QAT the config asks for; nullopt unless quantization.qat. Throws
/// ConfigError naming the key whose value does not fit.
std::optional<QuantizationConfig> quantization_options(const Config& config);

} // namespace hotloop::cli
