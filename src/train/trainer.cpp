#include "hotloop/train/trainer.h"

#include "hotloop/core/compat.h"
#include "hotloop/core/error.h"
#include "hotloop/core/memory.h"
#include "hotloop/core/signals.h"
#include "hotloop/core/threads.h"
#include "hotloop/log/model_summary.h"
#include "hotloop/log/progress.h"
#include "hotloop/optim/clip_grad.h"
#include "hotloop/optim/lr_scheduler.h"
#include "hotloop/train/device.h"
#include "hotloop/train/early_stopping.h"
#include "hotloop/train/grad_scaler.h"
#include "hotloop/train/model_checkpoint.h"
#include "hotloop/train/run_dir.h"
#include "hotloop/train/step_profile.h"
#include "hotloop/train/timer.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/autograd/anomaly_mode.h>
#include <torch/csrc/autograd/profiler.h>
#include <torch/nn/utils/clip_grad.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <optional>
#include <set>

namespace hotloop::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double seconds_between(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double>(end - start).count();
}

// Seconds that `work` takes.
template <typename Work>
double timed(Work&& work) {
  const auto start = Clock::now();
  work();
  return seconds_since(start);
}

int64_t limited(int64_t available, int64_t limit) {
  return limit < 0 ? available : std::min(available, limit);
}

// Whether `limit` is a valid limit_* value: -1, 0 (when allowed), a
// fraction in (0, 1) or a whole number.
void check_limit(double limit, const char* name, bool zero_allowed) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      limit == -1 || (zero_allowed && limit == 0) ||
          (limit > 0 && (limit < 1 || limit == std::floor(limit))),
      "trainer.",
      name,
      ": expected -1 (all), ",
      zero_allowed ? "0 (none), " : "",
      "a fraction in (0, 1) or a whole number of batches, got ",
      limit);
}

// The batches a limit_* value leaves of a loader's `available` ones.
int64_t resolve_limit(double limit, int64_t available, const char* name) {
  if (limit < 0) {
    return available;
  }
  if (limit > 0 && limit < 1) {
    const auto batches = static_cast<int64_t>(
        std::floor(limit * static_cast<double>(available)));
    HOTLOOP_CHECK_AS(
        ConfigError,
        batches > 0,
        "trainer.",
        name,
        "=",
        limit,
        " of ",
        available,
        " batches is none: raise it or give a whole number");
    return batches;
  }
  return std::min(available, static_cast<int64_t>(limit));
}

// Evaluation runs without autograd: InferenceMode by default, NoGradGuard
// when trainer.inference_mode is off.
class NoGradScope {
 public:
  explicit NoGradScope(bool inference) {
    if (inference) {
      inference_.emplace();
    } else {
      no_grad_.emplace();
    }
  }

 private:
  std::optional<c10::InferenceMode> inference_;
  std::optional<at::NoGradGuard> no_grad_;
};

// Batches between validations within an epoch (see val_check_interval).
int64_t val_check_batches(
    double interval, int64_t batches_per_epoch, int64_t accumulate) {
  if (interval == 1.0) {
    return batches_per_epoch;
  }
  if (interval < 1.0) {
    const auto batches = static_cast<int64_t>(
        std::floor(interval * static_cast<double>(batches_per_epoch)));
    // Whole optimizer steps, at least one.
    return std::max(accumulate, batches / accumulate * accumulate);
  }
  const auto batches = static_cast<int64_t>(interval);
  HOTLOOP_CHECK_AS(
      ConfigError,
      batches <= batches_per_epoch,
      "trainer.val_check_interval (",
      batches,
      ") must be at most the number of training batches per epoch (",
      batches_per_epoch,
      ")");
  HOTLOOP_CHECK_AS(
      ConfigError,
      batches % accumulate == 0,
      "trainer.val_check_interval (",
      batches,
      " batches) must be a multiple of trainer.accumulate_grad_batches (",
      accumulate,
      ") so that validation falls between optimizer steps");
  return batches;
}

// What configure_optimizers returned must be usable as it stands.
void check_optimizer_setup(const OptimizerSetup& setup) {
  HOTLOOP_CHECK(
      !setup.optimizers.empty(), "configure_optimizers returned no optimizer");
  std::set<const void*> owned;
  std::set<const torch::optim::Optimizer*> optimizers;
  for (size_t i = 0; i < setup.optimizers.size(); ++i) {
    HOTLOOP_CHECK(
        setup.optimizers[i] != nullptr,
        "configure_optimizers returned a null optimizer (number ",
        i,
        ")");
    optimizers.insert(setup.optimizers[i].get());
    for (const auto& group : setup.optimizers[i]->param_groups()) {
      for (const auto& parameter : group.params()) {
        HOTLOOP_CHECK(
            owned.insert(parameter.unsafeGetTensorImpl()).second,
            "configure_optimizers: a parameter of shape ",
            parameter.sizes(),
            " is in two optimizers (or twice in one); each parameter must "
            "have one optimizer");
      }
    }
  }
  for (const auto& schedule : setup.schedules) {
    HOTLOOP_CHECK(
        schedule.scheduler != nullptr,
        "configure_optimizers returned a null schedule");
    HOTLOOP_CHECK(
        optimizers.count(&schedule.scheduler->optimizer()) > 0,
        "configure_optimizers: the ",
        schedule.scheduler->name(),
        " schedule sets the rates of an optimizer it did not return");
    HOTLOOP_CHECK_AS(
        ConfigError,
        schedule.frequency > 0,
        "the ",
        schedule.scheduler->name(),
        " schedule's frequency must be positive, got ",
        schedule.frequency);
    HOTLOOP_CHECK_AS(
        ConfigError,
        !schedule.scheduler->needs_metric() ||
            schedule.interval == ScheduleInterval::kEpoch,
        "a schedule that watches '",
        schedule.monitor,
        "' steps once per epoch: set lr_scheduler.interval=epoch");
  }
}

} // namespace

/// What one fit works with, alive for its duration.
struct Trainer::FitState {
  Module* module = nullptr;
  data::DataLoader* train = nullptr;
  data::DataLoader* val = nullptr;
  OptimizerSetup setup;
  std::optional<Precision> precision;
  std::unique_ptr<GradScaler> scaler;
  std::vector<at::Tensor> parameters;
  int64_t batches_per_epoch = 0;
  int64_t val_check_batches = 0;
  int64_t limit_val_batches = -1;
  int64_t accumulate = 1;
  std::optional<StopSignalGuard> signals;
  std::optional<log::ProgressBar> bar;
  Clock::time_point start;
  double train_seconds = 0;
  int64_t train_samples = 0;
  bool interrupted = false;
  // The global step of the last validation, so none runs twice.
  int64_t validated_step = -1;
  StepProfile profile;
  // LibTorch's profiler while trace steps run (trainer.profiler=pytorch).
  std::optional<torch::autograd::profiler::RecordProfile> trace;
  int64_t trace_steps_left = 0;
  // The global step this fit started at (after a resume's restore).
  int64_t start_step = 0;
  // The running means of the epoch in progress, for checkpoints.
  MetricCollection* epoch_metrics = nullptr;
  // A mid-epoch checkpoint's running means, for the epoch it resumes.
  std::map<std::string, std::pair<double, double>> resumed_epoch_metrics;
  // Each optimizer's parameters, for clipping.
  std::vector<std::vector<at::Tensor>> optimizer_parameters;
};

namespace {

LoaderFingerprint loader_fingerprint(
    const data::DataLoader& train, int64_t batches_per_epoch) {
  const data::DataLoaderOptions& options = train.options();
  LoaderFingerprint loader;
  loader.seed = options.seed();
  loader.batches_per_epoch = batches_per_epoch;
  loader.batch_size = options.batch_size().value_or(0);
  loader.dataset_size = train.dataset().size();
  loader.shuffle = options.shuffle();
  return loader;
}

// A mid-epoch resume skips the batches trained on before the stop: with
// another loader those are other samples, and the epoch would silently
// repeat some and never see others.
void check_same_loader(
    const std::string& path,
    const LoaderFingerprint& saved,
    const LoaderFingerprint& now) {
  if (saved == now) {
    return;
  }
  std::ostringstream differences;
  auto compare = [&](const char* name, auto was, auto is) {
    if (was != is) {
      differences << (differences.tellp() > 0 ? ", " : "") << name << " " << is
                  << " (was " << was << ")";
    }
  };
  compare("seed", saved.seed, now.seed);
  compare("batch_size", saved.batch_size, now.batch_size);
  compare("dataset size", saved.dataset_size, now.dataset_size);
  compare("batches per epoch", saved.batches_per_epoch, now.batches_per_epoch);
  compare("shuffle", saved.shuffle, now.shuffle);
  throw ConfigError(hotloop::detail::str_cat(
      path,
      ": written mid-epoch, and resuming there needs the training loader it "
      "had; now ",
      differences.str(),
      " - resume with the run's data settings, or from a checkpoint written "
      "at an epoch end"));
}

} // namespace

void seed_everything(uint64_t seed) {
  at::manual_seed(seed);
}

Trainer::Trainer(TrainerOptions options, std::ostream& out)
    : options_(std::move(options)),
      out_(out),
      device_(c10::kCPU),
      reducer_(std::make_shared<Reducer>()) {
  auto check_at_least = [](int64_t value, int64_t min, const char* name) {
    HOTLOOP_CHECK_AS(
        ConfigError,
        value >= min,
        "trainer.",
        name,
        " must be >= ",
        min,
        ", got ",
        value);
  };
  check_at_least(options_.max_epochs(), 1, "max_epochs");
  check_at_least(options_.min_epochs(), 0, "min_epochs");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.max_steps() == -1 || options_.max_steps() > 0,
      "trainer.max_steps must be positive or -1, got ",
      options_.max_steps());
  check_limit(options_.limit_train_batches(), "limit_train_batches", false);
  check_limit(options_.limit_val_batches(), "limit_val_batches", true);
  check_limit(options_.limit_test_batches(), "limit_test_batches", true);
  check_limit(options_.limit_predict_batches(), "limit_predict_batches", true);
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.val_check_interval() > 0 &&
          (options_.val_check_interval() <= 1.0 ||
           options_.val_check_interval() ==
               std::floor(options_.val_check_interval())),
      "trainer.val_check_interval: expected a fraction in (0, 1] or a whole "
      "number of batches, got ",
      options_.val_check_interval());
  check_at_least(
      options_.check_val_every_n_epoch(), 1, "check_val_every_n_epoch");
  check_limit(options_.overfit_batches(), "overfit_batches", true);
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.overfit_batches() >= 0,
      "trainer.overfit_batches must be >= 0, got ",
      options_.overfit_batches());
  check_at_least(
      options_.accumulate_grad_batches(), 1, "accumulate_grad_batches");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.gradient_clip_val() >= 0,
      "trainer.gradient_clip_val must be >= 0, got ",
      options_.gradient_clip_val());
  check_at_least(options_.num_threads(), 0, "num_threads");
  check_at_least(options_.blas_threads(), 0, "blas_threads");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.gradient_clip_algorithm() == "norm" ||
          options_.gradient_clip_algorithm() == "value",
      "trainer.gradient_clip_algorithm: expected norm or value, got '",
      options_.gradient_clip_algorithm(),
      "'");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.max_time() >= 0,
      "trainer.max_time must be >= 0, got ",
      options_.max_time());
  check_at_least(options_.fast_dev_run(), 0, "fast_dev_run");
  check_at_least(options_.num_sanity_val_steps(), -1, "num_sanity_val_steps");
  check_at_least(options_.log_every_n_steps(), 0, "log_every_n_steps");
  check_at_least(
      options_.flush_logs_every_n_steps(), 0, "flush_logs_every_n_steps");
  check_at_least(options_.seed(), -1, "seed");
  check_at_least(options_.profiler_steps(), 1, "profiler_steps");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.profiler().empty() || options_.profiler() == "pytorch",
      "trainer.profiler: expected \"\" or pytorch, got '",
      options_.profiler(),
      "'");
  if (options_.fast_dev_run() > 0) {
    // Lightning's fast_dev_run: n batches of each, once, leaving no files.
    const int64_t n = options_.fast_dev_run();
    options_.max_epochs(1)
        .min_epochs(0)
        .max_steps(-1)
        .max_time(0)
        .limit_train_batches(n)
        .limit_val_batches(n)
        .limit_test_batches(n)
        .limit_predict_batches(n)
        .val_check_interval(1.0)
        .num_sanity_val_steps(0)
        .accumulate_grad_batches(1)
        .default_root_dir("");
  }
  parse_precision_mode(options_.precision()); // names a bad value now
  device_ = resolve_device(options_.accelerator(), options_.devices());
}

Trainer::~Trainer() = default;

Trainer& Trainer::add_callback(std::shared_ptr<Callback> callback) {
  HOTLOOP_CHECK(callback != nullptr, "add_callback: the callback is null");
  callbacks_.push_back(std::move(callback));
  return *this;
}

Trainer& Trainer::add_logger(std::shared_ptr<log::Logger> logger) {
  HOTLOOP_CHECK(logger != nullptr, "add_logger: the logger is null");
  loggers_.push_back(std::move(logger));
  return *this;
}

Trainer& Trainer::set_hyperparams(std::map<std::string, std::string> params) {
  hyperparams_ = std::move(params);
  return *this;
}

Trainer& Trainer::set_reducer(std::shared_ptr<Reducer> reducer) {
  HOTLOOP_CHECK(reducer != nullptr, "set_reducer: the reducer is null");
  reducer_ = std::move(reducer);
  return *this;
}

const std::string& Trainer::log_dir() {
  // Only the process that writes files gets a run folder.
  if (log_dir_.empty() && !options_.default_root_dir().empty() &&
      reducer_->is_global_zero()) {
    log_dir_ = create_version_dir(options_.default_root_dir(), options_.name());
  }
  return log_dir_;
}

std::vector<torch::optim::Optimizer*> Trainer::optimizers() {
  std::vector<torch::optim::Optimizer*> out;
  if (fit_ != nullptr) {
    for (const auto& optimizer : fit_->setup.optimizers) {
      out.push_back(optimizer.get());
    }
  }
  return out;
}

torch::optim::Optimizer* Trainer::optimizer() {
  return fit_ == nullptr || fit_->setup.optimizers.empty()
             ? nullptr
             : fit_->setup.optimizers.front().get();
}

const std::vector<ScheduleConfig>& Trainer::lr_schedules() const {
  static const std::vector<ScheduleConfig> kNone;
  return fit_ == nullptr ? kNone : fit_->setup.schedules;
}

optim::LRScheduler* Trainer::lr_scheduler() {
  const auto& schedules = lr_schedules();
  return schedules.empty() ? nullptr : schedules.front().scheduler.get();
}

ScheduleInterval Trainer::lr_scheduler_interval() const {
  const auto& schedules = lr_schedules();
  return schedules.empty() ? ScheduleInterval::kStep
                           : schedules.front().interval;
}

template <typename Hook>
void Trainer::each_callback(Hook&& hook) {
  for (const auto& callback : active_callbacks_) {
    hook(*callback);
  }
}

void Trainer::save_checkpoint(const std::string& path) {
  HOTLOOP_CHECK(
      fit_ != nullptr,
      "Trainer::save_checkpoint('",
      path,
      "'): no fit is running");
  if (!reducer_->is_global_zero()) {
    return;
  }
  nlohmann::json states = nlohmann::json::object();
  for (const auto& callback : active_callbacks_) {
    nlohmann::json state = callback->state_dict();
    if (!state.is_null()) {
      states[callback->state_key()] = std::move(state);
    }
  }
  CheckpointState checkpoint;
  checkpoint.optimizers = optimizers();
  for (const auto& schedule : fit_->setup.schedules) {
    checkpoint.schedulers.push_back(schedule.scheduler.get());
  }
  checkpoint.scaler = fit_->scaler.get();
  checkpoint.progress = progress_;
  checkpoint.callbacks = states.empty() ? std::string() : states.dump();
  if (fit_->epoch_metrics != nullptr && progress_.epoch_batches > 0) {
    checkpoint.loop.epoch_metrics = fit_->epoch_metrics->state();
  }
  checkpoint.loop.callback_metrics = callback_metrics_;
  checkpoint.loader = loader_fingerprint(*fit_->train, fit_->batches_per_epoch);
  train::save_checkpoint(path, *fit_->module, checkpoint);
  last_checkpoint_ = path;
}

void Trainer::log_metrics(const std::map<std::string, double>& metrics) {
  // Buffered, so that everything logged for one step (the loss, the
  // learning rate, validation metrics) becomes one record.
  for (const auto& [name, value] : metrics) {
    logged_metrics_[name] = value;
    pending_logs_[name] = value;
  }
}

void Trainer::prepare_callbacks(const std::string& run_dir) {
  active_callbacks_.clear();
  bool has_checkpoint = false;
  bool has_timer = false;
  std::set<std::string> keys;
  for (const auto& callback : callbacks_) {
    const bool is_checkpoint =
        dynamic_cast<ModelCheckpoint*>(callback.get()) != nullptr;
    has_checkpoint = has_checkpoint || is_checkpoint;
    has_timer = has_timer || dynamic_cast<Timer*>(callback.get()) != nullptr;
    if (options_.fast_dev_run() > 0 &&
        (is_checkpoint ||
         dynamic_cast<EarlyStopping*>(callback.get()) != nullptr)) {
      // Lightning's fast_dev_run turns off checkpointing and early stopping.
      continue;
    }
    if (is_checkpoint && !options_.enable_checkpointing()) {
      continue;
    }
    active_callbacks_.push_back(callback);
  }
  if (options_.enable_checkpointing() && !has_checkpoint && !run_dir.empty()) {
    active_callbacks_.push_back(std::make_shared<ModelCheckpoint>(
        ModelCheckpointOptions().save_last(true)));
  }
  if (options_.max_time() > 0 && !has_timer) {
    active_callbacks_.push_back(std::make_shared<Timer>(
        options_.max_time(), "step", options_.enable_progress_bar()));
  }
  // Checkpoints run last among the callbacks, as in Lightning, so that
  // what they write holds the other callbacks' state after the same hook
  // (say, EarlyStopping's count after this validation).
  std::stable_partition(
      active_callbacks_.begin(),
      active_callbacks_.end(),
      [](const std::shared_ptr<Callback>& callback) {
        return dynamic_cast<ModelCheckpoint*>(callback.get()) == nullptr;
      });
  for (const auto& callback : active_callbacks_) {
    HOTLOOP_CHECK_AS(
        ConfigError,
        keys.insert(callback->state_key()).second,
        "two callbacks share the state key '",
        callback->state_key(),
        "': give one of them its own state_key()");
  }
}

void Trainer::prepare_module(Module& module) {
  module.to(device_);
  if (options_.channels_last()) {
    at::NoGradGuard no_grad;
    for (at::Tensor parameter : module.parameters()) {
      if (parameter.dim() == 4) {
        parameter.set_data(
            parameter.contiguous(at::MemoryFormat::ChannelsLast));
      }
    }
  }
}

data::Batch Trainer::prepare_batch(
    const Precision& precision, const data::Batch& batch) const {
  at::Tensor input = batch.input;
  at::Tensor target = batch.target;
  if (input.defined() && input.device() != device_) {
    // Pinned host memory makes these copies asynchronous.
    input = input.to(device_, /*non_blocking=*/true);
  }
  if (target.defined() && target.device() != device_) {
    target = target.to(device_, /*non_blocking=*/true);
  }
  if (options_.channels_last() && input.dim() == 4) {
    input = input.contiguous(at::MemoryFormat::ChannelsLast);
  }
  return data::Batch{precision.convert_input(input), target};
}

Precision Trainer::precision_for(Module& module) const {
  return Precision(parse_precision_mode(options_.precision()), device_);
}

FitResult Trainer::fit(
    Module& module,
    data::DataLoader& train,
    data::DataLoader* val,
    const std::string& ckpt_path) {
  FitState state;
  state.module = &module;
  state.train = &train;
  state.val = val;
  fit_ = &state;
  try {
    FitResult result = run_fit(state, ckpt_path);
    fit_ = nullptr;
    return result;
  } catch (const std::exception& error) {
    for (const auto& callback : active_callbacks_) {
      try {
        callback->on_exception(*this, module, error);
      } catch (...) {
        // The original error is the one to report.
      }
    }
    try {
      // What was logged before the error is kept.
      flush_logs();
      if (options_.fast_dev_run() == 0 && reducer_->is_global_zero()) {
        for (const auto& logger : loggers_) {
          if (!hyperparams_.empty()) {
            logger->log_hyperparams(hyperparams_, callback_metrics_);
          }
          logger->finalize("failed");
        }
      }
    } catch (...) {
    }
    fit_ = nullptr;
    throw;
  }
}

FitResult Trainer::run_fit(FitState& state, const std::string& ckpt_path) {
  Module& module = *state.module;
  data::DataLoader& train = *state.train;
  state.start = Clock::now();
  const int threads = apply_runtime_settings(train.options().num_workers());

  const double overfit = options_.overfit_batches();
  state.batches_per_epoch = resolve_limit(
      overfit > 0 ? overfit : options_.limit_train_batches(),
      train.num_batches(),
      overfit > 0 ? "overfit_batches" : "limit_train_batches");
  HOTLOOP_CHECK_AS(
      ConfigError,
      state.batches_per_epoch > 0,
      "the training set gives no batch (",
      train.dataset().size(),
      " samples, ",
      train.num_batches(),
      " batches per epoch)");
  state.accumulate = options_.accumulate_grad_batches();
  state.val_check_batches = val_check_batches(
      options_.val_check_interval(), state.batches_per_epoch, state.accumulate);
  state.limit_val_batches =
      state.val == nullptr
          ? 0
          : resolve_limit(
                overfit > 0 ? overfit : options_.limit_val_batches(),
                state.val->num_batches(),
                overfit > 0 ? "overfit_batches" : "limit_val_batches");
  has_validation_ = state.val != nullptr && state.limit_val_batches != 0;

  FitPlan plan;
  plan.steps_per_epoch =
      (state.batches_per_epoch + state.accumulate - 1) / state.accumulate;
  plan.max_epochs = options_.max_epochs();
  plan.total_steps = plan.steps_per_epoch * plan.max_epochs;
  if (options_.max_steps() > 0) {
    plan.total_steps = std::min(plan.total_steps, options_.max_steps());
  }
  prepare_module(module);
  state.setup = module.configure_optimizers(plan);
  check_optimizer_setup(state.setup);
  for (const auto& optimizer : state.setup.optimizers) {
    std::vector<at::Tensor> parameters;
    for (const auto& group : optimizer->param_groups()) {
      parameters.insert(
          parameters.end(), group.params().begin(), group.params().end());
    }
    state.optimizer_parameters.push_back(std::move(parameters));
  }
  state.precision.emplace(precision_for(module));
  state.precision->convert_module(module);
  state.scaler = std::make_unique<GradScaler>(
      GradScalerOptions().enabled(state.precision->needs_scaler()));
  state.parameters = module.parameters();

  progress_ = TrainingProgress{};
  current_epoch_ = 0;
  callback_metrics_.clear();
  should_stop_ = false;
  min_epochs_noted_ = false;
  pending_logs_.clear();
  last_checkpoint_.clear();
  const std::string& run_dir = log_dir();
  prepare_callbacks(run_dir);
  each_callback([&](Callback& c) { c.setup(*this, module); });
  if (!ckpt_path.empty()) {
    restore(state, ckpt_path);
  }
  state.start_step = progress_.global_step;
  if (options_.enable_progress_bar()) {
    out_ << "fit: " << train.dataset().size() << " training samples, "
         << state.batches_per_epoch << " batches/epoch, on " << device_ << ", "
         << threads << " intra-op threads, " << train.options().num_workers()
         << " loader threads" << (run_dir.empty() ? "" : ", run folder ")
         << run_dir << "\n";
    state.bar.emplace(
        out_,
        log::ProgressBar::is_terminal(out_),
        options_.log_every_n_steps());
  }
  for (const auto& optimizer : state.setup.optimizers) {
    zero_grad(*optimizer);
  }
  if (options_.handle_signals()) {
    state.signals.emplace();
  }
  {
    // Neither the sanity check nor the summary may move the generators:
    // training starts from the seeded (or restored) state either way.
    const RngStates rng = get_rng_states();
    if (has_validation_ && options_.num_sanity_val_steps() != 0) {
      // A broken validation_step fails now, not after the first epoch.
      sanity_checking_ = true;
      const int64_t sanity = options_.num_sanity_val_steps();
      evaluate(
          module,
          *state.val,
          Stage::kValidate,
          *state.precision,
          sanity < 0 ? state.limit_val_batches
                     : limited(sanity, state.limit_val_batches));
      sanity_checking_ = false;
    }
    model_summary_ = summarize(module, train, *state.precision);
    set_rng_states(rng);
  }
  if (options_.enable_progress_bar()) {
    model_summary_.print(out_);
  }
  state.profile.flops_per_sample = 3 * module.flops_per_sample();
  state.profile.asynchronous = !device_.is_cpu();
  each_callback([&](Callback& c) { c.on_fit_start(*this, module); });
  bool stop = false;
  for (int64_t epoch = progress_.epoch; epoch < options_.max_epochs() && !stop;
       ++epoch) {
    stop = train_epoch(state, epoch);
  }
  flush_logs();
  state.trace.reset(); // writes the trace when the fit ended inside it
  each_callback([&](Callback& c) { c.on_fit_end(*this, module); });

  FitResult result;
  result.metrics = callback_metrics_;
  result.epochs = progress_.epoch;
  result.steps = progress_.global_step;
  result.interrupted = state.interrupted;
  result.train_samples_per_s =
      state.train_seconds > 0 ? state.train_samples / state.train_seconds : 0;
  result.wall_s = seconds_since(state.start);
  result.checkpoint_path = last_checkpoint_;
  for (const auto& callback : active_callbacks_) {
    const auto* checkpoint = dynamic_cast<ModelCheckpoint*>(callback.get());
    if (checkpoint == nullptr) {
      continue;
    }
    if (!checkpoint->last_model_path().empty()) {
      result.checkpoint_path = checkpoint->last_model_path();
    }
    if (!checkpoint->options().monitor().empty()) {
      result.best_model_path = checkpoint->best_model_path();
    }
    break;
  }
  if (state.profile.flops_per_sample > 0 && state.profile.steps > 0) {
    state.profile.peak_flops =
        measure_peak_flops(device_, state.precision->compute_dtype());
  }
  result.profile = state.profile;
  const ProfileContext context = profile_context(train);
  if (options_.enable_progress_bar() && state.profile.steps > 0) {
    state.profile.print(out_, context);
  }
  write_summary(result, context);
  if (options_.fast_dev_run() == 0 && reducer_->is_global_zero()) {
    for (const auto& logger : loggers_) {
      if (!hyperparams_.empty()) {
        logger->log_hyperparams(hyperparams_, result.metrics);
      }
      logger->finalize(state.interrupted ? "interrupted" : "success");
    }
  }
  return result;
}

void Trainer::restore(FitState& state, const std::string& ckpt_path) {
  CheckpointState checkpoint;
  checkpoint.optimizers = optimizers();
  for (const auto& schedule : state.setup.schedules) {
    checkpoint.schedulers.push_back(schedule.scheduler.get());
  }
  checkpoint.scaler = state.scaler.get();
  progress_ = load_checkpoint(ckpt_path, *state.module, &checkpoint);
  if (!checkpoint.callbacks.empty()) {
    const nlohmann::json states = nlohmann::json::parse(checkpoint.callbacks);
    for (const auto& callback : active_callbacks_) {
      const auto found = states.find(callback->state_key());
      if (found != states.end()) {
        callback->load_state_dict(*found);
      }
    }
  }
  if (progress_.epoch_batches > 0 && checkpoint.loader.known()) {
    check_same_loader(
        ckpt_path,
        checkpoint.loader,
        loader_fingerprint(*state.train, state.batches_per_epoch));
  }
  callback_metrics_ = checkpoint.loop.callback_metrics;
  state.resumed_epoch_metrics = checkpoint.loop.epoch_metrics;
  out_ << "resumed from " << ckpt_path << " at epoch " << progress_.epoch
       << ", batch " << progress_.epoch_batches << " (step "
       << progress_.global_step << ")\n";
}

bool Trainer::train_epoch(FitState& state, int64_t epoch) {
  Module& module = *state.module;
  data::DataLoader& train = *state.train;
  const Precision& precision = *state.precision;
  GradScaler& scaler = *state.scaler;
  const int64_t accumulate = state.accumulate;
  const int64_t batches = state.batches_per_epoch;
  const int64_t max_epochs = options_.max_epochs();
  const int64_t log_every = options_.log_every_n_steps();
  const auto epoch_start = Clock::now();

  current_epoch_ = epoch;
  module.train();
  MetricCollection metrics;
  state.epoch_metrics = &metrics;
  struct Forget {
    MetricCollection*& metrics;
    ~Forget() {
      metrics = nullptr;
    }
  } forget_metrics{state.epoch_metrics};
  log::StepTimes phases;
  const bool validate_this_epoch =
      has_validation_ &&
      ((epoch + 1) % options_.check_val_every_n_epoch() == 0 ||
       epoch + 1 == max_epochs);
  if (state.bar) {
    state.bar->start_epoch(epoch + 1, max_epochs, batches);
  }
  // overfit_batches trains on the same batches every epoch: epoch 0's.
  const int64_t loader_epoch = options_.overfit_batches() > 0 ? 0 : epoch;
  train.set_epoch(loader_epoch);
  int64_t batch_idx = 0;
  if (progress_.epoch_batches > 0) {
    // Resuming mid-epoch: the loader rebuilds this epoch's order and skips
    // the batches already trained on.
    batch_idx = progress_.epoch_batches;
    train.load_state_dict({loader_epoch, batch_idx});
    metrics.load_state(state.resumed_epoch_metrics);
  }
  state.resumed_epoch_metrics.clear();
  each_callback([&](Callback& c) { c.on_train_epoch_start(*this, module); });
  flush_logs();

  int64_t samples = 0;
  bool stop = false;
  StepProfile& profile = state.profile;
  // A synced step waits for the device at each phase boundary, so that its
  // phase times are the device's, not when the host queued the work.
  bool synced = false;
  auto sync = [&] {
    if (synced) {
      synchronize_device(device_);
    }
  };
  auto record_synced = [&](const char* phase, double seconds) {
    if (synced) {
      profile.synced[phase] += seconds;
    }
  };
  auto wait_start = Clock::now();
  for (auto it = train.begin(); it != train.end() && batch_idx < batches;
       ++it) {
    // One straight line: batch -> forward under autocast -> loss /
    // accumulation -> backward (scaled) -> on the last micro-batch:
    // unscale, clip, step, update the scale, zero grads (set to none),
    // schedule.
    if (batch_idx % accumulate == 0) {
      trace_steps(state);
      synced = progress_.global_step % kSyncedStepInterval ==
               kSyncedStepInterval / 2;
    }
    const data::Batch& loaded = *it;
    const auto transfer_start = Clock::now();
    const data::Batch batch = prepare_batch(precision, loaded);
    sync();
    const auto compute_start = Clock::now();
    profile.data += seconds_between(wait_start, transfer_start);
    profile.h2d += seconds_between(transfer_start, compute_start);
    record_synced("data", seconds_between(wait_start, transfer_start));
    record_synced("h2d", seconds_between(transfer_start, compute_start));
    phases.data += seconds_between(wait_start, transfer_start);
    // Hooks inside the step (an input grid, gradient histograms) are
    // logging time, not the forward's or the optimizer's.
    const double start_hooks = timed([&] {
      each_callback([&](Callback& c) {
        c.on_train_batch_start(*this, module, batch, batch_idx);
      });
    });
    at::Tensor loss;
    {
      const AutocastGuard autocast = precision.autocast();
      loss = module.training_step(batch, batch_idx, metrics);
    }
    const at::Tensor loss_value = loss.detach();
    if (accumulate > 1) {
      loss = loss / static_cast<double>(accumulate);
    }
    sync();
    const auto backward_start = Clock::now();
    (scaler.is_enabled() ? scaler.scale(loss) : loss).backward();
    sync();
    const auto optimizer_start = Clock::now();
    const double forward_seconds =
        seconds_between(compute_start, backward_start) - start_hooks;
    profile.forward += forward_seconds;
    profile.backward += seconds_between(backward_start, optimizer_start);
    record_synced("forward", forward_seconds);
    record_synced("backward", seconds_between(backward_start, optimizer_start));
    phases.compute +=
        seconds_between(transfer_start, optimizer_start) - start_hooks;
    phases.optimizer += start_hooks; // the bar's "opt" holds the logging
    double optimizer_hooks = 0;
    samples += batch.size();
    progress_.epoch_batches = ++batch_idx;
    const bool step_now = batch_idx % accumulate == 0 || batch_idx == batches;
    if (step_now) {
      for (at::Tensor& parameter : state.parameters) {
        if (parameter.grad().defined()) {
          reducer_->add(parameter.mutable_grad());
        }
      }
      reducer_->finalize(); // gradients now agree across processes
      const auto& optimizers = state.setup.optimizers;
      for (size_t i = 0; i < optimizers.size(); ++i) {
        torch::optim::Optimizer& optimizer = *optimizers[i];
        if (scaler.is_enabled()) {
          scaler.unscale_(optimizer); // callbacks and clipping see true grads
        }
        optimizer_hooks += timed([&] {
          each_callback([&](Callback& c) {
            c.on_before_optimizer_step(*this, module, optimizer);
          });
        });
        clip_gradients(state.optimizer_parameters[i]);
        if (scaler.is_enabled()) {
          scaler.step(optimizer); // skipped on inf/NaN gradients
        } else {
          optimizer.step();
        }
      }
      if (scaler.is_enabled()) {
        scaler.update(); // one scale for all optimizers
      }
      for (const auto& optimizer : optimizers) {
        zero_grad(*optimizer);
      }
      ++progress_.global_step;
      step_schedules(state, ScheduleInterval::kStep, progress_.global_step);
      ++profile.steps;
      profile.synced_steps += synced ? 1 : 0;
    }
    sync();
    const auto logging_start = Clock::now();
    const double optimizer_seconds =
        seconds_between(optimizer_start, logging_start) - optimizer_hooks;
    profile.optimizer += optimizer_seconds;
    record_synced("optimizer", optimizer_seconds);
    const double validation_before = profile.validation;
    each_callback([&](Callback& c) {
      c.on_train_batch_end(*this, module, loss_value, batch, batch_idx - 1);
    });
    if (step_now) {
      if (log_every > 0 && progress_.global_step % log_every == 0) {
        std::map<std::string, double> step_metrics{
            {"epoch", static_cast<double>(epoch)}};
        for (const auto& [name, value] : metrics.last()) {
          step_metrics[name + "_step"] = value;
        }
        log_metrics(step_metrics);
      }
      if (options_.max_steps() > 0 &&
          progress_.global_step >= options_.max_steps()) {
        stop = true;
      }
      if (state.signals && StopSignalGuard::received() != 0) {
        interrupt(state);
        break;
      }
      if (!stop && validate_this_epoch && batch_idx < batches &&
          batch_idx % state.val_check_batches == 0) {
        run_validation(state, /*epoch_end=*/false);
      }
      flush_logs();
      const int64_t flush_every = options_.flush_logs_every_n_steps();
      if (flush_every > 0 && progress_.global_step % flush_every == 0) {
        flush_loggers();
      }
      stop = stop || stop_requested(epoch);
    }
    if (state.bar && state.bar->due(batch_idx)) {
      // Reading the loss may wait for the device: logging time, not data.
      state.bar->update(
          batch_idx,
          samples,
          metrics.get("train_loss"),
          optimizer()->param_groups()[0].options().get_lr(),
          phases);
    }
    // A synced step starts on an idle device.
    const bool next_synced =
        step_now &&
        progress_.global_step % kSyncedStepInterval == kSyncedStepInterval / 2;
    // The warm-up steps end here; the work they queued counts to them.
    const bool warmup_ends =
        step_now && progress_.global_step == state.start_step + kWarmupSteps;
    if (synced || next_synced || warmup_ends) {
      synchronize_device(device_);
    }
    wait_start = Clock::now();
    const double validation_seconds = profile.validation - validation_before;
    const double logging_seconds = seconds_between(logging_start, wait_start) -
                                   validation_seconds + start_hooks +
                                   optimizer_hooks;
    profile.logging += logging_seconds;
    record_synced("logging", logging_seconds);
    phases.optimizer +=
        seconds_between(optimizer_start, wait_start) - validation_seconds;
    if (warmup_ends) {
      profile.warmup_seconds = profile.step_seconds();
      profile.warmup_samples = profile.samples + samples;
    }
    if (stop) {
      break;
    }
  }
  if (state.bar) {
    state.bar->end_epoch();
  }
  {
    // Work still queued on an asynchronous device belongs to this epoch's
    // steps (the last ones): without waiting for it the rate would be the
    // host's queueing rate.
    const auto sync_start = Clock::now();
    synchronize_device(device_);
    const double queued = seconds_since(sync_start);
    profile.optimizer += queued;
    phases.compute += queued;
  }
  state.train_seconds += phases.total();
  state.train_samples += samples;
  profile.samples += samples;
  if (state.interrupted) {
    return true;
  }
  const bool complete = batch_idx >= batches;
  if (complete) {
    progress_.epoch = epoch + 1;
    progress_.epoch_batches = 0;
  }
  std::map<std::string, double> epoch_metrics = metrics.compute();
  for (const auto& [name, value] : epoch_metrics) {
    callback_metrics_[name] = value;
  }
  // The epoch's schedule steps come before the checkpoints written at its
  // end (after validation, or at on_train_epoch_end), so that a resume from
  // one starts the next epoch at the rates the uninterrupted run has.
  if (complete) {
    step_schedules(state, ScheduleInterval::kEpoch, epoch + 1);
  }
  const bool last = stop || epoch + 1 == max_epochs;
  if (has_validation_ && (validate_this_epoch || last) &&
      state.validated_step != progress_.global_step) {
    run_validation(state, /*epoch_end=*/complete);
  } else if (complete) {
    step_metric_schedules(state, epoch + 1);
  }
  epoch_metrics["epoch"] = static_cast<double>(epoch);
  // Seconds since the fit started, for time-to-accuracy curves.
  epoch_metrics["elapsed_s"] = seconds_since(state.start);
  log_metrics(epoch_metrics);
  each_callback([&](Callback& c) { c.on_train_epoch_end(*this, module); });
  flush_logs();
  flush_loggers();
  if (options_.enable_progress_bar()) {
    print_epoch_line(samples, phases, seconds_since(epoch_start));
  }
  if (state.signals && StopSignalGuard::received() != 0) {
    interrupt(state);
    return true;
  }
  return stop || stop_requested(epoch + (complete ? 1 : 0));
}

bool Trainer::stop_requested(int64_t completed_epochs) {
  if (!should_stop_) {
    return false;
  }
  if (completed_epochs >= options_.min_epochs()) {
    return true;
  }
  if (options_.enable_progress_bar() && !min_epochs_noted_) {
    out_ << "a stop was requested, but trainer.min_epochs="
         << options_.min_epochs() << " is not reached; training continues\n";
  }
  min_epochs_noted_ = true;
  should_stop_ = false;
  return false;
}

void Trainer::interrupt(FitState& state) {
  state.interrupted = true;
  flush_logs();
  std::string saved;
  for (const auto& callback : active_callbacks_) {
    if (auto* checkpoint = dynamic_cast<ModelCheckpoint*>(callback.get())) {
      saved = checkpoint->save_last(*this);
      break;
    }
  }
  if (saved.empty() && !log_dir_.empty()) {
    // Checkpointing is off, but a stopped run must still be resumable.
    const std::filesystem::path folder =
        std::filesystem::path(log_dir_) / "checkpoints";
    std::filesystem::create_directories(folder);
    saved = (folder / "last.ckpt").string();
    save_checkpoint(saved);
  }
  flush_loggers();
  out_ << "interrupted by signal " << StopSignalGuard::received()
       << " in epoch " << current_epoch_ + 1 << " after batch "
       << progress_.epoch_batches << " (step " << progress_.global_step
       << "); ";
  if (saved.empty()) {
    out_ << "no run folder, so no checkpoint to resume from\n";
  } else {
    out_ << "resume from " << saved
         << " (Trainer::fit's ckpt_path, or hotloop fit --ckpt_path)\n";
  }
}

void Trainer::zero_grad(torch::optim::Optimizer& optimizer) const {
  if (options_.zero_grad_set_to_none()) {
    compat::zero_grad_set_to_none(optimizer);
  } else {
    for (auto& group : optimizer.param_groups()) {
      for (auto& parameter : group.params()) {
        if (parameter.mutable_grad().defined()) {
          parameter.mutable_grad().detach_().zero_();
        }
      }
    }
  }
}

void Trainer::trace_steps(FitState& state) {
  // Skips this fit's first two steps (first-call allocations and algorithm
  // searches; a resumed fit's too), then records profiler_steps whole
  // optimizer steps.
  if (options_.profiler() != "pytorch" || log_dir_.empty()) {
    return;
  }
  if (!state.trace && state.trace_steps_left == 0 &&
      progress_.global_step == state.start_step + 2) {
    state.trace_steps_left = options_.profiler_steps();
    state.trace.emplace(
        (std::filesystem::path(log_dir_) / "trace.json").string());
  } else if (state.trace && --state.trace_steps_left == 0) {
    state.trace.reset(); // writes the file
    if (options_.enable_progress_bar()) {
      out_ << "profiler trace written to " << log_dir_ << "/trace.json\n";
    }
  }
}

int Trainer::apply_runtime_settings(int64_t num_workers) {
  if (options_.seed() >= 0) {
    seed_everything(static_cast<uint64_t>(options_.seed()));
  }
  const int threads = configure_intra_op_threads(
      static_cast<int>(options_.num_threads()), static_cast<int>(num_workers));
  if (options_.blas_threads() > 0) {
    set_blas_threads(static_cast<int>(options_.blas_threads()));
  }
  torch::autograd::AnomalyMode::set_enabled(options_.detect_anomaly());
  if (options_.deterministic() && device_.is_cuda() &&
      std::getenv("CUBLAS_WORKSPACE_CONFIG") == nullptr) {
    // cuBLAS is deterministic only with a fixed workspace; without this,
    // deterministic mode makes the first matmul throw. It must be set
    // before cuBLAS starts, as Lightning does.
    ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  }
  at::globalContext().setDeterministicAlgorithms(
      options_.deterministic(), /*warn_only=*/false);
  at::globalContext().setDeterministicCuDNN(options_.deterministic());
  // Benchmarking picks algorithms by timing, which may differ run to run.
  at::globalContext().setBenchmarkCuDNN(
      options_.benchmark() && !options_.deterministic());
  if (options_.retain_host_memory()) {
    retain_freed_host_memory();
  }
  return threads;
}

void Trainer::clip_gradients(const std::vector<at::Tensor>& parameters) const {
  if (options_.gradient_clip_val() <= 0) {
    return;
  }
  if (options_.gradient_clip_algorithm() == "value") {
    torch::nn::utils::clip_grad_value_(
        parameters, options_.gradient_clip_val());
  } else {
    // Ours, not LibTorch's: the same arithmetic without reading the norm
    // back, which would make the host wait for the device every step.
    optim::clip_grad_norm_(parameters, options_.gradient_clip_val());
  }
}

void Trainer::step_schedules(
    FitState& state, ScheduleInterval interval, int64_t count) {
  for (const ScheduleConfig& schedule : state.setup.schedules) {
    if (schedule.interval == interval && !schedule.scheduler->needs_metric() &&
        count % schedule.frequency == 0) {
      schedule.scheduler->step();
    }
  }
}

void Trainer::step_metric_schedules(FitState& state, int64_t epochs) {
  for (const ScheduleConfig& schedule : state.setup.schedules) {
    if (!schedule.scheduler->needs_metric() ||
        epochs % schedule.frequency != 0) {
      continue;
    }
    const auto found = callback_metrics_.find(schedule.monitor);
    HOTLOOP_CHECK_AS(
        ConfigError,
        found != callback_metrics_.end(),
        "the lr schedule watches '",
        schedule.monitor,
        "', which no step logged this epoch (is validation off?)");
    schedule.scheduler->step(found->second);
  }
}

void Trainer::run_validation(FitState& state, bool epoch_end) {
  Module& module = *state.module;
  const auto start = Clock::now();
  each_callback([&](Callback& c) { c.on_validation_start(*this, module); });
  const auto metrics = evaluate(
      module,
      *state.val,
      Stage::kValidate,
      *state.precision,
      state.limit_val_batches);
  for (const auto& [name, value] : metrics) {
    callback_metrics_[name] = value;
  }
  std::map<std::string, double> logged = metrics;
  logged["epoch"] = static_cast<double>(current_epoch_);
  log_metrics(logged);
  state.validated_step = progress_.global_step;
  if (epoch_end) {
    step_metric_schedules(state, current_epoch_ + 1);
  }
  each_callback([&](Callback& c) { c.on_validation_end(*this, module); });
  state.profile.validation += seconds_since(start);
}

void Trainer::flush_logs() {
  if (pending_logs_.empty()) {
    return;
  }
  if (options_.fast_dev_run() == 0 && reducer_->is_global_zero()) {
    for (const auto& logger : loggers_) {
      logger->log_metrics(pending_logs_, progress_.global_step);
    }
  }
  pending_logs_.clear();
}

void Trainer::flush_loggers() {
  if (reducer_->is_global_zero()) {
    for (const auto& logger : loggers_) {
      logger->flush();
    }
  }
}

void Trainer::print_epoch_line(
    int64_t samples, const log::StepTimes& phases, double seconds) {
  out_ << "epoch " << current_epoch_ + 1 << "/" << options_.max_epochs();
  out_ << std::fixed << std::setprecision(4);
  for (const auto& [name, value] : callback_metrics_) {
    out_ << "  " << name << " " << value;
  }
  const double busy = std::max(phases.total(), 1e-9);
  out_ << std::setprecision(0) << "  " << samples / busy << " samples/s"
       << std::setprecision(1) << "  " << seconds << "s (data "
       << std::setprecision(0) << 100 * phases.data / busy << "%)"
       << std::defaultfloat << "\n";
  out_.flush();
}

std::map<std::string, double> Trainer::evaluate(
    Module& module,
    data::DataLoader& loader,
    Stage stage,
    const Precision& precision,
    int64_t limit_batches) {
  const bool was_training = module.is_training();
  module.eval();
  MetricCollection metrics;
  {
    const NoGradScope no_grad(options_.inference_mode());
    const int64_t limit = limited(loader.num_batches(), limit_batches);
    int64_t batch_idx = 0;
    loader.set_epoch(0); // evaluation sees the same order every time
    for (auto it = loader.begin(); it != loader.end() && batch_idx < limit;
         ++it, ++batch_idx) {
      const data::Batch batch = prepare_batch(precision, *it);
      const AutocastGuard autocast = precision.autocast();
      if (stage == Stage::kValidate) {
        module.validation_step(batch, batch_idx, metrics);
      } else {
        module.test_step(batch, batch_idx, metrics);
      }
    }
  }
  module.train(was_training);
  return metrics.compute();
}

Precision Trainer::prepare_evaluation(
    Module& module,
    const data::DataLoader& loader,
    const std::string& ckpt_path) {
  apply_runtime_settings(loader.options().num_workers());
  prepare_module(module);
  if (!ckpt_path.empty()) {
    load_checkpoint(ckpt_path, module);
  }
  Precision precision = precision_for(module);
  precision.convert_module(module);
  return precision;
}

std::map<std::string, double> Trainer::validate(
    Module& module, data::DataLoader& loader, const std::string& ckpt_path) {
  const Precision precision = prepare_evaluation(module, loader, ckpt_path);
  for (const auto& callback : callbacks_) {
    callback->on_validation_start(*this, module);
  }
  callback_metrics_ = evaluate(
      module,
      loader,
      Stage::kValidate,
      precision,
      resolve_limit(
          options_.limit_val_batches(),
          loader.num_batches(),
          "limit_val_batches"));
  for (const auto& callback : callbacks_) {
    callback->on_validation_end(*this, module);
  }
  return callback_metrics_;
}

std::map<std::string, double> Trainer::test(
    Module& module, data::DataLoader& loader, const std::string& ckpt_path) {
  const Precision precision = prepare_evaluation(module, loader, ckpt_path);
  for (const auto& callback : callbacks_) {
    callback->on_test_start(*this, module);
  }
  callback_metrics_ = evaluate(
      module,
      loader,
      Stage::kTest,
      precision,
      resolve_limit(
          options_.limit_test_batches(),
          loader.num_batches(),
          "limit_test_batches"));
  for (const auto& callback : callbacks_) {
    callback->on_test_end(*this, module);
  }
  return callback_metrics_;
}

std::vector<at::Tensor> Trainer::predict(
    Module& module, data::DataLoader& loader, const std::string& ckpt_path) {
  const Precision precision = prepare_evaluation(module, loader, ckpt_path);
  const bool was_training = module.is_training();
  module.eval();
  std::vector<at::Tensor> outputs;
  {
    const NoGradScope no_grad(options_.inference_mode());
    const int64_t limit = resolve_limit(
        options_.limit_predict_batches(),
        loader.num_batches(),
        "limit_predict_batches");
    int64_t batch_idx = 0;
    loader.set_epoch(0);
    for (auto it = loader.begin(); it != loader.end() && batch_idx < limit;
         ++it, ++batch_idx) {
      const data::Batch batch = prepare_batch(precision, *it);
      const AutocastGuard autocast = precision.autocast();
      // A result that views the batch keeps that buffer out of the
      // loader's pool, so no copy is needed.
      outputs.push_back(module.predict_step(batch, batch_idx));
    }
  }
  module.train(was_training);
  return outputs;
}

ProfileContext Trainer::profile_context(const data::DataLoader& train) const {
  ProfileContext context;
  context.num_workers = train.options().num_workers();
  context.pin_memory = train.options().pin_memory();
  context.cuda = device_.is_cuda();
  context.log_every_n_steps = options_.log_every_n_steps();
  context.precision = options_.precision();
  context.channels_last = options_.channels_last();
  return context;
}

log::ModelSummary Trainer::summarize(
    Module& module, data::DataLoader& train, const Precision& precision) {
  // One sample through predict_step gives the layers' output shapes when
  // the model is a chain of Sequentials; any failure just leaves them out.
  at::Tensor example;
  try {
    example = prepare_batch(
                  precision,
                  data::Batch{
                      train.dataset().get(0, data::SampleContext{}).input,
                      at::Tensor()})
                  .input.unsqueeze(0);
  } catch (const std::exception&) {
    example = at::Tensor();
  }
  return log::summarize_model(
      module, /*max_depth=*/3, example, [&](const at::Tensor& input) {
        return module.predict_step(data::Batch{input, at::Tensor()}, 0);
      });
}

void Trainer::write_summary(
    const FitResult& result, const ProfileContext& context) {
  if (log_dir_.empty()) {
    return;
  }
  nlohmann::json summary;
  for (const auto& [name, value] : result.metrics) {
    summary[name] = value;
  }
  summary["epochs"] = result.epochs;
  summary["steps"] = result.steps;
  summary["train_samples_per_s"] = result.train_samples_per_s;
  summary["wall_s"] = result.wall_s;
  summary["checkpoint"] = result.checkpoint_path;
  summary["best_checkpoint"] = result.best_model_path;
  summary["interrupted"] = result.interrupted;
  const StepProfile& profile = result.profile;
  summary["profile"] = {
      {"phases", profile.phases()},
      {"synced_phases", profile.synced},
      {"synced_steps", profile.synced_steps},
      {"asynchronous", profile.asynchronous},
      {"validation", profile.validation},
      {"steps", profile.steps},
      {"samples_per_s", profile.samples_per_s()},
      {"steady_samples_per_s", profile.steady_samples_per_s()},
      {"verdict", profile.verdict(context)},
  };
  if (profile.flops_per_sample > 0) {
    summary["profile"]["flops_per_sample"] = profile.flops_per_sample;
    summary["profile"]["flops_per_s"] = profile.flops_per_s();
    summary["profile"]["peak_flops"] = profile.peak_flops;
    summary["profile"]["utilization"] = profile.utilization();
  }
  summary["model"] = {
      {"total_params", model_summary_.total_params()},
      {"trainable_params", model_summary_.trainable_params},
      {"frozen_params", model_summary_.frozen_params},
      {"size_mb", model_summary_.size_mb},
  };
  write_file_atomically(
      (std::filesystem::path(log_dir_) / "summary.json").string(),
      [&](std::ostream& out) { out << summary.dump(2) << "\n"; });
}

} // namespace hotloop::train
