#pragma once

#include "hotloop/core/signals.h"
#include "hotloop/data/dataloader.h"
#include "hotloop/log/progress.h"
#include "hotloop/train/checkpoint.h"
#include "hotloop/train/detail/optimization_step.h"
#include "hotloop/train/detail/step_clock.h"
#include "hotloop/train/detail/trace_recorder.h"
#include "hotloop/train/fit_result.h"
#include "hotloop/train/grad_scaler.h"
#include "hotloop/train/metrics.h"
#include "hotloop/train/module.h"
#include "hotloop/train/precision.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>

namespace hotloop::train {
class Trainer;
} // namespace hotloop::train

namespace hotloop::train::detail {

/// One fit of a Module (Lightning's fit loop): sets it up (limits,
/// optimizers, precision, callbacks, a checkpoint's state), runs the
/// epochs, validates when due and decides when to stop. It keeps the
/// Trainer's progress, callback_metrics and should_stop current, which
/// callbacks read. Alive for the duration of Trainer::fit.
class FitLoop {
 public:
  FitLoop(
      Trainer& trainer,
      Module& module,
      data::DataLoader& train,
      data::DataLoader* val);
  ~FitLoop();
  FitLoop(const FitLoop&) = delete;
  FitLoop& operator=(const FitLoop&) = delete;

  /// Fits, resuming from `ckpt_path` when given, and returns the result.
  FitResult run(const std::string& ckpt_path);

  Module& module() {
    return module_;
  }
  /// What configure_optimizers returned; empty before run sets it up.
  const OptimizerSetup& setup() const {
    return setup_;
  }
  /// The parts of a checkpoint that this fit owns: its optimizers,
  /// schedules and scaler (as pointers), the epoch's running means and the
  /// training loader's fingerprint.
  CheckpointState checkpoint_state() const;

 private:
  using Clock = std::chrono::steady_clock;

  // Everything before the first epoch: limits, optimizers, precision,
  // callbacks, the checkpoint's state, the sanity check, the summary.
  void prepare(const std::string& ckpt_path);
  void restore(const std::string& ckpt_path);
  // Trains epoch `epoch` (validating as due); true when the fit should end.
  bool run_epoch(int64_t epoch);
  // After an optimizer step, in the epoch's `batch_idx`-th batch: logs,
  // validates when due, flushes, and answers whether the fit should end.
  bool end_step(
      int64_t epoch,
      bool validate_this_epoch,
      int64_t batch_idx,
      bool last_of_epoch);
  // epoch_end: the validation at the end of an epoch, after which the
  // schedules that watch a metric step.
  void validate(bool epoch_end);
  // Steps the schedules that watch a metric, after `epochs` epochs.
  void step_metric_schedules(int64_t epochs);
  // should_stop, agreed by every process, honoured once min_epochs are done.
  bool stop_requested(int64_t completed_epochs);
  // After the first step: every metric a callback or schedule monitors
  // must be among those the steps and the sanity check logged.
  void check_monitors();
  // Whether a stop signal arrived (at any process).
  bool signalled();
  // A stop signal: write last.ckpt and end the fit.
  void interrupt();
  // At each step's start: starts LibTorch's profiler before the first
  // traced step, marks each traced step, and writes the trace after the
  // last one.
  void trace_steps();
  // Writes the trace (the fit's end, or the traced steps done).
  void finish_trace();
  void print_epoch_line(double seconds);
  FitResult finish();

  Trainer& trainer_;
  Module& module_;
  // The loaders the fit uses: the caller's, or this process's share of
  // them under data parallelism (shard_*).
  data::DataLoader* train_;
  data::DataLoader* val_;
  std::unique_ptr<data::DataLoader> shard_train_;
  std::unique_ptr<data::DataLoader> shard_val_;
  OptimizerSetup setup_;
  std::optional<Precision> precision_;
  std::unique_ptr<GradScaler> scaler_;
  int64_t batches_per_epoch_ = 0;
  // order_digest of the training loader (its sampler's first epoch), for
  // the checkpoints' loader fingerprint.
  int64_t train_order_ = 0;
  int64_t val_check_batches_ = 0;
  int64_t limit_val_batches_ = 0;
  int64_t accumulate_ = 1;
  std::optional<StopSignalGuard> signals_;
  std::optional<log::ProgressBar> bar_;
  Clock::time_point start_;
  double train_seconds_ = 0;
  int64_t train_samples_ = 0;
  bool interrupted_ = false;
  // The global step of the last validation, so none runs twice.
  int64_t validated_step_ = -1;
  StepProfile profile_;
  std::optional<StepClock> clock_;
  std::optional<OptimizationStep> step_;
  // LibTorch's profiler while trace steps run (trainer.profiler=pytorch).
  std::unique_ptr<TraceRecorder> trace_;
  int64_t trace_steps_left_ = 0;
  bool traced_ = false;
  // The global step this fit started at (after a resume's restore).
  int64_t start_step_ = 0;
  // The running means of the epoch in progress, for checkpoints.
  MetricCollection* epoch_metrics_ = nullptr;
  // The metrics the sanity check's validation logged, when it ran.
  std::set<std::string> validation_names_;
  bool validation_names_known_ = false;
  bool monitors_checked_ = false;
  // A mid-epoch checkpoint's running means, for the epoch it resumes.
  std::map<std::string, std::pair<double, double>> resumed_epoch_metrics_;
};

} // namespace hotloop::train::detail
