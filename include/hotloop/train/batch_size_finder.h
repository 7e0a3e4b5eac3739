#pragma once

#include "hotloop/data/dataloader.h"
#include "hotloop/train/module.h"
#include "hotloop/train/trainer_options.h"

#include <torch/arg.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace hotloop::train {

/// The largest-batch search's settings, Lightning's BatchSizeFinder
/// arguments and defaults, plus the memory budget a CPU needs.
struct BatchSizeFinderOptions {
  /// "power": double the batch until a trial does not fit, then take the
  /// last that did; "binsearch": then bisect between the two.
  TORCH_ARG(std::string, mode) = "power";
  /// Optimizer steps each batch size trains; >= 1.
  TORCH_ARG(int64_t, steps_per_trial) = 3;
  /// The first batch size tried; >= 1.
  TORCH_ARG(int64_t, init_val) = 2;
  /// The most batch-size increases before the search ends; >= 1.
  TORCH_ARG(int64_t, max_trials) = 25;
  /// What a trial may use, in bytes: on the CPU the process's peak
  /// resident set while it trains. 0: the resident set at the start plus
  /// 70% of the memory the kernel has available then (MemAvailable), so
  /// the search never gets near the out-of-memory killer. On CUDA a trial
  /// fails when the device runs out of memory, as in Lightning.
  TORCH_ARG(int64_t, max_memory) = 0;
};

/// One batch size tried.
struct BatchSizeTrial {
  int64_t batch_size = 0;
  /// It trained within the budget.
  bool fits = false;
  /// Measured: it trained; false for one judged from the trials before it
  /// (its predicted peak was over the budget) or that ran out of memory.
  bool measured = false;
  /// The process's peak resident set during the trial (CPU), or its
  /// prediction; 0 where not measured.
  int64_t peak_bytes = 0;
  /// Training samples per second over the trial's steps after the first.
  double samples_per_s = 0;
};

/// The search's result.
struct BatchSizeSearch {
  /// The batch size to train with: the last one tried that fit.
  int64_t batch_size = 0;
  /// The budget the trials were held to (CPU), in bytes.
  int64_t max_memory = 0;
  std::vector<BatchSizeTrial> trials;
};

/// Makes the training loader for one batch size.
using LoaderForBatchSize =
    std::function<std::unique_ptr<data::DataLoader>(int64_t batch_size)>;

/// Lightning's `Tuner.scale_batch_size` (power or binsearch): trains
/// `module` for steps_per_trial optimizer steps at growing batch sizes,
/// each on the loader `loader_for` makes, with the settings of `trainer`
/// (device, precision, accumulation) and nothing written; a batch fails
/// when it runs out of device memory or, on the CPU, when its peak
/// resident set passes max_memory. Before each trial the peak is predicted
/// from the last one that fit (growing with the batch), and a batch
/// predicted over the budget is judged failed without running it, so the
/// search never lets the kernel kill the process. A batch as large as the
/// dataset ends the search. The module's parameters, buffers and the
/// generators' states are put back afterwards. Progress lines go to `out`.
/// Throws ConfigError when not even a batch of 1 fits.
BatchSizeSearch scale_batch_size(
    Module& module,
    const LoaderForBatchSize& loader_for,
    TrainerOptions trainer,
    BatchSizeFinderOptions options = {},
    std::ostream* out = nullptr);

/// The learning rate for `batch_size` when `lr` suits `base_batch_size`:
/// rule "linear" scales it with the batch, "sqrt" with its square root,
/// "none" keeps it. Throws ConfigError for another rule.
double scale_learning_rate(
    double lr,
    int64_t base_batch_size,
    int64_t batch_size,
    const std::string& rule);

namespace detail {

/// Whether a batch size trains within the budget; whether a batch of that
/// size already holds the whole dataset.
using FitsBatch = std::function<bool(int64_t size)>;

/// Lightning's _run_power_scaling and _run_binary_scaling from `size`,
/// asking `fits` of each size they try; return the last size that fit (0:
/// none did), where Lightning, out of trials, may return one untried.
int64_t power_scaling(
    const FitsBatch& fits,
    const FitsBatch& covers_dataset,
    int64_t size,
    int64_t max_trials);
int64_t binary_scaling(
    const FitsBatch& fits,
    const FitsBatch& covers_dataset,
    int64_t size,
    int64_t max_trials);

} // namespace detail
} // namespace hotloop::train
