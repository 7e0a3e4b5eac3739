#pragma once

#include "hotloop/compress/qat.h"
#include "hotloop/compress/quantized_net.h"
#include "hotloop/train/callback.h"

#include <torch/arg.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hotloop::compress {

/// QuantizationAwareTraining's settings: Lightning's callback of that name
/// (observer_enabled_stages, quantize_on_fit_end) and torch.ao's QAT recipe
/// (BatchNorm statistics frozen, then observers stopped, after some
/// epochs).
struct QuantizationAwareTrainingOptions {
  /// The stages whose forwards update the observers ("train", "validate",
  /// "test"); Lightning's observer_enabled_stages, default train only, so
  /// that validation does not move the ranges.
  TORCH_ARG(std::vector<std::string>, observer_enabled_stages) = {"train"};
  /// From this epoch on (counted from 0), BatchNorm uses and keeps its
  /// running statistics (torch.ao's freeze_bn_stats); -1: never.
  TORCH_ARG(int64_t, freeze_bn_epoch) = -1;
  /// From this epoch on, the observers stop in every stage (the scales and
  /// zero points stay); -1: never.
  TORCH_ARG(int64_t, disable_observer_epoch) = -1;
  /// Convert to int8 when the fit ends (Lightning's quantize_on_fit_end):
  /// `converted()` holds it, and `output`, when set, is written.
  TORCH_ARG(bool, quantize_on_fit_end) = true;
  /// Where the int8 checkpoint goes ("": not written). Atomic.
  TORCH_ARG(std::string, output) = "";
  /// Callback states (JSON text) written beside the int8 model: the CLI
  /// keeps its TrainedData there.
  TORCH_ARG(std::string, extra) = "";
};

/// Drives the training of a network prepared with prepare_qat (the
/// module's network must be a QatNet): observers on only in the chosen
/// stages, BatchNorm frozen and observers stopped from the chosen epochs,
/// and the int8 model made (and saved) when the fit ends. Its schedule
/// follows the epoch, so a resumed fit continues it (the fake quantizers'
/// ranges are buffers of the model's checkpoint).
class QuantizationAwareTraining : public train::Callback {
 public:
  /// Throws ConfigError for an unknown stage or an epoch below -1.
  explicit QuantizationAwareTraining(
      QuantizationAwareTrainingOptions options = {});

  void setup(train::Trainer& trainer, train::Module& module) override;
  void on_train_epoch_start(
      train::Trainer& trainer, train::Module& module) override;
  void on_validation_start(
      train::Trainer& trainer, train::Module& module) override;
  void on_validation_end(
      train::Trainer& trainer, train::Module& module) override;
  void on_test_start(train::Trainer& trainer, train::Module& module) override;
  void on_fit_end(train::Trainer& trainer, train::Module& module) override;
  nlohmann::json summary() const override;

  /// The int8 model of the last fit's end (empty before).
  const std::optional<QuantizedNet>& converted() const {
    return converted_;
  }

  /// The QAT network of `module` (a NetworkModule around a QatNet); throws
  /// ConfigError otherwise.
  static QatNetImpl& network_of(train::Module& module);

 private:
  // Observers on for `stage` at `epoch`.
  void set_observers(train::Module& module, const std::string& stage);

  QuantizationAwareTrainingOptions options_;
  int64_t epoch_ = 0;
  std::optional<QuantizedNet> converted_;
};

} // namespace hotloop::compress
