#pragma once

#include "hotloop/optim/optimizer_factory.h"
#include "hotloop/train/module.h"

namespace hotloop::train {

/// What configure_optimizers returns for modules driven by the config's
/// `optimizer` and `lr_scheduler` sections: the optimizer over `module`'s
/// parameters and the schedule, sized for `plan` (steps or epochs, as the
/// schedule's interval says).
OptimizerSetup make_optimizer_setup(
    torch::nn::Module& module,
    const optim::OptimizerOptions& optimizer,
    const optim::SchedulerOptions& scheduler,
    const FitPlan& plan);

} // namespace hotloop::train
