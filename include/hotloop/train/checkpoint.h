#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

namespace hotloop::optim {
class LRScheduler;
} // namespace hotloop::optim

namespace hotloop::train {

class GradScaler;

/// Where training stood when a checkpoint was written.
struct TrainingProgress {
  /// Epochs completed.
  int64_t epoch = 0;
  /// Optimizer steps taken.
  int64_t global_step = 0;
  /// Batches of epoch `epoch` (the one in progress) already trained on; 0
  /// when the checkpoint was written between epochs.
  int64_t epoch_batches = 0;
};

/// Writes `path` so that a crash at any moment leaves either the previous
/// file or the complete new one: the content goes to a temporary file in the
/// same folder, is flushed to disk (fsync), then renamed over `path`.
/// Throws Error naming the path when a step fails.
void write_file_atomically(
    const std::string& path, const std::function<void(std::ostream&)>& write);

/// Saves model parameters and buffers, optimizer, schedule and loss-scaler
/// state (each may be null), progress (which is also the data loader's
/// position), the callbacks' state (JSON text, `{state_key: state}`; empty:
/// none) and the RNG states of the CPU and of every CUDA device to `path`,
/// atomically.
void save_checkpoint(
    const std::string& path,
    torch::nn::Module& model,
    const torch::optim::Optimizer* optimizer,
    const optim::LRScheduler* scheduler,
    const TrainingProgress& progress,
    const GradScaler* scaler = nullptr,
    const std::string& callback_state = "");

/// Restores what save_checkpoint wrote into objects built the same way
/// (null optimizer or scheduler: skipped) and returns the progress. Restores
/// the CPU RNG state and the CUDA ones for the devices present; fills
/// `callback_state` (when not null) with the saved callbacks' JSON text, or
/// empty. Throws Error naming `path` when the file is missing or is not a
/// hotloop checkpoint matching the model.
TrainingProgress load_checkpoint(
    const std::string& path,
    torch::nn::Module& model,
    torch::optim::Optimizer* optimizer,
    optim::LRScheduler* scheduler,
    GradScaler* scaler = nullptr,
    std::string* callback_state = nullptr);

} // namespace hotloop::train
