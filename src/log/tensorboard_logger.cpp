#include "hotloop/log/tensorboard_logger.h"

#include "hotloop/train/module.h"
#include "hotloop/train/trainer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdlib>

namespace hotloop::log {
namespace {

// "0.004" -> 0.004, "true" -> true, anything else stays text.
HParamValue typed(const std::string& text) {
  if (text == "true" || text == "false") {
    return HParamValue(text == "true");
  }
  char* end = nullptr;
  const double number = std::strtod(text.c_str(), &end);
  if (!text.empty() && end == text.c_str() + text.size()) {
    return HParamValue(number);
  }
  return HParamValue(text);
}

} // namespace

TensorBoardLogger::TensorBoardLogger(
    const std::string& dir, TensorBoardLoggerOptions options)
    : options_(options), writer_(dir) {}

void TensorBoardLogger::log_metrics(
    const std::map<std::string, double>& metrics, int64_t step) {
  for (const auto& [name, value] : metrics) {
    writer_.add_scalar(name, value, step);
    logged_.insert(name);
  }
  last_step_ = std::max(last_step_, step);
}

void TensorBoardLogger::log_hyperparams(
    const std::map<std::string, std::string>& params,
    const std::map<std::string, double>& metrics) {
  hparams_ = params;
  hparam_metrics_ = metrics;
}

void TensorBoardLogger::finalize(const std::string& status) {
  if (!hparams_.empty()) {
    std::map<std::string, HParamValue> values;
    for (const auto& [name, text] : hparams_) {
      values.emplace(name, typed(text));
    }
    for (const auto& [name, value] : hparam_metrics_) {
      if (logged_.count(name) == 0) {
        writer_.add_scalar(name, value, last_step_);
      }
    }
    // An interrupted run is neither a success nor a failure: it resumes.
    const SessionStatus session = status == "success" ? SessionStatus::kSuccess
                                  : status == "failed"
                                      ? SessionStatus::kFailure
                                      : SessionStatus::kUnknown;
    writer_.add_hparams(
        values, hparam_metrics_, last_step_, session, /*metric_scalars=*/false);
    hparams_.clear();
  }
  writer_.flush();
}

void TensorBoardLogger::resume_at(int64_t step) {
  writer_.add_session_start(step + 1);
}

void TensorBoardLogger::flush() {
  writer_.flush();
}

bool TensorBoardLogger::histogram_epoch(const train::Trainer& trainer) const {
  const int64_t every = options_.histogram_every_n_epochs;
  return every > 0 && (trainer.current_epoch() + 1) % every == 0 &&
         trainer.is_global_zero();
}

void TensorBoardLogger::on_train_epoch_start(
    train::Trainer& trainer, train::Module& module) {
  gradients_pending_ = histogram_epoch(trainer);
}

void TensorBoardLogger::on_train_batch_start(
    train::Trainer& trainer,
    train::Module& module,
    const data::Batch& batch,
    int64_t batch_idx) {
  if (!options_.log_images || images_logged_ || batch.input.dim() != 4 ||
      !trainer.is_global_zero()) {
    return;
  }
  images_logged_ = true;
  const at::NoGradGuard no_grad;
  at::Tensor images =
      batch.input.narrow(0, 0, std::min<int64_t>(batch.size(), 64))
          .to(at::kCPU, at::kFloat);
  const int64_t channels = images.size(1);
  if (channels != 1 && channels != 3 && channels != 4) {
    // Not an image TensorBoard can show in colour: show the first channel.
    images = images.narrow(1, 0, 1);
  }
  // Inputs are normalized: stretch the grid back to [0, 1] for display.
  at::Tensor grid = make_image_grid(images);
  const double low = grid.min().item<double>();
  const double high = grid.max().item<double>();
  grid = (grid - low) / std::max(high - low, 1e-12);
  writer_.add_image("train/input_samples", grid, trainer.global_step());
}

void TensorBoardLogger::on_before_optimizer_step(
    train::Trainer& trainer,
    train::Module& module,
    torch::optim::Optimizer& optimizer) {
  if (!gradients_pending_) {
    return;
  }
  gradients_pending_ = false;
  for (const auto& item : module.named_parameters()) {
    const at::Tensor& grad = item.value().grad();
    // A float16 step that overflowed has inf gradients; the scaler skips
    // it, and so do the histograms.
    if (grad.defined()) {
      writer_.add_histogram_if_finite(
          "gradients/" + item.key(), grad, trainer.global_step());
    }
  }
}

void TensorBoardLogger::on_train_epoch_end(
    train::Trainer& trainer, train::Module& module) {
  if (!histogram_epoch(trainer)) {
    return;
  }
  for (const auto& item : module.named_parameters()) {
    // A diverged weight has no histogram; the divergence is reported by
    // the Trainer, not as a histogram's error.
    writer_.add_histogram_if_finite(
        "weights/" + item.key(), item.value(), trainer.global_step());
  }
}

} // namespace hotloop::log
