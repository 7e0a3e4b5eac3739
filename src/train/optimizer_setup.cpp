#include "hotloop/train/optimizer_setup.h"

#include "hotloop/optim/lr_scheduler.h"

namespace hotloop::train {

OptimizerSetup make_optimizer_setup(
    torch::nn::Module& module,
    const optim::OptimizerOptions& optimizer,
    const optim::SchedulerOptions& scheduler,
    const FitPlan& plan) {
  OptimizerSetup setup;
  setup.optimizer = optim::make_optimizer(module, optimizer);
  setup.interval = scheduler.interval == "epoch" ? ScheduleInterval::kEpoch
                                                 : ScheduleInterval::kStep;
  const int64_t horizon = setup.interval == ScheduleInterval::kEpoch
                              ? plan.max_epochs
                              : plan.total_steps;
  setup.scheduler = optim::make_scheduler(*setup.optimizer, scheduler, horizon);
  setup.monitor = scheduler.monitor;
  return setup;
}

} // namespace hotloop::train
