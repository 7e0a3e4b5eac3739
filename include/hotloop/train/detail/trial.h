#pragma once

#include "hotloop/data/dataloader.h"
#include "hotloop/train/checkpoint.h"
#include "hotloop/train/trainer_options.h"

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <vector>

namespace hotloop::train::detail {

/// A module's parameters and buffers and the random generators' states,
/// taken before the tuners' trial fits train it and put back after, so
/// that the fit that follows starts as if they never ran (Lightning
/// restores a checkpoint it wrote for the purpose).
class ModuleSnapshot {
 public:
  explicit ModuleSnapshot(torch::nn::Module& module);
  /// Copies the values back wherever the module's tensors now are, drops
  /// the gradients and restores the generators.
  void restore();

 private:
  torch::nn::Module& module_;
  std::vector<at::Tensor> parameters_;
  std::vector<at::Tensor> buffers_;
  RngStates rng_;
};

/// `options` for a tuner's trial of `steps` optimizer steps over `train`
/// (its batches per epoch as `options.limit_train_batches` leaves them):
/// the same device, precision, accumulation and clipping; no validation,
/// sanity check, checkpoints, loggers, run folder, progress output, timer
/// or signal handling.
TrainerOptions trial_options(
    TrainerOptions options, int64_t steps, const data::DataLoader& train);

} // namespace hotloop::train::detail
