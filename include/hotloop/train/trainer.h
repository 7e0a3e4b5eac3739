#pragma once

#include "hotloop/data/dataloader.h"
#include "hotloop/log/logger.h"
#include "hotloop/log/model_summary.h"
#include "hotloop/train/callback.h"
#include "hotloop/train/checkpoint.h"
#include "hotloop/train/fit_result.h"
#include "hotloop/train/module.h"
#include "hotloop/train/precision.h"
#include "hotloop/train/strategy.h"
#include "hotloop/train/trainer_options.h"

#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace hotloop::train {
namespace detail {
class EvaluationLoop;
class FitLoop;
class OptimizationStep;
} // namespace detail

/// Seeds LibTorch's default generators (Lightning's seed_everything).
void seed_everything(uint64_t seed);

/// Runs the training loop, validation, test and prediction for a Module
/// (Lightning's Trainer). One Trainer can run several fits; each gets its
/// own run folder. Callbacks and loggers are shared by all of them. Not
/// thread-safe.
class Trainer {
 public:
  /// Throws ConfigError naming the option that is out of range or the
  /// device that is not there. Progress lines go to `out`.
  explicit Trainer(TrainerOptions options, std::ostream& out = std::cout);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// Adds a callback; hooks run in the order callbacks were added.
  Trainer& add_callback(std::shared_ptr<Callback> callback);
  /// Adds a logger; every logged metric goes to all of them (on the
  /// process that is_global_zero).
  Trainer& add_logger(std::shared_ptr<log::Logger> logger);
  /// The run's settings (name -> value as text), which every logger gets
  /// with the final metrics at the end of each fit.
  Trainer& set_hyperparams(std::map<std::string, std::string> params);
  /// Replaces the single-process Strategy: how gradients, metrics and stop
  /// decisions are synchronised across processes, and which process writes
  /// files.
  Trainer& set_strategy(std::shared_ptr<Strategy> strategy);
  Strategy& strategy() const {
    return *strategy_;
  }
  /// Whether this process writes the run folder, checkpoints and logs
  /// (Lightning's is_global_zero).
  bool is_global_zero() const {
    return strategy_->is_global_zero();
  }
  /// Whether this process prints progress: enable_progress_bar, on the
  /// global-zero process only.
  bool shows_progress() const {
    return options_.enable_progress_bar() && strategy_->is_global_zero();
  }

  /// Trains `module` on `train` for max_epochs (or max_steps), validating on
  /// `val` (may be null). Moves the module to device(). With `ckpt_path`,
  /// resumes where that checkpoint was written, mid-epoch included, with
  /// the callbacks' state: the weights then match an uninterrupted run bit
  /// for bit.
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

  /// Like validate with test_step and limit_test_batches.
  std::map<std::string, double> test(
      Module& module,
      data::DataLoader& loader,
      const std::string& ckpt_path = "");

  /// Runs predict_step over `loader` (limit_predict_batches) in eval mode
  /// without gradients and returns its outputs, one per batch, in order.
  /// Under a data-parallel strategy each process predicts its share and
  /// every process returns all the outputs, as one process would (each
  /// output's first dimension then counts its batch's samples, unless the
  /// loader has a batch_sampler or batch_size=None; see
  /// detail::predict_in_shares); the batch hooks see the process's own.
  std::vector<at::Tensor> predict(
      Module& module,
      data::DataLoader& loader,
      const std::string& ckpt_path = "");

  /// The current run's folder, created on first use (empty when
  /// default_root_dir is empty).
  const std::string& log_dir();
  /// The run folder of a fit resumed from `ckpt_path`: the folder that
  /// wrote it when it lies in `<folder>/checkpoints/` (unless
  /// new_folder_on_resume or default_root_dir is empty), else log_dir().
  const std::string& log_dir(const std::string& ckpt_path);

  const TrainerOptions& options() const {
    return options_;
  }
  /// The device modules and batches are moved to.
  c10::Device device() const {
    return device_;
  }

  // State for callbacks, valid during fit (and its last values after).

  /// The epoch in progress, from 0 (Lightning's current_epoch).
  int64_t current_epoch() const {
    return current_epoch_;
  }
  /// Optimizer steps taken.
  int64_t global_step() const {
    return progress_.global_step;
  }
  /// Epochs completed, steps, batches of the epoch in progress: what a
  /// checkpoint written now records.
  const TrainingProgress& progress() const {
    return progress_;
  }
  /// The latest training-epoch means and validation metrics; what
  /// ModelCheckpoint and EarlyStopping monitor.
  const std::map<std::string, double>& callback_metrics() const {
    return callback_metrics_;
  }
  /// What the latest validation or test counted (MetricCollection::count:
  /// an ImageClassifier's val_confusion or test_confusion), summed over
  /// every process, on the device it was counted on. The sanity check's
  /// counts are not kept, nor does a checkpoint keep any.
  const std::map<std::string, at::Tensor>& callback_counts() const {
    return callback_counts_;
  }
  /// The last value of everything sent to the loggers.
  const std::map<std::string, double>& logged_metrics() const {
    return logged_metrics_;
  }
  /// Whether a fit is running (false in validate, test and predict).
  bool fitting() const {
    return fit_ != nullptr;
  }
  /// Whether the fit in progress validates (a validation loader and
  /// limit_val_batches != 0).
  bool has_validation() const {
    return has_validation_;
  }
  /// True while the pre-training validation batches run.
  bool sanity_checking() const {
    return sanity_checking_;
  }
  /// Asks the fit to stop after the current optimizer step (or epoch end),
  /// once min_epochs are done.
  void should_stop(bool stop) {
    should_stop_ = stop;
  }
  bool should_stop() const {
    return should_stop_;
  }
  /// The optimizers of the fit in progress, in configure_optimizers'
  /// order; empty outside fit.
  std::vector<torch::optim::Optimizer*> optimizers();
  /// The first optimizer; null outside fit.
  torch::optim::Optimizer* optimizer();
  /// The schedules of the fit in progress; empty outside fit.
  const std::vector<ScheduleConfig>& lr_schedules() const;
  /// The first schedule and its interval; null (kStep) when there is none.
  optim::LRScheduler* lr_scheduler();
  ScheduleInterval lr_scheduler_interval() const;
  /// The fit's callbacks: those added plus the defaults (ModelCheckpoint,
  /// Timer) the options ask for.
  const std::vector<std::shared_ptr<Callback>>& callbacks() const {
    return active_callbacks_;
  }

  /// Writes a checkpoint of the fit in progress (model, optimizer,
  /// schedule, scaler, progress, callbacks, RNG) to `path`, atomically; a
  /// no-op on processes that are not global zero. Throws Error when no fit
  /// is running.
  void save_checkpoint(const std::string& path);
  /// Sends `metrics` to every logger. Everything logged during one optimizer
  /// step (or epoch end) goes out as one record at that global_step.
  void log_metrics(const std::map<std::string, double>& metrics);
  /// The model summary of the last fit (printed at its start).
  const log::ModelSummary& model_summary() const {
    return model_summary_;
  }
  /// Where callbacks print: the Trainer's stream on the global-zero
  /// process, a stream that drops everything on the others (Lightning's
  /// rank_zero_info).
  std::ostream& out() {
    return strategy_->is_global_zero() ? out_ : discard_;
  }

 private:
  // The loops of a fit and of evaluation read and advance the state that
  // callbacks see (progress, callback_metrics, should_stop).
  friend class detail::EvaluationLoop;
  friend class detail::FitLoop;
  friend class detail::OptimizationStep;

  void prepare_callbacks(const std::string& run_dir);
  // Seeds, threads, determinism, cuDNN benchmark, anomaly detection and
  // host memory, as the options say; returns the intra-op threads.
  int apply_runtime_settings(int64_t num_workers);
  // Sends the metrics logged since the last flush as one record.
  void flush_logs();
  // Has the loggers write their buffered records to disk.
  void flush_loggers();
  // Hands the loggers the hyperparameters with `metrics` and ends their
  // run with `status`.
  void finalize_loggers(
      const std::map<std::string, double>& metrics, const std::string& status);
  Precision prepare_evaluation(
      Module& module,
      const data::DataLoader& loader,
      const std::string& ckpt_path);
  // validate (test false) or test: the stage's hooks, limit and step.
  std::map<std::string, double> evaluate(
      Module& module,
      data::DataLoader& loader,
      const std::string& ckpt_path,
      bool test);
  // The batch on the device (non_blocking from pinned memory), in the
  // memory format and dtype the module trains in.
  data::Batch prepare_batch(
      const Precision& precision, const data::Batch& batch) const;
  void prepare_module(Module& module);
  // `loader` itself for one process; under data parallelism this process's
  // share of it, kept in `share`.
  data::DataLoader& share_of(
      data::DataLoader& loader, std::unique_ptr<data::DataLoader>& share) const;
  Precision precision_for(Module& module) const;
  ProfileContext profile_context(
      const Module& module, const data::DataLoader& train) const;
  log::ModelSummary summarize(
      Module& module, data::DataLoader& train, const Precision& precision);
  template <typename Hook>
  void each_callback(Hook&& hook) {
    for (const auto& callback : active_callbacks_) {
      hook(*callback);
    }
  }

  TrainerOptions options_;
  std::ostream& out_;
  std::ostream discard_{nullptr};
  c10::Device device_;
  // Where batches go: device_, or the device a self-placed module names.
  c10::Device input_device_;
  std::string log_dir_;
  std::vector<std::shared_ptr<Callback>> callbacks_;
  std::vector<std::shared_ptr<Callback>> active_callbacks_;
  std::vector<std::shared_ptr<log::Logger>> loggers_;
  std::shared_ptr<Strategy> strategy_;
  std::map<std::string, std::string> hyperparams_;
  log::ModelSummary model_summary_;
  detail::FitLoop* fit_ = nullptr;
  TrainingProgress progress_;
  int64_t current_epoch_ = 0;
  std::map<std::string, double> callback_metrics_;
  std::map<std::string, at::Tensor> callback_counts_;
  std::map<std::string, double> logged_metrics_;
  bool sanity_checking_ = false;
  bool has_validation_ = false;
  bool should_stop_ = false;
  bool min_epochs_noted_ = false;
  std::map<std::string, double> pending_logs_;
  std::string last_checkpoint_;
};

/// The process-wide CPU settings a Trainer applies when a fit or an
/// evaluation starts: intra-op threads (options.num_threads(), or the cores
/// of this machine shared by `local_processes` and less the share of
/// `num_workers` loader workers), BLAS threads, freed host memory kept. For
/// code that runs models outside a Trainer and should time them as it
/// would (hotloop quantize, shrink, generate). Returns the intra-op
/// threads LibTorch runs with afterwards (`at::get_num_threads`).
int apply_host_settings(
    const TrainerOptions& options,
    int64_t num_workers,
    int64_t local_processes = 1);

} // namespace hotloop::train
