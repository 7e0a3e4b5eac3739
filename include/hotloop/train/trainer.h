#pragma once

#include "hotloop/data/dataloader.h"
#include "hotloop/train/checkpoint.h"
#include "hotloop/train/module.h"
#include "hotloop/train/precision.h"

#include <torch/arg.h>

#include <cstdint>
#include <iostream>
#include <map>
#include <string>

namespace hotloop::train {

/// Trainer settings, named as Lightning's Trainer flags. Validated when the
/// Trainer is built.
struct TrainerOptions {
  /// Epochs to train; > 0.
  TORCH_ARG(int64_t, max_epochs) = 10;
  /// Stop after this many optimizer steps; -1 for no limit.
  TORCH_ARG(int64_t, max_steps) = -1;
  /// Batches per training epoch; -1 for all.
  TORCH_ARG(int64_t, limit_train_batches) = -1;
  /// Batches per validation run; -1 for all, 0 turns validation off.
  TORCH_ARG(int64_t, limit_val_batches) = -1;
  /// Validate after every n-th epoch (and always after the last).
  TORCH_ARG(int64_t, check_val_every_n_epoch) = 1;
  /// Sum gradients over this many batches per optimizer step.
  TORCH_ARG(int64_t, accumulate_grad_batches) = 1;
  /// Numeric precision, as Lightning names it: 32-true, 16-mixed (autocast
  /// to float16 with dynamic loss scaling; CUDA), bf16-mixed (autocast to
  /// bfloat16), bf16-true (parameters and inputs in bfloat16).
  TORCH_ARG(std::string, precision) = "32-true";
  /// Clip gradients at this value; 0 turns clipping off.
  TORCH_ARG(double, gradient_clip_val) = 0;
  /// "norm": scale all gradients so their global 2-norm is at most
  /// gradient_clip_val; "value": clamp each element to +-gradient_clip_val.
  TORCH_ARG(std::string, gradient_clip_algorithm) = "norm";
  /// Stop after this many seconds of fitting (checked after each optimizer
  /// step; the epoch's checkpoint is written); 0 for no limit.
  TORCH_ARG(double, max_time) = 0;
  /// Run this many training and validation batches once, as a smoke test:
  /// one epoch, no run folder, no checkpoint; 0 turns it off.
  TORCH_ARG(int64_t, fast_dev_run) = 0;
  /// Validation batches run before training starts, to catch a broken
  /// validation_step early; 0 turns it off.
  TORCH_ARG(int64_t, num_sanity_val_steps) = 2;
  /// Make LibTorch use deterministic algorithms (errors where none exists).
  TORCH_ARG(bool, deterministic) = false;
  /// Let cuDNN benchmark convolution algorithms for each input shape and
  /// keep the fastest (the shapes of a training loop rarely change).
  TORCH_ARG(bool, benchmark) = true;
  /// Autograd anomaly detection: slow, for debugging NaNs only.
  TORCH_ARG(bool, detect_anomaly) = false;
  /// Runs go to `<default_root_dir>/<name>/version_N`; empty: no files.
  TORCH_ARG(std::string, default_root_dir) = "runs";
  TORCH_ARG(std::string, name) = "default";
  /// Intra-op threads for LibTorch; 0 = auto (see resolve_intra_op_threads).
  TORCH_ARG(int64_t, num_threads) = 0;
  /// Keep freed host memory for reuse (retain_freed_host_memory): saves a
  /// page fault per touched page of every activation, every step.
  TORCH_ARG(bool, retain_host_memory) = true;
  /// Write `checkpoints/last.ckpt` after every epoch.
  TORCH_ARG(bool, enable_checkpointing) = true;
  /// On SIGINT/SIGTERM finish the current optimizer step, write
  /// `checkpoints/last.ckpt` and return from fit with `interrupted` set.
  TORCH_ARG(bool, handle_signals) = true;
  /// Show progress: a live bar on a terminal, otherwise a line every
  /// log_every_n_steps batches; and one line per epoch.
  TORCH_ARG(bool, enable_progress_bar) = true;
  /// Batches between progress lines when output is not a terminal; 0: none.
  TORCH_ARG(int64_t, log_every_n_steps) = 50;
};

/// What a fit returns (and writes to summary.json).
struct FitResult {
  /// The last validation metrics plus train_loss of the last epoch.
  std::map<std::string, double> metrics;
  int64_t epochs = 0;
  int64_t steps = 0;
  /// Training samples per second over the training phases only.
  double train_samples_per_s = 0;
  /// Wall time of the whole fit, validation included.
  double wall_s = 0;
  /// The last checkpoint written; empty when none was.
  std::string checkpoint_path;
  /// A stop signal ended the fit early, after checkpointing mid-epoch.
  bool interrupted = false;
};

/// Seeds LibTorch's default generators (Lightning's seed_everything).
void seed_everything(uint64_t seed);

/// Runs the training loop, validation and test for a Module (Lightning's
/// Trainer). One Trainer can run several fits; each gets its own run folder.
/// Not thread-safe.
class Trainer {
 public:
  /// Throws ConfigError naming the option that is out of range. Progress
  /// lines go to `out`.
  explicit Trainer(TrainerOptions options, std::ostream& out = std::cout);

  /// Trains `module` on `train` for max_epochs (or max_steps), validating on
  /// `val` (may be null) and checkpointing each epoch. With `ckpt_path`,
  /// resumes where that checkpoint was written, mid-epoch included: the
  /// weights then match an uninterrupted run bit for bit.
  FitResult fit(
      Module& module,
      data::DataLoader& train,
      data::DataLoader* val = nullptr,
      const std::string& ckpt_path = "");

  /// Runs validation_step over `loader` (after loading `ckpt_path` into the
  /// module, when given) and returns the metrics.
  std::map<std::string, double> validate(
      Module& module,
      data::DataLoader& loader,
      const std::string& ckpt_path = "");

  /// Like validate with test_step.
  std::map<std::string, double> test(
      Module& module,
      data::DataLoader& loader,
      const std::string& ckpt_path = "");

  /// The current run's folder, created on first use (empty when
  /// default_root_dir is empty).
  const std::string& log_dir();

  const TrainerOptions& options() const {
    return options_;
  }

 private:
  enum class Stage { kValidate, kTest };
  std::map<std::string, double> evaluate(
      Module& module,
      data::DataLoader& loader,
      Stage stage,
      const Precision& precision,
      int64_t limit_batches);
  Precision precision_for(Module& module) const;
  void write_summary(const FitResult& result);

  TrainerOptions options_;
  std::ostream& out_;
  std::string log_dir_;
};

} // namespace hotloop::train
