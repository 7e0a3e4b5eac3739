#include "hotloop/train/module.h"

#include "hotloop/core/error.h"
#include "hotloop/optim/lr_scheduler.h"

namespace hotloop::train {

OptimizerSetup::OptimizerSetup(
    std::unique_ptr<torch::optim::Optimizer> optimizer,
    std::unique_ptr<optim::LRScheduler> scheduler,
    ScheduleInterval interval,
    std::string monitor) {
  optimizers.push_back(std::move(optimizer));
  if (scheduler != nullptr) {
    ScheduleConfig schedule;
    schedule.scheduler = std::move(scheduler);
    schedule.interval = interval;
    schedule.monitor = std::move(monitor);
    schedules.push_back(std::move(schedule));
  }
}

OptimizerSetup::OptimizerSetup(OptimizerSetup&&) noexcept = default;
OptimizerSetup& OptimizerSetup::operator=(OptimizerSetup&&) noexcept = default;
OptimizerSetup::~OptimizerSetup() = default;

at::Tensor Module::predict_step(const data::Batch& batch, int64_t batch_idx) {
  throw Error(
      "Trainer::predict needs the Module to override predict_step, which "
      "this one does not");
}

} // namespace hotloop::train
