#include "hotloop/train/detail/trial.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>

namespace hotloop::train::detail {

ModuleSnapshot::ModuleSnapshot(torch::nn::Module& module)
    : module_(module), rng_(get_rng_states()) {
  for (const at::Tensor& parameter : module.parameters()) {
    parameters_.push_back(parameter.detach().clone());
  }
  for (const at::Tensor& buffer : module.buffers()) {
    buffers_.push_back(buffer.detach().clone());
  }
}

void ModuleSnapshot::restore() {
  const torch::NoGradGuard no_grad;
  const auto put_back = [](std::vector<at::Tensor> now,
                           const std::vector<at::Tensor>& saved) {
    for (size_t i = 0; i < now.size() && i < saved.size(); ++i) {
      now[i].copy_(saved[i]);
    }
  };
  std::vector<at::Tensor> parameters = module_.parameters();
  put_back(parameters, parameters_);
  put_back(module_.buffers(), buffers_);
  for (at::Tensor& parameter : parameters) {
    parameter.mutable_grad() = at::Tensor();
  }
  set_rng_states(rng_);
}

TrainerOptions trial_options(
    TrainerOptions options, int64_t steps, const data::DataLoader& train) {
  const int64_t batches = std::max<int64_t>(
      resolve_limit(
          options.limit_train_batches(), train.length(), "limit_train_batches"),
      1);
  const int64_t per_epoch = std::max<int64_t>(
      batches / std::max<int64_t>(options.accumulate_grad_batches(), 1), 1);
  return options.max_steps(steps)
      .max_epochs(steps / per_epoch + 2)
      .min_epochs(0)
      .max_time(0)
      .limit_val_batches(0)
      .num_sanity_val_steps(0)
      .enable_checkpointing(false)
      .logger(false)
      .default_root_dir("")
      .enable_progress_bar(false)
      .handle_signals(false)
      .profiler("")
      .fast_dev_run(0);
}

} // namespace hotloop::train::detail
