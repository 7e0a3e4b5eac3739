#pragma once

#include "hotloop/data/dataloader.h"
#include "hotloop/log/logger.h"
#include "hotloop/log/model_summary.h"
#include "hotloop/log/progress.h"
#include "hotloop/train/callback.h"
#include "hotloop/train/checkpoint.h"
#include "hotloop/train/module.h"
#include "hotloop/train/precision.h"
#include "hotloop/train/reducer.h"
#include "hotloop/train/step_profile.h"

#include <torch/arg.h>

#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace hotloop::train {

/// Trainer settings, named as Lightning's Trainer flags. Validated when the
/// Trainer is built.
struct TrainerOptions {
  /// Epochs to train; > 0.
  TORCH_ARG(int64_t, max_epochs) = 10;
  /// Train at least this many epochs even when a callback (EarlyStopping,
  /// Timer) asks to stop earlier; 0: no minimum.
  TORCH_ARG(int64_t, min_epochs) = 0;
  /// Stop after this many optimizer steps; -1 for no limit.
  TORCH_ARG(int64_t, max_steps) = -1;
  /// The limit_* options, as in Lightning: -1 for every batch, a fraction
  /// in (0, 1) of the loader's batches (rounded down; an error when that
  /// is none), or a whole number of batches. Unlike Lightning, 1.0 means
  /// one batch: a double cannot tell Lightning's 1 from 1.0; use -1 for all.
  /// Batches per training epoch; > 0 or -1.
  TORCH_ARG(double, limit_train_batches) = -1;
  /// Batches per validation run; 0 turns validation off.
  TORCH_ARG(double, limit_val_batches) = -1;
  /// Batches per test run.
  TORCH_ARG(double, limit_test_batches) = -1;
  /// Batches per predict run.
  TORCH_ARG(double, limit_predict_batches) = -1;
  /// How often to validate within an epoch: a value in (0, 1] is a
  /// fraction of the epoch (0.25: four times per epoch), a whole number > 1
  /// a count of training batches (at most one epoch's worth). Fractions are
  /// rounded down to whole optimizer steps; counts must be a multiple of
  /// accumulate_grad_batches, so validation (and the checkpoints taken
  /// after it) always fall between optimizer steps.
  TORCH_ARG(double, val_check_interval) = 1.0;
  /// Validate in every n-th epoch (and always after the last).
  TORCH_ARG(int64_t, check_val_every_n_epoch) = 1;
  /// Train on the same first n batches every epoch (the training loader's
  /// epoch-0 order, augmentation included) to check that the model can
  /// overfit them, and validate on the first n validation batches (as
  /// Lightning 2 does); a fraction or a whole number as for limit_*; 0
  /// turns it off.
  TORCH_ARG(double, overfit_batches) = 0;
  /// Sum gradients over this many batches per optimizer step.
  TORCH_ARG(int64_t, accumulate_grad_batches) = 1;
  /// Numeric precision, as Lightning names it: 32-true, 16-mixed (autocast
  /// to float16 with dynamic loss scaling; CUDA), bf16-mixed (autocast to
  /// bfloat16), bf16-true (parameters and inputs in bfloat16).
  TORCH_ARG(std::string, precision) = "32-true";
  /// Drop gradients after each optimizer step (PyTorch's
  /// zero_grad(set_to_none=True)); false zero-fills them, as older PyTorch
  /// did. Kept switchable for the ablation benchmark.
  TORCH_ARG(bool, zero_grad_set_to_none) = true;
  /// Clip gradients at this value; 0 turns clipping off.
  TORCH_ARG(double, gradient_clip_val) = 0;
  /// "norm": scale all gradients so their global 2-norm is at most
  /// gradient_clip_val; "value": clamp each element to +-gradient_clip_val.
  TORCH_ARG(std::string, gradient_clip_algorithm) = "norm";
  /// Stop after this many seconds of fitting, counted across resumes (a
  /// Timer callback checked after each optimizer step); 0 for no limit.
  TORCH_ARG(double, max_time) = 0;
  /// Run this many training and validation batches once, as a smoke test:
  /// one epoch, no run folder, no checkpoint, no loggers, no
  /// checkpoint/early-stopping/lr-monitor callbacks; 0 turns it off.
  TORCH_ARG(int64_t, fast_dev_run) = 0;
  /// Validation batches run before training starts, to catch a broken
  /// validation_step early; 0 turns it off, -1 runs them all.
  TORCH_ARG(int64_t, num_sanity_val_steps) = 2;
  /// Make LibTorch use deterministic algorithms (errors where none exists).
  TORCH_ARG(bool, deterministic) = false;
  /// Let cuDNN benchmark convolution algorithms for each input shape and
  /// keep the fastest (the shapes of a training loop rarely change).
  TORCH_ARG(bool, benchmark) = true;
  /// Autograd anomaly detection: slow, for debugging NaNs only.
  TORCH_ARG(bool, detect_anomaly) = false;
  /// Evaluate under c10::InferenceMode (no graph, no version counters);
  /// false: under NoGradGuard, for models that keep evaluation outputs
  /// for later autograd use.
  TORCH_ARG(bool, inference_mode) = true;
  /// "auto", "cpu", "cuda", "gpu" or "cuda:N"; see resolve_device.
  TORCH_ARG(std::string, accelerator) = "auto";
  /// "auto", "1", or one device index as "[N]"; see resolve_device.
  TORCH_ARG(std::string, devices) = "auto";
  /// Keep 4-D parameters and inputs in channels-last memory format, which
  /// convolution kernels on tensor cores (and oneDNN) prefer.
  TORCH_ARG(bool, channels_last) = false;
  /// When >= 0, fit/validate/test/predict first seed LibTorch's generators
  /// with it (Lightning's seed_everything); -1 leaves them as they are.
  TORCH_ARG(int64_t, seed) = -1;
  /// The step-time profile (printed at the end of fit, in summary.json) is
  /// always kept; "pytorch" also records LibTorch's profiler over
  /// profiler_steps optimizer steps after the first two, as a Chrome trace
  /// `<run folder>/trace.json` (open in chrome://tracing or Perfetto).
  TORCH_ARG(std::string, profiler) = "";
  TORCH_ARG(int64_t, profiler_steps) = 5;
  /// Runs go to `<default_root_dir>/<name>/version_N`; empty: no files.
  TORCH_ARG(std::string, default_root_dir) = "runs";
  TORCH_ARG(std::string, name) = "default";
  /// Intra-op threads for LibTorch; 0 = auto (see resolve_intra_op_threads).
  TORCH_ARG(int64_t, num_threads) = 0;
  /// Worker threads of the BLAS library itself (OpenBLAS), set at fit
  /// start; 0 leaves the library's default. 1 lets LibTorch's intra-op
  /// threads own the cores instead of competing with a second spinning pool
  /// (see set_blas_threads).
  TORCH_ARG(int64_t, blas_threads) = 1;
  /// Keep freed host memory for reuse (retain_freed_host_memory): saves a
  /// page fault per touched page of every activation, every step.
  TORCH_ARG(bool, retain_host_memory) = true;
  /// Checkpoint through a ModelCheckpoint callback: when none was added, a
  /// default one writes `checkpoints/last.ckpt` and the latest
  /// `epoch=E-step=S.ckpt` after every epoch.
  TORCH_ARG(bool, enable_checkpointing) = true;
  /// On SIGINT/SIGTERM finish the current optimizer step, write
  /// `last.ckpt` and return from fit with `interrupted` set.
  TORCH_ARG(bool, handle_signals) = true;
  /// Show progress: a live bar on a terminal, otherwise a line every
  /// log_every_n_steps batches; and one line per epoch.
  TORCH_ARG(bool, enable_progress_bar) = true;
  /// Optimizer steps between metric records sent to the loggers (and
  /// between progress lines when output is not a terminal); 0: none.
  TORCH_ARG(int64_t, log_every_n_steps) = 50;
  /// Optimizer steps between writes of the loggers' buffered records to
  /// disk (Lightning's CSVLogger flush_logs_every_n_steps), besides every
  /// epoch end, stop signal and the end of fit; 0: only then.
  TORCH_ARG(int64_t, flush_logs_every_n_steps) = 100;
};

/// What a fit returns (and writes to summary.json).
struct FitResult {
  /// The last validation metrics plus train_loss of the last epoch.
  std::map<std::string, double> metrics;
  /// Epochs completed: one cut short by max_steps or a stop is not counted
  /// (its checkpoint resumes in the middle).
  int64_t epochs = 0;
  int64_t steps = 0;
  /// Training samples per second over the training phases only.
  double train_samples_per_s = 0;
  /// Wall time of the whole fit, validation included.
  double wall_s = 0;
  /// The checkpoint to resume from: last.ckpt when one was written, else
  /// the last checkpoint written; empty when none was.
  std::string checkpoint_path;
  /// The best checkpoint of the first ModelCheckpoint that monitors a
  /// metric; empty when there is none.
  std::string best_model_path;
  /// A stop signal ended the fit early, after checkpointing mid-epoch.
  bool interrupted = false;
  /// Where the training steps' time went.
  StepProfile profile;
};

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
  /// process whose reducer is_global_zero).
  Trainer& add_logger(std::shared_ptr<log::Logger> logger);
  /// The run's settings (name -> value as text), which every logger gets
  /// with the final metrics at the end of each fit.
  Trainer& set_hyperparams(std::map<std::string, std::string> params);
  /// Replaces the single-process Reducer: how gradients are synchronised
  /// and which process writes files.
  Trainer& set_reducer(std::shared_ptr<Reducer> reducer);
  const Reducer& reducer() const {
    return *reducer_;
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
  std::vector<at::Tensor> predict(
      Module& module,
      data::DataLoader& loader,
      const std::string& ckpt_path = "");

  /// The current run's folder, created on first use (empty when
  /// default_root_dir is empty).
  const std::string& log_dir();

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
  /// Where callbacks print; nothing is printed when the progress bar is off.
  std::ostream& out() {
    return out_;
  }

 private:
  struct FitState;
  enum class Stage { kValidate, kTest };

  FitResult run_fit(FitState& state, const std::string& ckpt_path);
  void prepare_callbacks(const std::string& run_dir);
  void restore(FitState& state, const std::string& ckpt_path);
  // Trains one epoch (validating as due); true when the fit should end.
  bool train_epoch(FitState& state, int64_t epoch);
  // epoch_end: the validation at the end of an epoch, after which the
  // schedules that watch a metric step.
  void run_validation(FitState& state, bool epoch_end);
  // Seeds, threads, determinism, cuDNN benchmark, anomaly detection and
  // host memory, as the options say; returns the intra-op threads.
  int apply_runtime_settings(int64_t num_workers);
  // Clips one optimizer's gradients as gradient_clip_* say.
  void clip_gradients(const std::vector<at::Tensor>& parameters) const;
  // Steps the schedules of `interval` that watch no metric and are due at
  // the `count`-th step or epoch.
  void step_schedules(
      FitState& state, ScheduleInterval interval, int64_t count);
  // Steps the schedules that watch a metric, after `epochs` epochs.
  void step_metric_schedules(FitState& state, int64_t epochs);
  // Drops or zero-fills the gradients, as zero_grad_set_to_none says.
  void zero_grad(torch::optim::Optimizer& optimizer) const;
  // Starts and stops LibTorch's profiler around the traced steps.
  void trace_steps(FitState& state);
  // should_stop, honoured once min_epochs are done.
  bool stop_requested(int64_t completed_epochs);
  // A stop signal: write last.ckpt and end the fit.
  void interrupt(FitState& state);
  // Sends the metrics logged since the last flush as one record.
  void flush_logs();
  // Has the loggers write their buffered records to disk.
  void flush_loggers();
  void print_epoch_line(
      int64_t samples, const log::StepTimes& phases, double seconds);
  Precision prepare_evaluation(
      Module& module,
      const data::DataLoader& loader,
      const std::string& ckpt_path);
  std::map<std::string, double> evaluate(
      Module& module,
      data::DataLoader& loader,
      Stage stage,
      const Precision& precision,
      int64_t limit_batches);
  data::Batch prepare_batch(
      const Precision& precision, const data::Batch& batch) const;
  void prepare_module(Module& module);
  Precision precision_for(Module& module) const;
  void write_summary(const FitResult& result, const ProfileContext& context);
  ProfileContext profile_context(const data::DataLoader& train) const;
  log::ModelSummary summarize(
      Module& module, data::DataLoader& train, const Precision& precision);
  template <typename Hook>
  void each_callback(Hook&& hook);

  TrainerOptions options_;
  std::ostream& out_;
  c10::Device device_;
  std::string log_dir_;
  std::vector<std::shared_ptr<Callback>> callbacks_;
  std::vector<std::shared_ptr<Callback>> active_callbacks_;
  std::vector<std::shared_ptr<log::Logger>> loggers_;
  std::shared_ptr<Reducer> reducer_;
  std::map<std::string, std::string> hyperparams_;
  log::ModelSummary model_summary_;
  FitState* fit_ = nullptr;
  TrainingProgress progress_;
  int64_t current_epoch_ = 0;
  std::map<std::string, double> callback_metrics_;
  std::map<std::string, double> logged_metrics_;
  bool sanity_checking_ = false;
  bool has_validation_ = false;
  bool should_stop_ = false;
  bool min_epochs_noted_ = false;
  std::map<std::string, double> pending_logs_;
  std::string last_checkpoint_;
};

} // namespace hotloop::train
