#include "hotloop/train/trainer.h"

#include "hotloop/core/compat.h"
#include "hotloop/core/error.h"
#include "hotloop/core/memory.h"
#include "hotloop/core/threads.h"
#include "hotloop/data/dataloader.h"
#include "hotloop/log/csv_logger.h"
#include "hotloop/log/model_summary.h"
#include "hotloop/log/tensorboard_logger.h"
#include "hotloop/optim/lr_scheduler.h"
#include "hotloop/train/detail/agreement.h"
#include "hotloop/train/detail/cudnn_tuning.h"
#include "hotloop/train/detail/evaluation_loop.h"
#include "hotloop/train/detail/fit_loop.h"
#include "hotloop/train/detail/shared_prediction.h"
#include "hotloop/train/device.h"
#include "hotloop/train/early_stopping.h"
#include "hotloop/train/model_checkpoint.h"
#include "hotloop/train/run_dir.h"
#include "hotloop/train/timer.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/ScopeExit.h>
#include <torch/csrc/autograd/anomaly_mode.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>

namespace hotloop::train {
namespace {

// Leaves the caller's stream formatting as it was: the Trainer's lines set
// their own number formats.
class StreamState {
 public:
  explicit StreamState(std::ostream& out)
      : out_(out),
        flags_(out.flags()),
        precision_(out.precision()),
        fill_(out.fill()) {}
  ~StreamState() {
    out_.flags(flags_);
    out_.precision(precision_);
    out_.fill(fill_);
  }
  StreamState(const StreamState&) = delete;
  StreamState& operator=(const StreamState&) = delete;

 private:
  std::ostream& out_;
  std::ios::fmtflags flags_;
  std::streamsize precision_;
  char fill_;
};

} // namespace

void seed_everything(uint64_t seed) {
  at::manual_seed(seed);
}

Trainer::Trainer(TrainerOptions options, std::ostream& out)
    : options_(resolve_trainer_options(std::move(options))),
      out_(out),
      device_(resolve_device(options_.accelerator(), options_.devices())),
      input_device_(device_),
      strategy_(std::make_shared<Strategy>()) {}

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

Trainer& Trainer::set_strategy(std::shared_ptr<Strategy> strategy) {
  HOTLOOP_CHECK(strategy != nullptr, "set_strategy: the strategy is null");
  strategy_ = std::move(strategy);
  return *this;
}

const std::string& Trainer::log_dir() {
  // Only the process that writes files gets a run folder.
  if (log_dir_.empty() && !options_.default_root_dir().empty() &&
      strategy_->is_global_zero()) {
    log_dir_ = create_version_dir(options_.default_root_dir(), options_.name());
  }
  return log_dir_;
}

const std::string& Trainer::log_dir(const std::string& ckpt_path) {
  if (log_dir_.empty() && !ckpt_path.empty() &&
      !options_.new_folder_on_resume() &&
      !options_.default_root_dir().empty() && strategy_->is_global_zero()) {
    const std::filesystem::path folder =
        std::filesystem::path(ckpt_path).parent_path();
    if (folder.filename() == "checkpoints" &&
        std::filesystem::is_directory(folder.parent_path())) {
      log_dir_ = folder.parent_path().string();
    }
  }
  return log_dir();
}

std::vector<torch::optim::Optimizer*> Trainer::optimizers() {
  std::vector<torch::optim::Optimizer*> out;
  if (fit_ != nullptr) {
    for (const auto& optimizer : fit_->setup().optimizers) {
      out.push_back(optimizer.get());
    }
  }
  return out;
}

torch::optim::Optimizer* Trainer::optimizer() {
  return fit_ == nullptr || fit_->setup().optimizers.empty()
             ? nullptr
             : fit_->setup().optimizers.front().get();
}

const std::vector<ScheduleConfig>& Trainer::lr_schedules() const {
  static const std::vector<ScheduleConfig> kNone;
  return fit_ == nullptr ? kNone : fit_->setup().schedules;
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

void Trainer::save_checkpoint(const std::string& path) {
  HOTLOOP_CHECK(
      fit_ != nullptr,
      "Trainer::save_checkpoint('",
      path,
      "'): no fit is running");
  if (!strategy_->is_global_zero()) {
    return;
  }
  // A diverged model must not replace a good checkpoint (a step whose
  // gradients overflowed leaves finite losses until the next forward).
  if (options_.on_nonfinite_loss() != "ignore") {
    for (const auto& parameter : fit_->module().named_parameters()) {
      HOTLOOP_CHECK(
          at::isfinite(parameter.value()).all().item<bool>(),
          "training diverged: parameter '",
          parameter.key(),
          "' is not finite at step ",
          progress_.global_step,
          "; ",
          path,
          " was not written. Lower optimizer.lr, clip gradients "
          "(trainer.gradient_clip_val), or train in float32 "
          "(trainer.precision=32)");
    }
  }
  Module& module = fit_->module();
  // What a callback changed in the module for the file is put back, in
  // reverse order, whether the write succeeds or not.
  size_t prepared = 0;
  const auto restore = c10::make_scope_exit([&] {
    while (prepared > 0) {
      active_callbacks_[--prepared]->on_save_checkpoint_end(*this, module);
    }
  });
  for (; prepared < active_callbacks_.size(); ++prepared) {
    active_callbacks_[prepared]->on_save_checkpoint(*this, module);
  }
  CheckpointState checkpoint = fit_->checkpoint_state();
  nlohmann::json states = nlohmann::json::object();
  for (const auto& callback : active_callbacks_) {
    nlohmann::json state = callback->state_dict();
    if (!state.is_null()) {
      states[callback->state_key()] = std::move(state);
    }
    std::vector<at::Tensor> tensors = callback->state_tensors();
    if (!tensors.empty()) {
      checkpoint.callback_tensors[callback->state_key()] = std::move(tensors);
    }
  }
  checkpoint.progress = progress_;
  checkpoint.callbacks = states.empty() ? std::string() : states.dump();
  checkpoint.loop.callback_metrics = callback_metrics_;
  train::save_checkpoint(path, module, checkpoint);
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
  // Lightning's default loggers, unless the caller brought their own.
  if (options_.logger() && loggers_.empty() && !run_dir.empty()) {
    add_logger(std::make_shared<log::CsvLogger>(run_dir));
    auto tensorboard = std::make_shared<log::TensorBoardLogger>(run_dir);
    add_logger(tensorboard).add_callback(tensorboard);
  }
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
    active_callbacks_.push_back(
        std::make_shared<Timer>(options_.max_time(), "step", shows_progress()));
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
  if (const std::optional<c10::Device> placed = module.input_device()) {
    input_device_ = *placed; // it keeps the devices it chose
  } else {
    module.to(device_);
    input_device_ = device_;
  }
  if (options_.channels_last()) {
    // to(), as PyTorch's Module.to(memory_format=...), not contiguous(): a
    // weight with one input channel (a grayscale model's first conv) or a
    // 1x1 kernel is contiguous in both formats, so contiguous() keeps its
    // NCHW strides, and cuDNN, which reads the layout from the strides,
    // ran that conv and the BatchNorm and pooling after it in NCHW (the
    // Fashion-MNIST CNN on the H200: 0.42 ms of its 1.56 ms step).
    at::NoGradGuard no_grad;
    for (at::Tensor parameter : module.parameters()) {
      if (parameter.dim() == 4) {
        parameter.set_data(parameter.to(
            parameter.options(),
            /*non_blocking=*/false,
            /*copy=*/false,
            at::MemoryFormat::ChannelsLast));
      }
    }
  }
}

data::Batch Trainer::prepare_batch(
    const Precision& precision, const data::Batch& batch) const {
  // Pinned host memory makes these copies asynchronous.
  data::Batch placed =
      data::transformed(batch, [this](const at::Tensor& tensor) {
        return tensor.device() == input_device_
                   ? tensor
                   : tensor.to(input_device_, /*non_blocking=*/true);
      });
  // The model's inputs (the input and floating fields, such as a second
  // image) take its memory format and, under a true precision, its compute
  // dtype; the target stays as loaded, for the loss.
  auto model_input = [&](at::Tensor& tensor) {
    if (options_.channels_last() && tensor.dim() == 4) {
      tensor = tensor.contiguous(at::MemoryFormat::ChannelsLast);
    }
    tensor = precision.convert_input(tensor);
  };
  model_input(placed.input);
  for (auto& [name, field] : placed.fields) {
    if (field.is_floating_point()) {
      model_input(field);
    }
  }
  return placed;
}

Precision Trainer::precision_for(Module& module) const {
  return Precision(parse_precision_mode(options_.precision()), device_);
}

FitResult Trainer::fit(
    Module& module,
    data::DataLoader& train,
    data::DataLoader* val,
    const std::string& ckpt_path) {
  const StreamState keep(out_);
  detail::FitLoop loop(*this, module, train, val);
  fit_ = &loop;
  try {
    FitResult result = loop.run(ckpt_path);
    write_summary(
        log_dir_, result, profile_context(module, train), model_summary_);
    finalize_loggers(
        result.metrics, result.interrupted ? "interrupted" : "success");
    strategy_->barrier(); // no process leaves while another still writes
    strategy_->teardown();
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
    const std::exception_ptr cause = strategy_->abort(error);
    try {
      // What was logged before the error is kept.
      flush_logs();
      finalize_loggers(callback_metrics_, "failed");
      strategy_->teardown();
    } catch (...) {
    }
    fit_ = nullptr;
    if (cause != nullptr) {
      std::rethrow_exception(cause);
    }
    throw;
  }
}

int Trainer::apply_runtime_settings(int64_t num_workers) {
  if (options_.seed() >= 0) {
    seed_everything(static_cast<uint64_t>(options_.seed()));
  }
  // The processes of a data-parallel run on this machine share its cores.
  const int threads =
      apply_host_settings(options_, num_workers, strategy_->local_world_size());
  if (device_.is_cuda()) {
    // Lightning's set_device: work that names no device (a library's
    // allocations, NCCL) goes to this process's GPU, not to GPU 0.
    c10::impl::VirtualGuardImpl(device_.type()).setDevice(device_);
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
  at::globalContext().setBenchmarkLimitCuDNN(
      static_cast<int>(options_.benchmark_limit()));
  compat::set_sdpa_backend(options_.sdpa_backend());
  return threads;
}

int apply_host_settings(
    const TrainerOptions& options,
    int64_t num_workers,
    int64_t local_processes) {
  configure_intra_op_threads(
      static_cast<int>(options.num_threads()),
      static_cast<int>(num_workers),
      static_cast<int>(local_processes));
  if (options.blas_threads() > 0) {
    set_blas_threads(static_cast<int>(options.blas_threads()));
  }
  if (options.retain_host_memory()) {
    retain_freed_host_memory();
  }
  // The count LibTorch runs with after every call above (the fit line
  // prints it), not the one asked for.
  return at::get_num_threads();
}

void Trainer::flush_logs() {
  if (pending_logs_.empty()) {
    return;
  }
  if (options_.fast_dev_run() == 0 && strategy_->is_global_zero()) {
    for (const auto& logger : loggers_) {
      logger->log_metrics(pending_logs_, progress_.global_step);
    }
  }
  pending_logs_.clear();
}

void Trainer::flush_loggers() {
  if (strategy_->is_global_zero()) {
    for (const auto& logger : loggers_) {
      logger->flush();
    }
  }
}

void Trainer::finalize_loggers(
    const std::map<std::string, double>& metrics, const std::string& status) {
  if (options_.fast_dev_run() > 0 || !strategy_->is_global_zero()) {
    return;
  }
  for (const auto& logger : loggers_) {
    if (!hyperparams_.empty()) {
      logger->log_hyperparams(hyperparams_, metrics);
    }
    logger->finalize(status);
  }
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
  return evaluate(module, loader, ckpt_path, /*test=*/false);
}

std::map<std::string, double> Trainer::test(
    Module& module, data::DataLoader& loader, const std::string& ckpt_path) {
  return evaluate(module, loader, ckpt_path, /*test=*/true);
}

std::map<std::string, double> Trainer::evaluate(
    Module& module,
    data::DataLoader& loader,
    const std::string& ckpt_path,
    bool test) {
  const StreamState keep(out_);
  const Precision precision = prepare_evaluation(module, loader, ckpt_path);
  std::unique_ptr<data::DataLoader> share;
  data::DataLoader& shared = share_of(loader, share);
  for (const auto& callback : callbacks_) {
    if (test) {
      callback->on_test_start(*this, module);
    } else {
      callback->on_validation_start(*this, module);
    }
  }
  const int64_t limit = detail::resolve_limit_everywhere(
      *strategy_,
      test ? options_.limit_test_batches() : options_.limit_val_batches(),
      shared.length(),
      test ? "limit_test_batches" : "limit_val_batches");
  const MetricCollection pass =
      detail::EvaluationLoop(*this, module, precision, callbacks_)
          .run(
              shared,
              test ? detail::Stage::kTest : detail::Stage::kValidate,
              limit);
  callback_metrics_ = pass.compute();
  callback_counts_ = pass.counts();
  for (const auto& callback : callbacks_) {
    if (test) {
      callback->on_test_end(*this, module);
    } else {
      callback->on_validation_end(*this, module);
    }
  }
  return callback_metrics_;
}

std::vector<at::Tensor> Trainer::predict(
    Module& module, data::DataLoader& loader, const std::string& ckpt_path) {
  const StreamState keep(out_);
  const Precision precision = prepare_evaluation(module, loader, ckpt_path);
  detail::EvaluationLoop loop(*this, module, precision, callbacks_);
  return detail::predict_in_shares(
      *strategy_,
      loader,
      options_.limit_predict_batches(),
      device_,
      [&](data::DataLoader& share, int64_t batches) {
        return loop.predict(share, batches);
      });
}

data::DataLoader& Trainer::share_of(
    data::DataLoader& loader, std::unique_ptr<data::DataLoader>& share) const {
  if (strategy_->world_size() == 1) {
    return loader;
  }
  // Each process evaluates its share; the metrics are reduced over all.
  share = data::shard(
      loader, strategy_->world_size(), strategy_->rank(), /*training=*/false);
  return *share;
}

ProfileContext Trainer::profile_context(
    const Module& module, const data::DataLoader& train) const {
  ProfileContext context;
  context.num_workers = train.options().num_workers();
  context.pin_memory = train.options().pin_memory();
  context.cuda = device_.is_cuda();
  context.log_every_n_steps = options_.log_every_n_steps();
  context.precision = options_.precision();
  context.channels_last = options_.channels_last();
  for (const at::Tensor& parameter : module.parameters()) {
    context.convolutional = context.convolutional || parameter.dim() == 4;
  }
  context.cuda_graphs = options_.cuda_graphs();
  // data.batch_size sets the batch unless a batch sampler makes the
  // batches, or the loader does not batch (batch_size=None).
  const data::DataLoaderOptions& loading = train.options();
  const std::optional<int64_t> samples = train.dataset_size();
  context.batch_can_grow = loading.batch_size() && !loading.batch_sampler() &&
                           (!samples || *loading.batch_size() < *samples);
  return context;
}

log::ModelSummary Trainer::summarize(
    Module& module, data::DataLoader& train, const Precision& precision) {
  // One sample through predict_step gives the layers' output shapes when
  // the model is a chain of Sequentials (zeros of the spec when the data is
  // a stream); any failure just leaves them out.
  data::Batch example;
  try {
    const data::SampleSpec& spec = train.spec();
    data::Batch sample;
    if (train.iterable()) {
      sample.input = at::zeros(spec.input_shape, spec.input_dtype);
      for (const auto& [name, field] : spec.fields) {
        sample.fields.emplace(name, at::zeros(field.shape, field.dtype));
      }
    } else {
      data::Example first = train.dataset().get(0, data::SampleContext{});
      sample.input = std::move(first.input);
      sample.fields = std::move(first.fields);
    }
    example = data::transformed(
        prepare_batch(precision, sample),
        [](const at::Tensor& tensor) { return tensor.unsqueeze(0); });
  } catch (const std::exception&) {
    example = data::Batch{};
  }
  // One sample is no shape to tune convolutions for.
  const detail::CudnnBenchmarkOff one_off;
  return log::summarize_model(
      module, /*max_depth=*/3, example.input, [&](const at::Tensor& input) {
        return module.predict_step(
            data::Batch{input, at::Tensor(), example.fields}, 0);
      });
}

} // namespace hotloop::train
