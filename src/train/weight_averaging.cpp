#include "hotloop/train/weight_averaging.h"

#include "hotloop/core/error.h"
#include "hotloop/data/dataloader.h"
#include "hotloop/dist/sync_batch_norm.h"
#include "hotloop/train/module.h"
#include "hotloop/train/trainer.h"

#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_div.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_sub.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ScopeExit.h>
#include <c10/util/irange.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>

#include <nlohmann/json.hpp>

#include <utility>

namespace hotloop::train {

namespace {

/// Parameters, then buffers, in the module's order (AveragedModel's
/// itertools.chain(parameters(), buffers())).
std::vector<at::Tensor> weights(torch::nn::Module& module) {
  std::vector<at::Tensor> all = module.parameters();
  for (const at::Tensor& buffer : module.buffers()) {
    all.push_back(buffer);
  }
  return all;
}

/// Writes `values` into the module's parameters and buffers, in place.
void copy_into(
    torch::nn::Module& module, const std::vector<at::Tensor>& values) {
  const at::NoGradGuard no_grad;
  std::vector<at::Tensor> current = weights(module);
  HOTLOOP_CHECK(
      current.size() == values.size(),
      "weight averaging: the model has ",
      current.size(),
      " parameters and buffers, the average ",
      values.size());
  for (const auto i : c10::irange(current.size())) {
    current[i].copy_(values[i]);
  }
}

/// float16 and bfloat16 are averaged in float32.
at::ScalarType average_type(const at::Tensor& weight) {
  const at::ScalarType type = weight.scalar_type();
  return type == at::kHalf || type == at::kBFloat16 ? at::kFloat : type;
}

} // namespace

WeightAverage::WeightAverage(WeightAverageOptions options)
    : options_(std::move(options)) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.average() == "ema" || options_.average() == "swa",
      "weight_averaging.average must be ema or swa, got '",
      options_.average(),
      "'");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.decay() >= 0 && options_.decay() < 1,
      "weight_averaging.decay must be in [0, 1), got ",
      options_.decay());
}

void WeightAverage::update(torch::nn::Module& module) {
  const at::NoGradGuard no_grad;
  const std::vector<at::Tensor> current = weights(module);
  if (count_ == 0) {
    tensors_.clear();
    for (const at::Tensor& weight : current) {
      tensors_.push_back(weight.detach().to(
          average_type(weight),
          /*non_blocking=*/false,
          /*copy=*/true));
    }
    count_ = 1;
    return;
  }
  HOTLOOP_CHECK(
      current.size() == tensors_.size(),
      "weight averaging: the model now has ",
      current.size(),
      " parameters and buffers, ",
      tensors_.size(),
      " when the average began (was it pruned since? the average follows "
      "one set of weights)");
  const size_t parameters = module.parameters().size();
  std::vector<at::Tensor> averaged;
  std::vector<at::Tensor> model;
  for (const auto i : c10::irange(current.size())) {
    const at::Tensor& weight = current[i];
    at::Tensor& average = tensors_[i];
    HOTLOOP_CHECK(
        weight.sizes() == average.sizes(),
        "weight averaging: weight ",
        i,
        " of the model changed shape since the average began");
    if (!at::isFloatingType(average.scalar_type()) ||
        (i >= parameters && !options_.use_buffers())) {
      average.copy_(weight);
      continue;
    }
    averaged.push_back(average);
    model.push_back(weight.detach().to(average.scalar_type()));
  }
  if (averaged.empty()) {
    ++count_;
    return;
  }
  if (options_.average() == "ema") {
    // get_ema_avg_fn: decay * average + (1 - decay) * current, op for op.
    at::_foreach_mul_(averaged, options_.decay());
    at::_foreach_add_(averaged, at::_foreach_mul(model, 1 - options_.decay()));
  } else {
    // AveragedModel's default: average + (current - average) / (n + 1).
    std::vector<at::Tensor> step = at::_foreach_sub(model, averaged);
    at::_foreach_div_(step, static_cast<double>(count_ + 1));
    at::_foreach_add_(averaged, step);
  }
  ++count_;
}

void WeightAverage::copy_to(torch::nn::Module& module) const {
  copy_into(module, tensors_);
}

void WeightAverage::set(std::vector<at::Tensor> tensors, int64_t count) {
  tensors_ = std::move(tensors);
  count_ = count;
}

namespace {

/// A BatchNorm's running statistics and the momentum update_bn sets aside.
struct RunningStatistics {
  torch::nn::BatchNormOptions* options;
  // c10::optional on LibTorch 1.13, std::optional on 2.x.
  std::decay_t<decltype(std::declval<torch::nn::BatchNormOptions>().momentum())>
      momentum;
  at::Tensor mean;
  at::Tensor var;
  at::Tensor count;
};

template <typename Norm>
bool add_norm(
    const std::shared_ptr<torch::nn::Module>& module,
    std::vector<RunningStatistics>& found) {
  auto* norm = module->as<Norm>();
  if (norm == nullptr) {
    return false;
  }
  if (norm->options.track_running_stats()) {
    found.push_back(
        {&norm->options,
         norm->options.momentum(),
         norm->running_mean,
         norm->running_var,
         norm->num_batches_tracked});
  }
  return true;
}

} // namespace

void update_bn(
    data::DataLoader& loader,
    torch::nn::Module& model,
    const std::function<void(const at::Tensor&)>& forward,
    c10::Device device) {
  std::vector<RunningStatistics> norms;
  for (const auto& module : model.modules(/*include_self=*/true)) {
    add_norm<torch::nn::BatchNorm1dImpl>(module, norms) ||
        add_norm<torch::nn::BatchNorm2dImpl>(module, norms) ||
        add_norm<torch::nn::BatchNorm3dImpl>(module, norms) ||
        add_norm<dist::SyncBatchNormImpl>(module, norms);
  }
  if (norms.empty()) {
    return;
  }
  const at::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  const auto restore = c10::make_scope_exit([&] {
    for (RunningStatistics& norm : norms) {
      norm.options->momentum(norm.momentum);
    }
    model.train(was_training);
  });
  for (RunningStatistics& norm : norms) {
    norm.mean.zero_();
    norm.var.fill_(1);
    norm.count.zero_();
    norm.options->momentum({});
  }
  model.train();
  for (const data::Batch& batch : loader) {
    forward(batch.input.to(device, /*non_blocking=*/true));
  }
}

WeightAveraging::WeightAveraging(WeightAveragingOptions options)
    : options_(std::move(options)), average_(options_.average()) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.update_every_n_steps() >= 0,
      "weight_averaging.update_every_n_steps must be >= 0, got ",
      options_.update_every_n_steps());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.update_starting_at_step() >= 0,
      "weight_averaging.update_starting_at_step must be >= 0, got ",
      options_.update_starting_at_step());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.update_starting_at_epoch() >= -1,
      "weight_averaging.update_starting_at_epoch must be >= 0, or -1 for "
      "none, got ",
      options_.update_starting_at_epoch());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.update_every_n_steps() > 0 ||
          options_.update_starting_at_epoch() >= 0,
      "weight averaging never updates: set weight_averaging."
      "update_every_n_steps > 0 or update_starting_at_epoch >= 0");
}

std::string WeightAveraging::state_key() const {
  return "WeightAveraging";
}

void WeightAveraging::setup(Trainer& trainer, Module& module) {
  average_ = WeightAverage(options_.average());
  latest_update_step_ = 0;
  latest_update_epoch_ = -1;
  trained_.clear();
  shown_for_save_ = false;
  shown_for_validation_ = false;
  restored_.clear();
  restored_count_ = 0;
}

void WeightAveraging::on_fit_start(Trainer& trainer, Module& module) {
  HOTLOOP_CHECK(
      restored_count_ == 0 || !restored_.empty(),
      "weight averaging: the checkpoint counts ",
      restored_count_,
      " updates of the average but holds none of its tensors");
  if (!restored_.empty()) {
    restore(module);
  }
  // A checkpoint written at an epoch's end (after its validation, before
  // on_train_epoch_end) came before that epoch's update: do it now, on the
  // weights that epoch ended with.
  const TrainingProgress& progress = trainer.progress();
  const int64_t finished = progress.epoch - 1;
  const int64_t start = options_.update_starting_at_epoch();
  if (progress.epoch_batches == 0 && start >= 0 && finished >= start &&
      latest_update_epoch_ < finished) {
    average_.update(module);
    latest_update_epoch_ = finished;
  }
}

void WeightAveraging::restore(Module& module) {
  // The checkpoint's model is the average; its state holds the trained
  // weights, then the averages kept in float32 for reduced-precision ones.
  const at::NoGradGuard no_grad;
  std::vector<at::Tensor> current = weights(module);
  HOTLOOP_CHECK(
      restored_.size() >= current.size(),
      "weight averaging: the checkpoint holds ",
      restored_.size(),
      " of its tensors, the model has ",
      current.size(),
      " parameters and buffers");
  std::vector<at::Tensor> averages;
  size_t extra = current.size();
  for (const auto i : c10::irange(current.size())) {
    HOTLOOP_CHECK(
        restored_[i].sizes() == current[i].sizes(),
        "weight averaging: the checkpoint's weight ",
        i,
        " has another shape than the model's");
    if (average_type(current[i]) != current[i].scalar_type()) {
      HOTLOOP_CHECK(
          extra < restored_.size(),
          "weight averaging: the checkpoint lacks the float32 average of "
          "weight ",
          i);
      averages.push_back(restored_[extra++]);
    } else {
      averages.push_back(current[i].detach().clone());
    }
    current[i].copy_(restored_[i]);
  }
  average_.set(std::move(averages), restored_count_);
  restored_.clear();
}

bool WeightAveraging::updates_after_step(int64_t step_idx) const {
  const int64_t every = options_.update_every_n_steps();
  return every > 0 && step_idx >= options_.update_starting_at_step() &&
         step_idx % every == 0;
}

void WeightAveraging::on_train_batch_end(
    Trainer& trainer,
    Module& module,
    const at::Tensor& loss,
    const data::Batch& batch,
    int64_t batch_idx) {
  // Once per optimizer step (the last micro-batch of an accumulation).
  const int64_t step = trainer.global_step();
  if (step > latest_update_step_ && updates_after_step(step - 1)) {
    average_.update(module);
    latest_update_step_ = step;
  }
}

void WeightAveraging::on_train_epoch_end(Trainer& trainer, Module& module) {
  const int64_t epoch = trainer.current_epoch();
  const int64_t start = options_.update_starting_at_epoch();
  if (start >= 0 && epoch >= start && epoch > latest_update_epoch_) {
    average_.update(module);
    latest_update_epoch_ = epoch;
  }
}

bool WeightAveraging::show(Module& module) {
  if (!trained_.empty() || average_.count() == 0) {
    return false;
  }
  const at::NoGradGuard no_grad;
  std::vector<at::Tensor> trained;
  for (const at::Tensor& weight : weights(module)) {
    trained.push_back(weight.detach().clone());
  }
  average_.copy_to(module); // kept aside only once the average is in
  trained_ = std::move(trained);
  return true;
}

void WeightAveraging::hide(Module& module) {
  copy_into(module, trained_);
  trained_.clear();
}

void WeightAveraging::on_validation_start(Trainer& trainer, Module& module) {
  shown_for_validation_ = trainer.fitting() && show(module);
}

void WeightAveraging::on_validation_end(Trainer& trainer, Module& module) {
  if (shown_for_validation_) {
    hide(module);
    shown_for_validation_ = false;
  }
}

void WeightAveraging::on_save_checkpoint(Trainer& trainer, Module& module) {
  shown_for_save_ = show(module);
}

void WeightAveraging::on_save_checkpoint_end(Trainer& trainer, Module& module) {
  if (shown_for_save_) {
    hide(module);
    shown_for_save_ = false;
  }
}

void WeightAveraging::on_fit_end(Trainer& trainer, Module& module) {
  // The module ends with the average. The trained weights stay aside, so
  // that a checkpoint another callback writes after this one still resumes
  // the training (until the next fit's setup).
  if (trained_.empty()) {
    show(module);
  }
  shown_for_validation_ = false;
}

void WeightAveraging::on_exception(
    Trainer& trainer, Module& module, const std::exception& error) {
  // A validation that threw leaves the trained weights in the module.
  if (!trained_.empty()) {
    hide(module);
  }
  shown_for_validation_ = false;
  shown_for_save_ = false;
}

nlohmann::json WeightAveraging::summary() const {
  nlohmann::json entry = {
      {"average", options_.average().average()}, {"updates", average_.count()}};
  if (options_.average().average() == "ema") {
    entry["decay"] = options_.average().decay();
  }
  return {{"weight_averaging", entry}};
}

nlohmann::json WeightAveraging::state_dict() const {
  return {
      {"count", average_.count()},
      {"latest_update_step", latest_update_step_},
      {"latest_update_epoch", latest_update_epoch_}};
}

void WeightAveraging::load_state_dict(const nlohmann::json& state) {
  restored_count_ = state.at("count").get<int64_t>();
  latest_update_step_ = state.at("latest_update_step").get<int64_t>();
  latest_update_epoch_ = state.at("latest_update_epoch").get<int64_t>();
}

std::vector<at::Tensor> WeightAveraging::state_tensors() const {
  // Only while the module shows the average, which is what every
  // checkpoint's model holds once there is one.
  std::vector<at::Tensor> out = trained_;
  for (const auto i : c10::irange(trained_.size())) {
    const at::Tensor& average = average_.tensors()[i];
    if (average.scalar_type() != trained_[i].scalar_type()) {
      out.push_back(average);
    }
  }
  return out;
}

void WeightAveraging::load_state_tensors(std::vector<at::Tensor> tensors) {
  restored_ = std::move(tensors);
}

} // namespace hotloop::train
