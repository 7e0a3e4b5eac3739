#include "hotloop/train/trainer.h"

#include "hotloop/core/compat.h"
#include "hotloop/core/error.h"
#include "hotloop/core/memory.h"
#include "hotloop/core/signals.h"
#include "hotloop/core/threads.h"
#include "hotloop/log/progress.h"
#include "hotloop/optim/lr_scheduler.h"
#include "hotloop/train/grad_scaler.h"
#include "hotloop/train/run_dir.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/autograd/anomaly_mode.h>
#include <torch/nn/utils/clip_grad.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <optional>

namespace hotloop::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int64_t limited(int64_t available, int64_t limit) {
  return limit < 0 ? available : std::min(available, limit);
}

// The batch as the precision wants its input (bf16-true: in bfloat16).
data::Batch with_precision(
    const Precision& precision, const data::Batch& batch) {
  return data::Batch{precision.convert_input(batch.input), batch.target};
}

} // namespace

void seed_everything(uint64_t seed) {
  at::manual_seed(seed);
}

Trainer::Trainer(TrainerOptions options, std::ostream& out)
    : options_(std::move(options)), out_(out) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.max_epochs() > 0,
      "trainer.max_epochs must be positive, got ",
      options_.max_epochs());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.max_steps() == -1 || options_.max_steps() > 0,
      "trainer.max_steps must be positive or -1, got ",
      options_.max_steps());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.limit_train_batches() == -1 ||
          options_.limit_train_batches() > 0,
      "trainer.limit_train_batches must be positive or -1, got ",
      options_.limit_train_batches());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.limit_val_batches() >= -1,
      "trainer.limit_val_batches must be >= -1, got ",
      options_.limit_val_batches());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.check_val_every_n_epoch() > 0,
      "trainer.check_val_every_n_epoch must be positive, got ",
      options_.check_val_every_n_epoch());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.accumulate_grad_batches() > 0,
      "trainer.accumulate_grad_batches must be positive, got ",
      options_.accumulate_grad_batches());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.gradient_clip_val() >= 0,
      "trainer.gradient_clip_val must be >= 0, got ",
      options_.gradient_clip_val());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.num_threads() >= 0,
      "trainer.num_threads must be >= 0, got ",
      options_.num_threads());
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
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.fast_dev_run() >= 0,
      "trainer.fast_dev_run must be >= 0, got ",
      options_.fast_dev_run());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.num_sanity_val_steps() >= 0,
      "trainer.num_sanity_val_steps must be >= 0, got ",
      options_.num_sanity_val_steps());
  if (options_.fast_dev_run() > 0) {
    // Lightning's fast_dev_run: n batches of each, once, leaving no files.
    const int64_t n = options_.fast_dev_run();
    options_.max_epochs(1)
        .max_steps(-1)
        .limit_train_batches(n)
        .limit_val_batches(n)
        .num_sanity_val_steps(0)
        .accumulate_grad_batches(1)
        .default_root_dir("");
  }
  parse_precision_mode(options_.precision()); // names a bad value now
}

const std::string& Trainer::log_dir() {
  if (log_dir_.empty() && !options_.default_root_dir().empty()) {
    log_dir_ = create_version_dir(options_.default_root_dir(), options_.name());
  }
  return log_dir_;
}

FitResult Trainer::fit(
    Module& module,
    data::DataLoader& train,
    data::DataLoader* val,
    const std::string& ckpt_path) {
  const auto fit_start = Clock::now();
  const int threads = configure_intra_op_threads(
      static_cast<int>(options_.num_threads()),
      static_cast<int>(train.options().num_workers()));
  torch::autograd::AnomalyMode::set_enabled(options_.detect_anomaly());
  at::globalContext().setDeterministicAlgorithms(
      options_.deterministic(), /*warn_only=*/false);
  at::globalContext().setBenchmarkCuDNN(options_.benchmark());
  if (options_.retain_host_memory()) {
    retain_freed_host_memory();
  }

  const int64_t batches_per_epoch =
      limited(train.num_batches(), options_.limit_train_batches());
  HOTLOOP_CHECK_AS(
      ConfigError,
      batches_per_epoch > 0,
      "the training set gives no batch (",
      train.dataset().size(),
      " samples, ",
      train.num_batches(),
      " batches per epoch)");
  const int64_t accumulate = options_.accumulate_grad_batches();
  FitPlan plan;
  plan.steps_per_epoch = (batches_per_epoch + accumulate - 1) / accumulate;
  plan.max_epochs = options_.max_epochs();
  plan.total_steps = plan.steps_per_epoch * plan.max_epochs;
  if (options_.max_steps() > 0) {
    plan.total_steps = std::min(plan.total_steps, options_.max_steps());
  }
  OptimizerSetup setup = module.configure_optimizers(plan);
  HOTLOOP_CHECK(
      setup.optimizer != nullptr, "configure_optimizers returned no optimizer");
  torch::optim::Optimizer& optimizer = *setup.optimizer;
  optim::LRScheduler* scheduler = setup.scheduler.get();
  HOTLOOP_CHECK_AS(
      ConfigError,
      scheduler == nullptr || !scheduler->needs_metric() ||
          setup.interval == ScheduleInterval::kEpoch,
      "a schedule that watches '",
      setup.monitor,
      "' steps once per epoch: set lr_scheduler.interval=epoch");

  const Precision precision = precision_for(module);
  precision.convert_module(module);
  GradScaler scaler(GradScalerOptions().enabled(precision.needs_scaler()));

  TrainingProgress progress;
  if (!ckpt_path.empty()) {
    progress =
        load_checkpoint(ckpt_path, module, &optimizer, scheduler, &scaler);
    out_ << "resumed from " << ckpt_path << " at epoch " << progress.epoch
         << ", batch " << progress.epoch_batches << " (step "
         << progress.global_step << ")\n";
  }
  const std::string& run_dir = log_dir();
  std::string checkpoint_dir;
  if (!run_dir.empty() && options_.enable_checkpointing()) {
    checkpoint_dir = (std::filesystem::path(run_dir) / "checkpoints").string();
    std::filesystem::create_directories(checkpoint_dir);
  }
  if (options_.enable_progress_bar()) {
    out_ << "fit: " << train.dataset().size() << " training samples, "
         << batches_per_epoch << " batches/epoch, " << threads
         << " intra-op threads, " << train.options().num_workers()
         << " loader threads" << (run_dir.empty() ? "" : ", run folder ")
         << run_dir << "\n";
  }

  FitResult result;
  double train_seconds = 0;
  int64_t train_samples = 0;
  const std::vector<at::Tensor> parameters = module.parameters();
  compat::zero_grad_set_to_none(optimizer);
  std::optional<StopSignalGuard> signals;
  if (options_.handle_signals()) {
    signals.emplace();
  }
  auto save = [&] {
    if (!checkpoint_dir.empty()) {
      result.checkpoint_path = checkpoint_dir + "/last.ckpt";
      save_checkpoint(
          result.checkpoint_path,
          module,
          &optimizer,
          scheduler,
          progress,
          &scaler);
    }
  };
  if (val != nullptr && options_.num_sanity_val_steps() > 0 &&
      options_.limit_val_batches() != 0) {
    // A broken validation_step fails now, not after the first epoch.
    evaluate(
        module,
        *val,
        Stage::kValidate,
        precision,
        limited(options_.num_sanity_val_steps(), options_.limit_val_batches()));
  }
  std::optional<log::ProgressBar> bar;
  if (options_.enable_progress_bar()) {
    bar.emplace(
        out_,
        log::ProgressBar::is_terminal(out_),
        options_.log_every_n_steps());
  }
  bool stop = false;
  for (int64_t epoch = progress.epoch; epoch < options_.max_epochs() && !stop;
       ++epoch) {
    const auto epoch_start = Clock::now();
    module.train();
    MetricCollection metrics;
    log::StepTimes phases;
    if (bar) {
      bar->start_epoch(epoch + 1, options_.max_epochs(), batches_per_epoch);
    }
    int64_t samples = 0;
    int64_t batch_idx = 0;
    train.set_epoch(epoch);
    if (progress.epoch_batches > 0) {
      // Resuming mid-epoch: the loader rebuilds this epoch's order and skips
      // the batches already trained on.
      batch_idx = progress.epoch_batches;
      train.load_state_dict({epoch, batch_idx});
    }
    auto wait_start = Clock::now();
    for (auto it = train.begin();
         it != train.end() && batch_idx < batches_per_epoch;
         ++it) {
      // One straight line: batch -> forward under autocast -> loss /
      // accumulation -> backward (scaled) -> on the last micro-batch:
      // unscale, clip, step, update the scale, zero grads (set to none).
      const data::Batch& batch = *it;
      const auto compute_start = Clock::now();
      phases.data +=
          std::chrono::duration<double>(compute_start - wait_start).count();
      at::Tensor loss;
      {
        const AutocastGuard autocast = precision.autocast();
        loss = module.training_step(
            with_precision(precision, batch), batch_idx, metrics);
      }
      if (accumulate > 1) {
        loss = loss / static_cast<double>(accumulate);
      }
      (scaler.is_enabled() ? scaler.scale(loss) : loss).backward();
      const auto optimizer_start = Clock::now();
      phases.compute +=
          std::chrono::duration<double>(optimizer_start - compute_start)
              .count();
      samples += batch.size();
      ++batch_idx;
      if (batch_idx % accumulate == 0 || batch_idx == batches_per_epoch) {
        if (scaler.is_enabled()) {
          scaler.unscale_(optimizer); // clip the true gradients
        }
        if (options_.gradient_clip_val() > 0) {
          if (options_.gradient_clip_algorithm() == "value") {
            torch::nn::utils::clip_grad_value_(
                parameters, options_.gradient_clip_val());
          } else {
            torch::nn::utils::clip_grad_norm_(
                parameters, options_.gradient_clip_val());
          }
        }
        if (scaler.is_enabled()) {
          scaler.step(optimizer); // skipped on inf/NaN gradients
          scaler.update();
        } else {
          optimizer.step();
        }
        compat::zero_grad_set_to_none(optimizer);
        if (scheduler != nullptr && setup.interval == ScheduleInterval::kStep) {
          scheduler->step();
        }
        ++progress.global_step;
        if (options_.max_steps() > 0 &&
            progress.global_step >= options_.max_steps()) {
          stop = true;
        }
        if (options_.max_time() > 0 &&
            seconds_since(fit_start) >= options_.max_time()) {
          stop = true;
        }
        if (signals && StopSignalGuard::received() != 0 &&
            batch_idx < batches_per_epoch) {
          progress.epoch_batches = batch_idx;
          save();
          result.interrupted = true;
          stop = true;
        }
      }
      wait_start = Clock::now();
      phases.optimizer +=
          std::chrono::duration<double>(wait_start - optimizer_start).count();
      if (bar) {
        bar->update(
            batch_idx,
            samples,
            metrics.get("train_loss"),
            optimizer.param_groups()[0].options().get_lr(),
            phases);
      }
      if (stop) {
        break;
      }
    }
    if (bar) {
      bar->end_epoch();
    }
    train_seconds += phases.total();
    train_samples += samples;
    result.metrics = metrics.compute();
    if (result.interrupted) {
      out_ << "interrupted by signal " << StopSignalGuard::received()
           << " in epoch " << epoch + 1 << " after batch " << batch_idx
           << " (step " << progress.global_step << ")\n";
      break;
    }
    progress.epoch = epoch + 1;
    progress.epoch_batches = 0;

    const bool last = stop || progress.epoch == options_.max_epochs();
    if (val != nullptr && options_.limit_val_batches() != 0 &&
        (progress.epoch % options_.check_val_every_n_epoch() == 0 || last)) {
      for (const auto& [name, value] : evaluate(
               module,
               *val,
               Stage::kValidate,
               precision,
               options_.limit_val_batches())) {
        result.metrics[name] = value;
      }
    }
    if (scheduler != nullptr && setup.interval == ScheduleInterval::kEpoch) {
      if (scheduler->needs_metric()) {
        const auto it = result.metrics.find(setup.monitor);
        HOTLOOP_CHECK_AS(
            ConfigError,
            it != result.metrics.end(),
            "the lr schedule watches '",
            setup.monitor,
            "', which no step logged this epoch (is validation off?)");
        scheduler->step(it->second);
      } else {
        scheduler->step();
      }
    }
    save();
    if (options_.enable_progress_bar()) {
      const double epoch_seconds = seconds_since(epoch_start);
      out_ << "epoch " << progress.epoch << "/" << options_.max_epochs();
      out_ << std::fixed << std::setprecision(4);
      for (const auto& [name, value] : result.metrics) {
        out_ << "  " << name << " " << value;
      }
      out_ << std::setprecision(0) << "  "
           << samples / std::max(phases.total(), 1e-9) << " samples/s"
           << std::setprecision(1) << "  " << epoch_seconds << "s (data "
           << std::setprecision(0)
           << 100 * phases.data / std::max(phases.total(), 1e-9) << "%)"
           << std::defaultfloat << "\n";
      out_.flush();
    }
  }
  result.epochs = progress.epoch;
  result.steps = progress.global_step;
  result.train_samples_per_s =
      train_seconds > 0 ? train_samples / train_seconds : 0;
  result.wall_s = seconds_since(fit_start);
  write_summary(result);
  return result;
}

Precision Trainer::precision_for(Module& module) const {
  const auto parameters = module.parameters();
  const c10::Device device =
      parameters.empty() ? c10::Device(c10::kCPU) : parameters[0].device();
  return Precision(parse_precision_mode(options_.precision()), device);
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
    // Inference mode: no graph, no version counters, for the whole loop.
    c10::InferenceMode guard;
    const int64_t limit = limited(loader.num_batches(), limit_batches);
    int64_t batch_idx = 0;
    loader.set_epoch(0); // evaluation sees the same order every time
    for (auto it = loader.begin(); it != loader.end() && batch_idx < limit;
         ++it, ++batch_idx) {
      const AutocastGuard autocast = precision.autocast();
      const data::Batch batch = with_precision(precision, *it);
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

std::map<std::string, double> Trainer::validate(
    Module& module, data::DataLoader& loader, const std::string& ckpt_path) {
  if (!ckpt_path.empty()) {
    load_checkpoint(ckpt_path, module, nullptr, nullptr);
  }
  const Precision precision = precision_for(module);
  precision.convert_module(module);
  return evaluate(
      module,
      loader,
      Stage::kValidate,
      precision,
      options_.limit_val_batches());
}

std::map<std::string, double> Trainer::test(
    Module& module, data::DataLoader& loader, const std::string& ckpt_path) {
  if (!ckpt_path.empty()) {
    load_checkpoint(ckpt_path, module, nullptr, nullptr);
  }
  const Precision precision = precision_for(module);
  precision.convert_module(module);
  return evaluate(
      module, loader, Stage::kTest, precision, options_.limit_val_batches());
}

void Trainer::write_summary(const FitResult& result) {
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
  write_file_atomically(
      (std::filesystem::path(log_dir_) / "summary.json").string(),
      [&](std::ostream& out) { out << summary.dump(2) << "\n"; });
}

} // namespace hotloop::train
