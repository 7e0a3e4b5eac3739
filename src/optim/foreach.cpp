#include "hotloop/optim/foreach.h"

#include <ATen/ATen.h>

#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace hotloop::optim {
namespace {

using Tensors = std::vector<at::Tensor>;

// The key of a parameter's entry in Optimizer::state_: the address of its
// TensorImpl, as text in LibTorch 1.13 (c10::guts::to_string), as such from
// 2.x on.
template <typename Key>
Key state_key(const at::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream text;
    text << p.unsafeGetTensorImpl();
    return text.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

// The parameters of a group that have a gradient, and their gradients.
struct Stepped {
  Tensors params;
  Tensors grads;
};

Stepped with_gradients(
    torch::optim::OptimizerParamGroup& group, const char* optimizer) {
  Stepped out;
  for (const at::Tensor& p : group.params()) {
    if (!p.grad().defined()) {
      continue;
    }
    TORCH_CHECK(
        !p.grad().is_sparse(), optimizer, " does not support sparse gradients");
    out.params.push_back(p);
    out.grads.push_back(p.grad());
  }
  return out;
}

// What every multi-tensor step does around its update: the closure's loss
// (with gradients on), then `update(options, stepped)` without gradients
// for each group that has a parameter with a gradient.
template <typename Options, typename Update>
torch::Tensor step_groups(
    std::vector<torch::optim::OptimizerParamGroup>& groups,
    const torch::optim::Optimizer::LossClosure& closure,
    const char* optimizer,
    const Update& update) {
  torch::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  at::NoGradGuard no_grad;
  for (auto& group : groups) {
    Stepped stepped = with_gradients(group, optimizer);
    if (!stepped.params.empty()) {
      update(static_cast<const Options&>(group.options()), stepped);
    }
  }
  return loss;
}

// Adam's and AdamW's update after weight decay, on every parameter of
// `stepped` at once: the moments, then p -= lr / (1 - beta1^t) * m /
// (sqrt(v) / sqrt(1 - beta2^t) + eps), with each parameter's own t.
template <typename State, typename Options, typename StateMap>
void adam_update(
    StateMap& states,
    const Options& options,
    const Tensors& params,
    const Tensors& grads) {
  using Key = typename StateMap::key_type;
  const double beta1 = std::get<0>(options.betas());
  const double beta2 = std::get<1>(options.betas());
  Tensors exp_avgs;
  Tensors exp_avg_sqs;
  std::vector<State*> stepped;
  for (const at::Tensor& p : params) {
    auto& entry = states[state_key<Key>(p)];
    if (entry == nullptr) {
      auto state = std::make_unique<State>();
      state->step(0);
      state->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
      state->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
      if (options.amsgrad()) {
        state->max_exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
      }
      entry = std::move(state);
    }
    auto& state = static_cast<State&>(*entry);
    state.step(state.step() + 1);
    exp_avgs.push_back(state.exp_avg());
    exp_avg_sqs.push_back(state.exp_avg_sq());
    stepped.push_back(&state);
  }
  at::_foreach_mul_(exp_avgs, beta1);
  at::_foreach_add_(exp_avgs, grads, 1 - beta1);
  at::_foreach_mul_(exp_avg_sqs, beta2);
  at::_foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2);

  Tensors second = exp_avg_sqs;
  if (options.amsgrad()) {
    for (size_t i = 0; i < stepped.size(); ++i) {
      at::Tensor& most = stepped[i]->max_exp_avg_sq();
      at::max_out(most, exp_avg_sqs[i], most);
      second[i] = most;
    }
  }
  std::vector<at::Scalar> root_correction;
  std::vector<at::Scalar> step_size;
  for (const State* state : stepped) {
    const auto t = state->step();
    root_correction.emplace_back(std::sqrt(1 - std::pow(beta2, t)));
    step_size.emplace_back(-options.lr() / (1 - std::pow(beta1, t)));
  }
  Tensors denom = at::_foreach_sqrt(second);
  at::_foreach_div_(denom, root_correction);
  at::_foreach_add_(denom, options.eps());
  at::_foreach_addcdiv_(params, exp_avgs, denom, step_size);
}

} // namespace

bool ForeachChoice::uses_foreach(
    const std::vector<torch::optim::OptimizerParamGroup>& groups) const {
  if (foreach_.has_value()) {
    return *foreach_;
  }
  for (const auto& group : groups) {
    for (const at::Tensor& p : group.params()) {
      if (!p.is_cuda()) {
        return false;
      }
    }
  }
  return true;
}

torch::Tensor ForeachSGD::step(LossClosure closure) {
  if (!uses_foreach(param_groups_)) {
    return torch::optim::SGD::step(std::move(closure));
  }
  using Key = std::decay_t<decltype(state_)>::key_type;
  return step_groups<torch::optim::SGDOptions>(
      param_groups_,
      closure,
      "SGD",
      [&](const auto& options, Stepped& stepped) {
        Tensors steps =
            options.weight_decay() != 0
                ? at::_foreach_add(
                      stepped.grads, stepped.params, options.weight_decay())
                : stepped.grads;
        if (options.momentum() != 0) {
          // A first step's buffer is its gradient; later ones decay into it.
          Tensors buffers;
          Tensors kept_buffers;
          Tensors kept_steps;
          for (size_t i = 0; i < stepped.params.size(); ++i) {
            auto& entry = state_[state_key<Key>(stepped.params[i])];
            if (entry == nullptr) {
              auto state = std::make_unique<torch::optim::SGDParamState>();
              state->momentum_buffer(torch::clone(steps[i]).detach());
              buffers.push_back(state->momentum_buffer());
              entry = std::move(state);
            } else {
              auto& state = static_cast<torch::optim::SGDParamState&>(*entry);
              buffers.push_back(state.momentum_buffer());
              kept_buffers.push_back(state.momentum_buffer());
              kept_steps.push_back(steps[i]);
            }
          }
          if (!kept_buffers.empty()) {
            at::_foreach_mul_(kept_buffers, options.momentum());
            at::_foreach_add_(
                kept_buffers, kept_steps, 1 - options.dampening());
          }
          steps = options.nesterov()
                      ? at::_foreach_add(steps, buffers, options.momentum())
                      : buffers;
        }
        at::_foreach_add_(stepped.params, steps, -1 * options.lr());
      });
}

torch::Tensor ForeachAdam::step(LossClosure closure) {
  if (!uses_foreach(param_groups_)) {
    return torch::optim::Adam::step(std::move(closure));
  }
  return step_groups<torch::optim::AdamOptions>(
      param_groups_,
      closure,
      "Adam",
      [&](const auto& options, Stepped& stepped) {
        if (options.weight_decay() != 0) {
          stepped.grads = at::_foreach_add(
              stepped.grads, stepped.params, options.weight_decay());
        }
        adam_update<torch::optim::AdamParamState>(
            state_, options, stepped.params, stepped.grads);
      });
}

torch::Tensor ForeachAdamW::step(LossClosure closure) {
  if (!uses_foreach(param_groups_)) {
    return torch::optim::AdamW::step(std::move(closure));
  }
  return step_groups<torch::optim::AdamWOptions>(
      param_groups_,
      closure,
      "AdamW",
      [&](const auto& options, Stepped& stepped) {
        if (options.weight_decay() != 0) {
          at::_foreach_mul_(
              stepped.params, 1 - options.lr() * options.weight_decay());
        }
        adam_update<torch::optim::AdamWParamState>(
            state_, options, stepped.params, stepped.grads);
      });
}

} // namespace hotloop::optim
