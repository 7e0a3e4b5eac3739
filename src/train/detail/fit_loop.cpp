#include "hotloop/train/detail/fit_loop.h"

#include "hotloop/core/blas.h"
#include "hotloop/core/error.h"
#include "hotloop/optim/lr_scheduler.h"
#include "hotloop/train/detail/agreement.h"
#include "hotloop/train/detail/cudnn_tuning.h"
#include "hotloop/train/detail/epoch_batches.h"
#include "hotloop/train/detail/evaluation_loop.h"
#include "hotloop/train/device.h"
#include "hotloop/train/model_checkpoint.h"
#include "hotloop/train/strategy.h"
#include "hotloop/train/trainer.h"

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <set>
#include <sstream>

namespace hotloop::train::detail {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
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

// Counts every process must agree on before the first step: otherwise one
// finishes its epoch while another waits for it in a collective.
void check_same_everywhere(
    Strategy& strategy,
    const char* what,
    const std::vector<std::pair<const char*, int64_t>>& counts) {
  if (strategy.world_size() == 1) {
    return;
  }
  std::vector<int64_t> values;
  for (const auto& [name, count] : counts) {
    values.push_back(count);
  }
  const std::vector<Extremes> extremes = extremes_everywhere(strategy, values);
  for (size_t i = 0; i < counts.size(); ++i) {
    const auto [least, most] = extremes[i];
    HOTLOOP_CHECK_AS(
        ConfigError,
        most == least,
        what,
        " differs across the ",
        strategy.world_size(),
        " processes: this one (rank ",
        strategy.rank(),
        ") has ",
        counts[i].second,
        " ",
        counts[i].first,
        ", others from ",
        least,
        " to ",
        most,
        " - every process must load the same data with the same settings");
  }
}

// Processes that draw their shares from different orders train (or
// evaluate) on overlapping shares and miss the rest: stop before the first
// step. `what`: "training" or "validation".
void check_same_order(Strategy& strategy, const char* what, int64_t digest) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      same_everywhere(strategy, {digest}),
      "the ",
      what,
      " order differs across the ",
      strategy.world_size(),
      " processes (their loaders' seeds, or their samplers' or batch "
      "samplers' first epochs, differ): every process must build its loader "
      "alike, with the same seed, or their shares overlap and miss samples; "
      "a sampler of your own that takes one process's share already must "
      "give the whole data instead (each process takes its share of it)");
}

LoaderFingerprint loader_fingerprint(
    const data::DataLoader& train,
    int64_t batches_per_epoch,
    int64_t order,
    int64_t world_size) {
  const data::DataLoaderOptions& options = train.options();
  LoaderFingerprint loader;
  loader.seed = options.seed();
  loader.batches_per_epoch = batches_per_epoch;
  loader.batch_size = options.batch_size().value_or(0);
  loader.dataset_size = train.dataset_size().value_or(-1);
  loader.shuffle = options.shuffle();
  loader.order = order;
  loader.world_size = world_size;
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
  if (saved.world_size != 0) { // recorded
    compare("processes", saved.world_size, now.world_size);
  }
  // Another process count draws from another sampler (a DistributedSampler
  // for more than one): only the same count's orders compare.
  if (saved.order != -1 && saved.order != now.order &&
      saved.world_size == now.world_size) {
    differences << (differences.tellp() > 0 ? ", " : "")
                << "a sampler or batch sampler that draws another epoch";
  }
  throw ConfigError(hotloop::detail::str_cat(
      path,
      ": written mid-epoch, and resuming there needs the training loader it "
      "had; now ",
      differences.str(),
      " - resume with the run's data settings, or from a checkpoint written "
      "at an epoch end"));
}

} // namespace

FitLoop::FitLoop(
    Trainer& trainer,
    Module& module,
    data::DataLoader& train,
    data::DataLoader* val)
    : trainer_(trainer), module_(module), train_(&train), val_(val) {}

FitLoop::~FitLoop() = default;

CheckpointState FitLoop::checkpoint_state() const {
  CheckpointState checkpoint;
  for (const auto& optimizer : setup_.optimizers) {
    checkpoint.optimizers.push_back(optimizer.get());
  }
  for (const auto& schedule : setup_.schedules) {
    checkpoint.schedulers.push_back(schedule.scheduler.get());
  }
  checkpoint.scaler = scaler_.get();
  if (epoch_metrics_ != nullptr && trainer_.progress_.epoch_batches > 0) {
    checkpoint.loop.epoch_metrics = epoch_metrics_->state();
  }
  checkpoint.loader = loader_fingerprint(
      *train_,
      batches_per_epoch_,
      train_order_,
      trainer_.strategy().world_size());
  return checkpoint;
}

FitResult FitLoop::run(const std::string& ckpt_path) {
  prepare(ckpt_path);
  bool stop = false;
  const int64_t max_epochs = trainer_.options().max_epochs();
  for (int64_t epoch = trainer_.progress_.epoch;
       (max_epochs < 0 || epoch < max_epochs) && !stop;
       ++epoch) {
    stop = run_epoch(epoch);
  }
  return finish();
}

void FitLoop::prepare(const std::string& ckpt_path) {
  Trainer& trainer = trainer_;
  const TrainerOptions& options = trainer.options();
  const int threads =
      trainer.apply_runtime_settings(train_->options().num_workers());
  Strategy& strategy = trainer.strategy();
  if (strategy.world_size() > 1) {
    // Each process trains on its share of every epoch and validates on its
    // share of the split (the metrics are reduced over all of them).
    shard_train_ = data::shard(
        *train_, strategy.world_size(), strategy.rank(), /*training=*/true);
    train_ = shard_train_.get();
    if (val_ != nullptr) {
      shard_val_ = data::shard(
          *val_, strategy.world_size(), strategy.rank(), /*training=*/false);
      val_ = shard_val_.get();
    }
  }

  const double overfit = options.overfit_batches();
  batches_per_epoch_ = resolve_limit(
      overfit > 0 ? overfit : options.limit_train_batches(),
      train_->length(),
      overfit > 0 ? "overfit_batches" : "limit_train_batches");
  HOTLOOP_CHECK_AS(
      ConfigError,
      batches_per_epoch_ != kUntilStreamsEnd,
      "trainer.limit_train_batches: the training loader's IterableDataset "
      "does not know its size, so an epoch has no length: give "
      "limit_train_batches a whole number of batches per epoch (or the "
      "dataset a size())");
  HOTLOOP_CHECK_AS(
      ConfigError,
      batches_per_epoch_ > 0,
      "the training set gives no batch (",
      train_->dataset_size().value_or(-1),
      " samples, ",
      train_->length().value_or(-1),
      " batches per epoch)");
  check_same_everywhere(
      strategy,
      "the training set",
      {{"samples", train_->dataset_size().value_or(-1)},
       {"batches per epoch", batches_per_epoch_}});
  train_order_ = order_digest(*train_);
  check_same_order(strategy, "training", train_order_);
  if (val_ != nullptr && strategy.world_size() > 1) {
    check_same_order(strategy, "validation", order_digest(*val_));
  }
  accumulate_ = options.accumulate_grad_batches();
  val_check_batches_ = val_check_batches(
      options.val_check_interval(), batches_per_epoch_, accumulate_);
  limit_val_batches_ =
      val_ == nullptr
          ? 0
          : resolve_limit_everywhere(
                strategy,
                overfit > 0 ? overfit : options.limit_val_batches(),
                val_->length(),
                overfit > 0 ? "overfit_batches" : "limit_val_batches");
  // Every process validates when any has a batch (a share may have none).
  trainer.has_validation_ =
      val_ != nullptr && strategy.any(limit_val_batches_ != 0);

  FitPlan plan;
  plan.steps_per_epoch = (batches_per_epoch_ + accumulate_ - 1) / accumulate_;
  plan.max_epochs = options.max_epochs();
  plan.total_steps = plan.max_epochs < 0
                         ? options.max_steps()
                         : plan.steps_per_epoch * plan.max_epochs;
  if (options.max_steps() > 0 && plan.max_epochs > 0) {
    plan.total_steps = std::min(plan.total_steps, options.max_steps());
  }
  trainer.prepare_module(module_);
  setup_ = module_.configure_optimizers(plan);
  check_optimizer_setup(setup_);
  precision_.emplace(trainer.precision_for(module_));
  precision_->convert_module(module_);
  scaler_ = std::make_unique<GradScaler>(
      GradScalerOptions().enabled(precision_->needs_scaler()));
  // The clock of elapsed_s and the set-up time starts with the model on its
  // device and its optimizers made, where a hand-written loop's
  // time-to-accuracy clock starts (bench/python_train.py's too, after a
  // synchronize): a GPU's context, the model's copy and conversions are
  // done before it.
  synchronize_device(trainer.device());
  start_ = Clock::now();
  // The set-up's parts, each timed to the end of its device work.
  Clock::time_point part_start = start_;
  const auto part_done = [&](const char* name) {
    synchronize_device(trainer.device());
    const Clock::time_point now = Clock::now();
    profile_.setup_parts[name] +=
        std::chrono::duration<double>(now - part_start).count();
    part_start = now;
  };

  trainer.progress_ = TrainingProgress{};
  trainer.current_epoch_ = 0;
  trainer.callback_metrics_.clear();
  trainer.callback_counts_.clear();
  trainer.should_stop_ = false;
  trainer.min_epochs_noted_ = false;
  trainer.pending_logs_.clear();
  trainer.last_checkpoint_.clear();
  const std::string& run_dir = trainer.log_dir(ckpt_path);
  trainer.prepare_callbacks(run_dir);
  trainer.each_callback([&](Callback& c) { c.setup(trainer, module_); });
  part_done("callbacks");
  if (!ckpt_path.empty()) {
    restore(ckpt_path);
    part_done("checkpoint");
  }
  // After every change to the parameters (device, memory format, dtype,
  // a checkpoint's values: loading replaces their storage, which would
  // detach a data-parallel strategy's gradient hooks).
  strategy.setup(module_);
  start_step_ = trainer.progress_.global_step;
  clock_.emplace(profile_, trainer.device(), start_step_);
  step_.emplace(
      trainer, module_, setup_, *precision_, *scaler_, *clock_, accumulate_);
  if (trainer.shows_progress()) {
    const std::optional<int64_t> samples = train_->dataset_size();
    trainer.out_ << "fit: " << (samples ? std::to_string(*samples) : "streamed")
                 << " training samples, " << batches_per_epoch_
                 << " batches/epoch";
    if (strategy.world_size() > 1) {
      trainer.out_ << " per process, " << strategy.world_size() << " processes";
    }
    trainer.out_ << ", on " << trainer.device() << ", " << threads
                 << " intra-op threads, " << train_->options().num_workers()
                 << " loader threads";
    const BlasKernels blas =
        trainer.device().is_cpu() ? blas_kernels() : BlasKernels{};
    if (!blas.library.empty()) {
      trainer.out_ << ", " << blas.describe();
    }
    trainer.out_ << (run_dir.empty() ? "" : ", run folder ") << run_dir << "\n";
    // A program that did not restart, as the hotloop program does.
    if (blas.wants_faster_core()) {
      trainer.out_
          << "warning: OpenBLAS runs its " << blas.core
          << " kernels on a CPU that runs its " << blas.faster_core
          << " ones, several times faster: set OPENBLAS_CORETYPE="
          << blas.faster_core
          << " before the program starts (the hotloop program does; "
             "in your own, call hotloop::use_fastest_blas_kernels(argv) "
             "first in main)\n";
    }
    if (!blas.openmp_build.empty()) {
      trainer.out_
          << "warning: OpenBLAS runs on its pthreads build, a thread pool "
             "beside LibTorch's, while its OpenMP build, which runs on "
             "LibTorch's threads (faster for models of Linear layers), is "
             "installed: start the program with LD_LIBRARY_PATH="
          << blas.openmp_build
          << " (the hotloop program does; in your own, call "
             "hotloop::use_fastest_blas_kernels(argv) first in main)\n";
    }
    bar_.emplace(
        trainer.out_,
        log::ProgressBar::is_terminal(trainer.out_),
        options.log_every_n_steps());
  }
  step_->zero_grad();
  if (options.handle_signals()) {
    signals_.emplace();
  }
  part_done("strategy");
  {
    // Neither the sanity check nor the summary may move the generators:
    // training starts from the seeded (or restored) state either way.
    const RngStates rng = get_rng_states();
    if (trainer.has_validation_ && options.num_sanity_val_steps() != 0) {
      // A broken validation_step fails now, not after the first epoch.
      trainer.sanity_checking_ = true;
      const int64_t sanity = options.num_sanity_val_steps();
      for (const auto& [name, value] :
           EvaluationLoop(
               trainer, module_, *precision_, trainer.active_callbacks_)
               .run(
                   *val_,
                   Stage::kValidate,
                   sanity < 0 ? limit_val_batches_
                              : limited(sanity, limit_val_batches_))
               .compute()) {
        validation_names_.insert(name);
      }
      validation_names_known_ = true;
      trainer.sanity_checking_ = false;
      part_done("sanity_check");
    }
    trainer.model_summary_ = trainer.summarize(module_, *train_, *precision_);
    set_rng_states(rng);
  }
  if (trainer.shows_progress()) {
    trainer.model_summary_.print(trainer.out_);
  }
  part_done("model_summary");
  profile_.flops_per_sample = 3 * module_.flops_per_sample();
  profile_.asynchronous = !trainer.device().is_cpu();
  profile_.data_parallel = strategy.world_size() > 1;
  trainer.each_callback([&](Callback& c) { c.on_fit_start(trainer, module_); });
  part_done("callbacks");
  profile_.setup = seconds_since(start_);
}

void FitLoop::restore(const std::string& ckpt_path) {
  Trainer& trainer = trainer_;
  CheckpointState checkpoint = checkpoint_state();
  trainer.progress_ = load_checkpoint(ckpt_path, module_, &checkpoint);
  if (!checkpoint.callbacks.empty()) {
    const nlohmann::json states = nlohmann::json::parse(checkpoint.callbacks);
    for (const auto& callback : trainer.active_callbacks_) {
      const auto found = states.find(callback->state_key());
      if (found != states.end()) {
        callback->load_state_dict(*found);
      }
    }
  }
  for (const auto& callback : trainer.active_callbacks_) {
    const auto found = checkpoint.callback_tensors.find(callback->state_key());
    if (found != checkpoint.callback_tensors.end()) {
      callback->load_state_tensors(std::move(found->second));
    }
  }
  if (trainer.progress_.epoch_batches > 0 && checkpoint.loader.known()) {
    check_same_loader(
        ckpt_path,
        checkpoint.loader,
        loader_fingerprint(
            *train_,
            batches_per_epoch_,
            train_order_,
            trainer.strategy().world_size()));
  }
  trainer.callback_metrics_ = checkpoint.loop.callback_metrics;
  resumed_epoch_metrics_ = checkpoint.loop.epoch_metrics;
  if (!trainer.strategy().is_global_zero()) {
    return;
  }
  // Epochs counted from 1, as the interrupt and the epoch lines say them.
  const TrainingProgress& progress = trainer.progress_;
  trainer.out_ << "resumed from " << ckpt_path;
  if (progress.epoch_batches > 0) {
    trainer.out_ << " in epoch " << progress.epoch + 1 << " after batch "
                 << progress.epoch_batches;
  } else {
    trainer.out_ << " after epoch " << progress.epoch;
  }
  trainer.out_ << " (step " << progress.global_step << ")\n";
  // A finished run resumed with the same limits trains nothing: say so,
  // rather than a "done" that reads as if it trained.
  const TrainerOptions& options = trainer.options();
  if (options.max_epochs() > 0 && progress.epoch >= options.max_epochs()) {
    trainer.out_ << "nothing to train: the checkpoint has completed "
                 << hotloop::detail::counted(progress.epoch, "epoch")
                 << " and trainer.max_epochs=" << options.max_epochs()
                 << " (raise it to train further)\n";
  } else if (
      options.max_steps() > 0 && progress.global_step >= options.max_steps()) {
    trainer.out_ << "nothing to train: the checkpoint is at step "
                 << progress.global_step
                 << " and trainer.max_steps=" << options.max_steps()
                 << " (raise it to train further)\n";
  }
  for (const auto& logger : trainer.loggers_) {
    logger->resume_at(progress.global_step);
  }
}

bool FitLoop::run_epoch(int64_t epoch) {
  Trainer& trainer = trainer_;
  const TrainerOptions& options = trainer.options();
  TrainingProgress& progress = trainer.progress_;
  const int64_t batches = batches_per_epoch_;
  const int64_t max_epochs = options.max_epochs();
  const auto epoch_start = Clock::now();

  trainer.current_epoch_ = epoch;
  module_.train();
  MetricCollection metrics;
  epoch_metrics_ = &metrics;
  struct Forget {
    MetricCollection*& metrics;
    ~Forget() {
      metrics = nullptr;
    }
  } forget_metrics{epoch_metrics_};
  const bool validate_this_epoch =
      trainer.has_validation_ &&
      ((epoch + 1) % options.check_val_every_n_epoch() == 0 ||
       epoch + 1 == max_epochs);
  if (bar_) {
    bar_->start_epoch(epoch + 1, max_epochs, batches);
  }
  // overfit_batches trains on the same batches every epoch: epoch 0's.
  const int64_t loader_epoch = options.overfit_batches() > 0 ? 0 : epoch;
  train_->set_epoch(loader_epoch);
  int64_t batch_idx = 0;
  if (progress.epoch_batches > 0) {
    // Resuming mid-epoch: the loader rebuilds this epoch's order and skips
    // the batches already trained on.
    batch_idx = progress.epoch_batches;
    train_->load_state_dict({loader_epoch, batch_idx});
    metrics.load_state(resumed_epoch_metrics_);
  }
  resumed_epoch_metrics_.clear();
  trainer.each_callback(
      [&](Callback& c) { c.on_train_epoch_start(trainer, module_); });
  trainer.flush_logs();

  StepClock& clock = *clock_;
  clock.start_epoch();
  bool stop = false;
  // Processes whose streams end apart all stop at the first end.
  EpochBatches epoch_batches(*train_, batch_idx, batches, &trainer.strategy());
  data::Batch loaded;
  bool last_of_epoch = false;
  while (epoch_batches.next(loaded, last_of_epoch)) {
    if (batch_idx % accumulate_ == 0) {
      trace_steps();
      clock.start_step(progress.global_step);
    }
    // The step ends with the accumulation's last micro-batch, or the
    // epoch's last batch.
    const bool last = (batch_idx + 1) % accumulate_ == 0 || last_of_epoch;

    clock.begin(Phase::kH2D);
    const data::Batch batch = trainer.prepare_batch(*precision_, loaded);
    {
      // Hooks inside the step (an input grid, say) are logging time.
      const auto logging = clock.time(Phase::kLogging);
      trainer.each_callback([&](Callback& c) {
        c.on_train_batch_start(trainer, module_, batch, batch_idx);
      });
    }
    at::Tensor loss;
    {
      // An epoch's last, smaller batch is a shape met once: cuDNN's
      // benchmark of every convolution would not pay for itself.
      const CudnnBenchmarkOff one_off(is_short_batch(batch, *train_));
      loss = step_->run(batch, batch_idx, last, metrics);
    }
    progress.epoch_batches = ++batch_idx;

    clock.begin(Phase::kLogging);
    trainer.each_callback([&](Callback& c) {
      c.on_train_batch_end(trainer, module_, loss, batch, batch_idx - 1);
    });
    stop =
        last && end_step(epoch, validate_this_epoch, batch_idx, last_of_epoch);
    if (bar_ && !interrupted_ && bar_->due(batch_idx)) {
      // Reading the loss may wait for the device: logging time, not data.
      bar_->set_tokens_per_sample(module_.tokens_per_sample());
      bar_->update(
          batch_idx,
          clock.epoch_samples() + batch.size(),
          metrics.get("train_loss"),
          setup_.optimizers.front()->param_groups()[0].options().get_lr(),
          clock.epoch_times());
    }
    clock.end_batch(batch.size(), last, progress.global_step);
    if (stop) {
      break;
    }
  }
  if (trace_ && trace_steps_left_ == 0) {
    finish_trace(); // before validation, which is no step's
  } else if (trace_) {
    trace_->end_step(); // validation is no step's
  }
  if (bar_) {
    bar_->end_epoch();
  }
  clock.end_epoch();
  train_seconds_ += clock.epoch_times().total();
  train_samples_ += clock.epoch_samples();
  if (interrupted_) {
    return true;
  }
  // An epoch without a step would be followed by as many: stop instead.
  HOTLOOP_CHECK_AS(
      DataError,
      batch_idx > 0 || !epoch_batches.ran_out(),
      "epoch ",
      epoch,
      " of the training loader gave no batch: its streams ended at once",
      trainer.strategy().world_size() > 1
          ? " (on this process or another: each needs a share of the samples)"
          : "",
      ", so there is nothing to train on");
  // A stream may end before the epoch's count: its epoch is complete too.
  const bool complete = batch_idx >= batches || epoch_batches.ran_out();
  if (complete) {
    progress.epoch = epoch + 1;
    progress.epoch_batches = 0;
  }
  std::map<std::string, double> epoch_metrics = metrics.compute();
  for (const auto& [name, value] : epoch_metrics) {
    trainer.callback_metrics_[name] = value;
  }
  // The epoch's schedule steps come before the checkpoints written at its
  // end (after validation, or at on_train_epoch_end), so that a resume from
  // one starts the next epoch at the rates the uninterrupted run has.
  if (complete) {
    step_schedules(setup_.schedules, ScheduleInterval::kEpoch, epoch + 1);
  }
  const bool last_epoch = stop || epoch + 1 == max_epochs;
  if (trainer.has_validation_ && (validate_this_epoch || last_epoch) &&
      validated_step_ != progress.global_step) {
    validate(/*epoch_end=*/complete);
  } else if (complete) {
    step_metric_schedules(epoch + 1);
  }
  epoch_metrics["epoch"] = static_cast<double>(epoch);
  // Seconds since the model was ready to train (prepare), for
  // time-to-accuracy curves.
  epoch_metrics["elapsed_s"] = seconds_since(start_);
  trainer.log_metrics(epoch_metrics);
  trainer.each_callback(
      [&](Callback& c) { c.on_train_epoch_end(trainer, module_); });
  trainer.flush_logs();
  trainer.flush_loggers();
  if (trainer.shows_progress()) {
    print_epoch_line(seconds_since(epoch_start));
  }
  if (signalled()) {
    interrupt();
    return true;
  }
  return stop || stop_requested(epoch + (complete ? 1 : 0));
}

bool FitLoop::end_step(
    int64_t epoch,
    bool validate_this_epoch,
    int64_t batch_idx,
    bool last_of_epoch) {
  Trainer& trainer = trainer_;
  const TrainerOptions& options = trainer.options();
  const int64_t global_step = trainer.progress_.global_step;
  const int64_t log_every = options.log_every_n_steps();
  if (log_every > 0 && global_step % log_every == 0) {
    std::map<std::string, double> step_metrics{
        {"epoch", static_cast<double>(epoch)}};
    for (const auto& [name, value] : epoch_metrics_->last()) {
      step_metrics[name + "_step"] = value;
    }
    trainer.log_metrics(step_metrics);
  }
  if (!monitors_checked_) {
    check_monitors();
  }
  const bool steps_done =
      options.max_steps() > 0 && global_step >= options.max_steps();
  if (signalled()) {
    interrupt();
    return true;
  }
  // The epoch's last batch validates at the epoch's end, after its
  // schedules step (a stream may end before batches_per_epoch_).
  if (!steps_done && validate_this_epoch && !last_of_epoch &&
      batch_idx % val_check_batches_ == 0) {
    validate(/*epoch_end=*/false);
  }
  trainer.flush_logs();
  const int64_t flush_every = options.flush_logs_every_n_steps();
  if (flush_every > 0 && global_step % flush_every == 0) {
    trainer.flush_loggers();
  }
  return steps_done || stop_requested(epoch);
}

void FitLoop::check_monitors() {
  monitors_checked_ = true;
  // Validation metrics are known from the sanity check; without one (and
  // with validation on) a monitor can only be checked when it is used.
  if (trainer_.has_validation_ && !validation_names_known_) {
    return;
  }
  std::set<std::string> logged = validation_names_;
  for (const auto& [name, value] : epoch_metrics_->last()) {
    logged.insert(name);
  }
  std::string names;
  for (const std::string& name : logged) {
    names += (names.empty() ? "" : ", ") + name;
  }
  if (names.empty()) {
    names = "none";
  }
  for (const auto& callback : trainer_.active_callbacks_) {
    const std::string metric = callback->required_metric();
    // "ModelCheckpoint{monitor=...}" is a ModelCheckpoint.
    const std::string key = callback->state_key();
    HOTLOOP_CHECK_AS(
        ConfigError,
        metric.empty() || logged.count(metric) > 0,
        key.substr(0, key.find('{')),
        " monitors '",
        metric,
        "', which no step logged (logged: ",
        names,
        ")");
  }
  for (const ScheduleConfig& schedule : setup_.schedules) {
    HOTLOOP_CHECK_AS(
        ConfigError,
        !schedule.scheduler->needs_metric() ||
            logged.count(schedule.monitor) > 0,
        "the lr schedule watches '",
        schedule.monitor,
        "', which no step logged (logged: ",
        names,
        ")");
  }
}

bool FitLoop::signalled() {
  return trainer_.strategy().any(
      signals_.has_value() && StopSignalGuard::received() != 0);
}

bool FitLoop::stop_requested(int64_t completed_epochs) {
  Trainer& trainer = trainer_;
  // A callback's decision (EarlyStopping, Timer) may differ between
  // processes; all stop if one does.
  if (!trainer.strategy().any(trainer.should_stop_)) {
    return false;
  }
  if (completed_epochs >= trainer.options().min_epochs()) {
    return true;
  }
  if (trainer.shows_progress() && !trainer.min_epochs_noted_) {
    trainer.out_ << "a stop was requested, but trainer.min_epochs="
                 << trainer.options().min_epochs()
                 << " is not reached; training continues\n";
  }
  trainer.min_epochs_noted_ = true;
  trainer.should_stop_ = false;
  return false;
}

void FitLoop::interrupt() {
  Trainer& trainer = trainer_;
  interrupted_ = true;
  trainer.flush_logs();
  std::string saved;
  for (const auto& callback : trainer.active_callbacks_) {
    if (auto* checkpoint = dynamic_cast<ModelCheckpoint*>(callback.get())) {
      saved = checkpoint->save_last(trainer);
      break;
    }
  }
  if (saved.empty() && !trainer.log_dir_.empty()) {
    // Checkpointing is off, but a stopped run must still be resumable.
    const std::filesystem::path folder =
        std::filesystem::path(trainer.log_dir_) / "checkpoints";
    std::filesystem::create_directories(folder);
    saved = (folder / "last.ckpt").string();
    trainer.save_checkpoint(saved);
  }
  trainer.flush_loggers();
  if (!trainer.strategy().is_global_zero()) {
    return;
  }
  trainer.out_ << "interrupted by signal " << StopSignalGuard::received()
               << " in epoch " << trainer.current_epoch_ + 1 << " after batch "
               << trainer.progress_.epoch_batches << " (step "
               << trainer.progress_.global_step << "); ";
  if (saved.empty()) {
    trainer.out_ << "no run folder, so no checkpoint to resume from\n";
  } else {
    trainer.out_ << "resume from " << saved
                 << " (Trainer::fit's ckpt_path, or hotloop fit --ckpt_path)\n";
  }
}

void FitLoop::validate(bool epoch_end) {
  Trainer& trainer = trainer_;
  // Validation inside an epoch is not step time.
  const auto timed = clock_->time(Phase::kValidation);
  trainer.each_callback(
      [&](Callback& c) { c.on_validation_start(trainer, module_); });
  const MetricCollection pass =
      EvaluationLoop(trainer, module_, *precision_, trainer.active_callbacks_)
          .run(*val_, Stage::kValidate, limit_val_batches_);
  const std::map<std::string, double> metrics = pass.compute();
  trainer.callback_counts_ = pass.counts();
  for (const auto& [name, value] : metrics) {
    trainer.callback_metrics_[name] = value;
  }
  std::map<std::string, double> logged = metrics;
  logged["epoch"] = static_cast<double>(trainer.current_epoch_);
  trainer.log_metrics(logged);
  validated_step_ = trainer.progress_.global_step;
  if (epoch_end) {
    step_metric_schedules(trainer.current_epoch_ + 1);
  }
  trainer.each_callback(
      [&](Callback& c) { c.on_validation_end(trainer, module_); });
}

void FitLoop::step_metric_schedules(int64_t epochs) {
  const auto& metrics = trainer_.callback_metrics_;
  for (const ScheduleConfig& schedule : setup_.schedules) {
    if (!schedule.scheduler->needs_metric() ||
        epochs % schedule.frequency != 0) {
      continue;
    }
    const auto found = metrics.find(schedule.monitor);
    HOTLOOP_CHECK_AS(
        ConfigError,
        found != metrics.end(),
        "the lr schedule watches '",
        schedule.monitor,
        "', which no step logged this epoch (is validation off?)");
    schedule.scheduler->step(found->second);
  }
}

void FitLoop::trace_steps() {
  // Skips this fit's first profiler_skip_steps steps (by default the first
  // calls' allocations and algorithm searches; a resumed fit's too), then
  // records profiler_steps whole optimizer steps.
  const TrainerOptions& options = trainer_.options();
  const std::string& run_dir = trainer_.log_dir_;
  if (options.profiler() != "pytorch" || run_dir.empty()) {
    return;
  }
  const int64_t step = trainer_.progress_.global_step;
  if (trace_ && trace_steps_left_ == 0) {
    finish_trace();
    return;
  }
  if (!trace_ && !traced_ &&
      step == start_step_ + options.profiler_skip_steps()) {
    trace_ = std::make_unique<TraceRecorder>(
        (std::filesystem::path(run_dir) / "trace.json").string(),
        trainer_.device());
    trace_steps_left_ = options.profiler_steps();
  }
  if (trace_) {
    trace_->begin_step(step + 1);
    --trace_steps_left_;
  }
}

void FitLoop::finish_trace() {
  if (!trace_) {
    return;
  }
  const std::string how = trace_->finish();
  trace_.reset();
  traced_ = true;
  if (trainer_.shows_progress()) {
    trainer_.out_ << "profiler trace written to " << trainer_.log_dir_
                  << "/trace.json (" << how << ")\n";
  }
}

void FitLoop::print_epoch_line(double seconds) {
  std::ostream& out = trainer_.out_;
  const log::StepTimes& phases = clock_->epoch_times();
  out << log::epoch_label(
      trainer_.current_epoch_ + 1, trainer_.options().max_epochs());
  out << std::fixed << std::setprecision(4);
  for (const auto& [name, value] : trainer_.callback_metrics_) {
    out << "  " << name << " " << value;
  }
  const double busy = std::max(phases.total(), 1e-9);
  const double rate = clock_->epoch_samples() / busy;
  out << std::setprecision(0) << "  " << rate << " samples/s";
  if (module_.tokens_per_sample() > 0) {
    out << " (" << rate * module_.tokens_per_sample() << " tokens/s)";
  }
  out << std::setprecision(1) << "  " << seconds << "s (data "
      << std::setprecision(0) << 100 * phases.data / busy << "%)"
      << std::defaultfloat << "\n";
  out.flush();
}

FitResult FitLoop::finish() {
  Trainer& trainer = trainer_;
  trainer.flush_logs();
  finish_trace(); // when the fit ended inside the traced steps
  trainer.each_callback([&](Callback& c) { c.on_fit_end(trainer, module_); });

  FitResult result;
  nlohmann::json added = nlohmann::json::object();
  for (const auto& callback : trainer.active_callbacks_) {
    const nlohmann::json entry = callback->summary();
    if (entry.is_object()) {
      added.update(entry);
    }
  }
  if (!added.empty()) {
    result.callback_summary = added.dump();
  }
  result.metrics = trainer.callback_metrics_;
  result.epochs = trainer.progress_.epoch;
  result.steps = trainer.progress_.global_step;
  result.interrupted = interrupted_;
  // Every process trains on as many samples (DistributedSampler pads).
  result.world_size = trainer.strategy().world_size();
  result.train_samples_per_s =
      train_seconds_ > 0
          ? static_cast<double>(train_samples_ * result.world_size) /
                train_seconds_
          : 0;
  result.train_tokens_per_s =
      result.train_samples_per_s * module_.tokens_per_sample();
  result.wall_s = seconds_since(start_);
  result.checkpoint_path = trainer.last_checkpoint_;
  for (const auto& callback : trainer.active_callbacks_) {
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
  if (profile_.flops_per_sample > 0 && profile_.steps > 0) {
    // The same peak as bench/run's MFU column where it passes one.
    if (trainer.options().peak_tflops() > 0) {
      profile_.peak_flops = trainer.options().peak_tflops() * 1e12;
      profile_.peak_source = "trainer.peak_tflops";
    } else {
      profile_.peak_flops =
          measure_peak_flops(trainer.device(), precision_->compute_dtype());
      profile_.peak_source = "measured";
    }
  }
  profile_.tokens_per_sample = module_.tokens_per_sample();
  result.profile = profile_;
  if (trainer.shows_progress() && profile_.steps > 0) {
    profile_.print(trainer.out_, trainer.profile_context(module_, *train_));
  }
  return result;
}

} // namespace hotloop::train::detail
