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
  auto optimizer = optim::make_optimizer(*this, optimizer_options_);
  const ScheduleInterval interval = scheduler_options_.interval == "epoch"
                                        ? ScheduleInterval::kEpoch
                                        : ScheduleInterval::kStep;
  const int64_t horizon =
      interval == ScheduleInterval::kEpoch ? plan.max_epochs : plan.total_steps;
  auto scheduler =
      optim::make_scheduler(*optimizer, scheduler_options_, horizon);
  return OptimizerSetup(
      std::move(optimizer),
      std::move(scheduler),
      interval,
      scheduler_options_.monitor);
}

} // namespace hotloop::train
