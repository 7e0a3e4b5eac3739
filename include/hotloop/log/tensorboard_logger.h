#pragma once

#include "hotloop/log/logger.h"
#include "hotloop/log/tensorboard.h"
#include "hotloop/train/callback.h"

#include <cstdint>
#include <map>
#include <set>
#include <string>

namespace hotloop::log {

/// What TensorBoardLogger records besides the scalars.
struct TensorBoardLoggerOptions {
  /// Weight histograms at every n-th epoch end and gradient histograms at
  /// that epoch's first optimizer step; 0 (the default, as Keras's
  /// histogram_freq and Lightning): none. They are off unless asked
  /// because they cost the step they land in: a histogram of every
  /// parameter, with a device-to-host copy each on a GPU (0.17 s of
  /// ResNet-18's first step on an H200; 0.27 s of its 0.65 s at batch 16
  /// on the 2-core CPU).
  int64_t histogram_every_n_epochs = 0;
  /// A grid of the first training batch's inputs (up to 64), once per fit.
  bool log_images = true;
};

/// Lightning's TensorBoardLogger: every metric record becomes scalars (tag =
/// metric name) in an event file in `dir`; the run's hyperparameters and
/// final metrics go to the HParams tab. As a Callback (add it to the Trainer
/// both as logger and as callback) it also records weight and gradient
/// histograms and a grid of input images. Not thread-safe.
class TensorBoardLogger : public Logger, public train::Callback {
 public:
  /// Opens an event file in `dir`; throws Error naming it when it can't.
  explicit TensorBoardLogger(
      const std::string& dir, TensorBoardLoggerOptions options = {});

  void log_metrics(
      const std::map<std::string, double>& metrics, int64_t step) override;
  /// Numbers stay numbers and true/false booleans in the HParams tab.
  /// Written at finalize, with the run's status and at its last step;
  /// metrics not logged as scalars before get one point there.
  void log_hyperparams(
      const std::map<std::string, std::string>& params,
      const std::map<std::string, double>& metrics) override;
  /// Marks the restart for TensorBoard (SummaryWriter::add_session_start
  /// at step + 1).
  void resume_at(int64_t step) override;
  void flush() override;
  void finalize(const std::string& status) override;

  std::string state_key() const override {
    return "TensorBoardLogger";
  }
  void on_train_epoch_start(
      train::Trainer& trainer, train::Module& module) override;
  void on_train_batch_start(
      train::Trainer& trainer,
      train::Module& module,
      const data::Batch& batch,
      int64_t batch_idx) override;
  void on_before_optimizer_step(
      train::Trainer& trainer,
      train::Module& module,
      torch::optim::Optimizer& optimizer) override;
  void on_train_epoch_end(
      train::Trainer& trainer, train::Module& module) override;

  /// The event file's writer, for anything else (text, images).
  SummaryWriter& writer() {
    return writer_;
  }

 private:
  bool histogram_epoch(const train::Trainer& trainer) const;

  TensorBoardLoggerOptions options_;
  SummaryWriter writer_;
  bool images_logged_ = false;
  bool gradients_pending_ = false;
  // The last step of log_metrics and the tags it wrote.
  int64_t last_step_ = 0;
  std::set<std::string> logged_;
  std::map<std::string, std::string> hparams_;
  std::map<std::string, double> hparam_metrics_;
};

} // namespace hotloop::log
