#include "hotloop/train/lr_monitor.h"

#include "hotloop/core/error.h"
#include "hotloop/train/trainer.h"

#include <c10/util/Type.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <optional>
#include <typeinfo>

namespace hotloop::train {
namespace {

// "torch::optim::AdamW" -> "AdamW", as Lightning names the metric; the
// multi-tensor hotloop::optim::ForeachAdamW is an AdamW too, as PyTorch's
// AdamW(foreach=True) is.
std::string optimizer_name(const torch::optim::Optimizer& optimizer) {
  const std::string name = c10::demangle(typeid(optimizer).name());
  const size_t colon = name.rfind("::");
  std::string last = colon == std::string::npos ? name : name.substr(colon + 2);
  const std::string foreach = "Foreach";
  if (last.rfind(foreach, 0) == 0 && last.size() > foreach.size()) {
    last = last.substr(foreach.size());
  }
  return last;
}

std::optional<double> momentum_of(torch::optim::OptimizerOptions& options) {
  if (auto* sgd = dynamic_cast<torch::optim::SGDOptions*>(&options)) {
    return sgd->momentum();
  }
  if (auto* adam = dynamic_cast<torch::optim::AdamOptions*>(&options)) {
    return std::get<0>(adam->betas());
  }
  if (auto* adamw = dynamic_cast<torch::optim::AdamWOptions*>(&options)) {
    return std::get<0>(adamw->betas());
  }
  if (auto* rms = dynamic_cast<torch::optim::RMSpropOptions*>(&options)) {
    return rms->momentum();
  }
  return std::nullopt;
}

} // namespace

LearningRateMonitor::LearningRateMonitor(
    std::string logging_interval, bool log_momentum)
    : logging_interval_(std::move(logging_interval)),
      log_momentum_(log_momentum) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      logging_interval_.empty() || logging_interval_ == "step" ||
          logging_interval_ == "epoch",
      "lr_monitor.logging_interval: expected step, epoch or empty, got '",
      logging_interval_,
      "'");
}

bool LearningRateMonitor::by_step(Trainer& trainer) const {
  if (!logging_interval_.empty()) {
    return logging_interval_ == "step";
  }
  // Per step unless every schedule steps per epoch.
  const auto& schedules = trainer.lr_schedules();
  return std::any_of(
             schedules.begin(),
             schedules.end(),
             [](const ScheduleConfig& schedule) {
               return schedule.interval == ScheduleInterval::kStep;
             }) ||
         schedules.empty();
}

std::map<std::string, double> LearningRateMonitor::learning_rates(
    Trainer& trainer) const {
  std::map<std::string, double> values;
  // Lightning's names: lr-AdamW, a second AdamW is lr-AdamW-1, and groups
  // of one optimizer add /pgN.
  std::map<std::string, int64_t> seen;
  for (torch::optim::Optimizer* optimizer : trainer.optimizers()) {
    std::string base = "lr-" + optimizer_name(*optimizer);
    const int64_t repeat = seen[base]++;
    if (repeat > 0) {
      base.append("-").append(std::to_string(repeat));
    }
    auto& groups = optimizer->param_groups();
    for (size_t i = 0; i < groups.size(); ++i) {
      const std::string name =
          groups.size() == 1 ? base : base + "/pg" + std::to_string(i + 1);
      values[name] = groups[i].options().get_lr();
      if (log_momentum_) {
        if (const auto momentum = momentum_of(groups[i].options())) {
          values[name + "-momentum"] = *momentum;
        }
      }
    }
  }
  return values;
}

void LearningRateMonitor::on_train_epoch_start(
    Trainer& trainer, Module& module) {
  if (!by_step(trainer)) {
    trainer.log_metrics(learning_rates(trainer));
  }
}

void LearningRateMonitor::on_before_optimizer_step(
    Trainer& trainer, Module& module, torch::optim::Optimizer& optimizer) {
  // Before the step and before the schedule moves on: the rate this step
  // uses, logged in the record of the step it becomes.
  const int64_t every = trainer.options().log_every_n_steps();
  if (by_step(trainer) && every > 0 &&
      (trainer.global_step() + 1) % every == 0) {
    trainer.log_metrics(learning_rates(trainer));
  }
}

} // namespace hotloop::train
