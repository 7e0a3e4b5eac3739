#include "hotloop/train/network_module.h"

#include "hotloop/optim/lr_scheduler.h"

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
  OptimizerSetup setup;
  setup.optimizer = optim::make_optimizer(*this, optimizer_options_);
  setup.interval = scheduler_options_.interval == "epoch"
                       ? ScheduleInterval::kEpoch
                       : ScheduleInterval::kStep;
  const int64_t horizon = setup.interval == ScheduleInterval::kEpoch
                              ? plan.max_epochs
                              : plan.total_steps;
  setup.scheduler =
      optim::make_scheduler(*setup.optimizer, scheduler_options_, horizon);
  setup.monitor = scheduler_options_.monitor;
  return setup;
}

} // namespace hotloop::train
