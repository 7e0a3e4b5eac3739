#include "hotloop/train/network_module.h"

#include "hotloop/optim/lr_scheduler.h"

#include <algorithm>

namespace hotloop::train {

NetworkModule::NetworkModule(
    torch::nn::AnyModule network,
    optim::OptimizerOptions optimizer,
    optim::SchedulerOptions scheduler)
    : network_(std::move(network)),
      optimizer_options_(std::move(optimizer)),
      scheduler_options_(std::move(scheduler)) {
  register_module("network", network_.ptr());
}

at::Tensor NetworkModule::forward(const at::Tensor& input) {
  return network_.forward(input);
}

OptimizerSetup NetworkModule::configure_optimizers(const FitPlan& plan) {
  auto optimizer = optim::make_optimizer(*this, optimizer_options_);
  const ScheduleInterval interval = scheduler_options_.interval == "epoch"
                                        ? ScheduleInterval::kEpoch
                                        : ScheduleInterval::kStep;
  // The schedule takes one step per `frequency` intervals of the fit.
  const int64_t intervals =
      interval == ScheduleInterval::kEpoch ? plan.max_epochs : plan.total_steps;
  const int64_t frequency = std::max<int64_t>(scheduler_options_.frequency, 1);
  // -1: the fit has no end (max_epochs=-1), which only a schedule that
  // needs no length takes.
  const int64_t horizon = intervals < 0 ? -1 : intervals / frequency;
  auto scheduler =
      optim::make_scheduler(*optimizer, scheduler_options_, horizon);
  OptimizerSetup setup(
      std::move(optimizer),
      std::move(scheduler),
      interval,
      scheduler_options_.monitor);
  if (!setup.schedules.empty()) {
    setup.schedules.front().frequency = scheduler_options_.frequency;
  }
  return setup;
}

} // namespace hotloop::train
