#include "hotloop/optim/foreach.h"

#include "hotloop/core/compat.h"
#include "hotloop/core/error.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
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
// A parameter's Adam or AdamW state, made (step 0, zero moments) on its
// first step as LibTorch's optimizers make it.
template <typename State, typename Options, typename StateMap>
State& adam_state(
    StateMap& states, const Options& options, const at::Tensor& p) {
  using Key = typename StateMap::key_type;
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
  return static_cast<State&>(*entry);
}

// The moments' update on every parameter of a group at once; returns the
// second moments the update divides by (their running maximum under
// amsgrad).
// With `beta1` (and `one_minus_beta1`), 0-dim device tensors, the first
// moment's decay is read from them (a graph step: a schedule may cycle
// beta1); otherwise from the options.
template <typename State, typename Options>
Tensors update_moments(
    const Options& options,
    const std::vector<State*>& stepped,
    const Tensors& grads,
    const at::Tensor* beta1 = nullptr,
    const at::Tensor* one_minus_beta1 = nullptr) {
  const double beta2 = std::get<1>(options.betas());
  Tensors exp_avgs;
  Tensors exp_avg_sqs;
  for (State* state : stepped) {
    exp_avgs.push_back(state->exp_avg());
    exp_avg_sqs.push_back(state->exp_avg_sq());
  }
  if (beta1 != nullptr) {
    compat::foreach_mul_(exp_avgs, *beta1);
    at::_foreach_add_(exp_avgs, compat::foreach_mul(grads, *one_minus_beta1));
  } else {
    const double decay = std::get<0>(options.betas());
    at::_foreach_mul_(exp_avgs, decay);
    at::_foreach_add_(exp_avgs, grads, 1 - decay);
  }
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
  return second;
}

template <typename State, typename Options, typename StateMap>
void adam_update(
    StateMap& states,
    const Options& options,
    const Tensors& params,
    const Tensors& grads) {
  const double beta1 = std::get<0>(options.betas());
  const double beta2 = std::get<1>(options.betas());
  std::vector<State*> stepped;
  Tensors exp_avgs;
  for (const at::Tensor& p : params) {
    State& state = adam_state<State>(states, options, p);
    state.step(state.step() + 1);
    stepped.push_back(&state);
    exp_avgs.push_back(state.exp_avg());
  }
  const Tensors second = update_moments(options, stepped, grads);
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

// The scalars of a graph step (GraphStep): each stepped parameter's values,
// in the order graph_step meets them, and the device they go to.
struct GraphScalars {
  std::vector<float> values;
  std::optional<c10::Device> device;

  void add(const at::Tensor& p, double value) {
    if (!device.has_value()) {
      device = p.device();
    }
    values.push_back(static_cast<float>(value));
  }
};

// A param group's stepped parameters (their states) by step count, in the
// order the counts first appear: Adam's bias corrections depend on t, so
// the parameters of one count share one set of graph-step scalars. A
// group's parameters step together, so that is normally one set; one
// whose first gradient came later has a count of its own.
template <typename State>
std::vector<std::vector<size_t>> by_step_count(
    const std::vector<State*>& states) {
  std::vector<int64_t> counts;
  std::vector<std::vector<size_t>> runs;
  for (size_t i = 0; i < states.size(); ++i) {
    const int64_t t = states[i]->step();
    const auto found = std::find(counts.begin(), counts.end(), t);
    if (found == counts.end()) {
      counts.push_back(t);
      runs.push_back({i});
    } else {
      runs[found - counts.begin()].push_back(i);
    }
  }
  return runs;
}

// Adam's and AdamW's graph-step scalars: every parameter with a gradient
// gets its step count advanced, then each param group's parameters of one
// step count t (by_step_count) share [1 - lr * weight_decay (AdamW only)],
// -lr / (1 - beta1^t), 1 / sqrt(1 - beta2^t), beta1, 1 - beta1. beta2 and
// eps are read when the step is captured.
template <typename State, typename Options, typename StateMap>
GraphScalars adam_prepare(
    StateMap& states,
    std::vector<torch::optim::OptimizerParamGroup>& groups,
    bool decoupled,
    const char* optimizer) {
  at::NoGradGuard no_grad;
  GraphScalars scalars;
  for (auto& group : groups) {
    const auto& options = static_cast<const Options&>(group.options());
    const double beta1 = std::get<0>(options.betas());
    const double beta2 = std::get<1>(options.betas());
    const Stepped stepped = with_gradients(group, optimizer);
    std::vector<State*> states_of;
    for (const at::Tensor& p : stepped.params) {
      State& state = adam_state<State>(states, options, p);
      state.step(state.step() + 1);
      states_of.push_back(&state);
    }
    for (const auto& run : by_step_count(states_of)) {
      const at::Tensor& p = stepped.params[run.front()];
      const auto t = static_cast<double>(states_of[run.front()]->step());
      if (decoupled) {
        scalars.add(p, 1 - options.lr() * options.weight_decay());
      }
      scalars.add(p, -options.lr() / (1 - std::pow(beta1, t)));
      scalars.add(p, 1 / std::sqrt(1 - std::pow(beta2, t)));
      // A schedule may cycle beta1 (one-cycle's cycle_momentum).
      scalars.add(p, beta1);
      scalars.add(p, 1 - beta1);
    }
  }
  return scalars;
}

// Adam's and AdamW's update with adam_prepare's scalars, which `next` hands
// out in turn: multi-tensor kernels for each step count's parameters, the
// scalars read on the device (in a captured graph a kernel a parameter
// would be a model's parameter count of launches a step). A factor on the
// device is its own multiply, a rounding more than LibTorch's step has
// where it adds with a host alpha or divides, as PyTorch's capturable
// multi-tensor Adam.
template <typename State, typename Options, typename StateMap, typename Next>
void adam_graph_update(
    StateMap& states,
    const Options& options,
    const Stepped& stepped,
    bool decoupled,
    const Next& next) {
  using Key = typename StateMap::key_type;
  std::vector<State*> states_of;
  for (const at::Tensor& p : stepped.params) {
    const auto found = states.find(state_key<Key>(p));
    TORCH_CHECK(
        found != states.end() && found->second != nullptr,
        "graph_step: a parameter has no state; run prepare_graph_step first");
    states_of.push_back(static_cast<State*>(found->second.get()));
  }
  for (const auto& run : by_step_count(states_of)) {
    Tensors params;
    Tensors grads;
    Tensors exp_avgs;
    std::vector<State*> run_states;
    for (const size_t i : run) {
      params.push_back(stepped.params[i]);
      grads.push_back(stepped.grads[i]);
      exp_avgs.push_back(states_of[i]->exp_avg());
      run_states.push_back(states_of[i]);
    }
    if (decoupled) {
      compat::foreach_mul_(params, next());
    }
    const at::Tensor step_size = next();
    const at::Tensor root_correction = next();
    const at::Tensor beta1 = next();
    const at::Tensor one_minus_beta1 = next();
    if (!decoupled && options.weight_decay() != 0) {
      grads = at::_foreach_add(grads, params, options.weight_decay());
    }
    Tensors denom = at::_foreach_sqrt(update_moments(
        options, run_states, grads, &beta1, &one_minus_beta1));
    compat::foreach_mul_(denom, root_correction);
    at::_foreach_add_(denom, options.eps());
    Tensors ratio = at::_foreach_div(exp_avgs, denom);
    compat::foreach_mul_(ratio, step_size);
    at::_foreach_add_(params, ratio);
  }
}

// Adam's or AdamW's graph_step: adam_graph_update on every param group.
template <typename State, typename Options, typename StateMap, typename Next>
void adam_graph_step(
    StateMap& states,
    std::vector<torch::optim::OptimizerParamGroup>& groups,
    bool decoupled,
    const char* optimizer,
    const Next& next) {
  step_groups<Options>(
      groups,
      nullptr,
      optimizer,
      [&](const Options& options, Stepped& stepped) {
        adam_graph_update<State>(states, options, stepped, decoupled, next);
      });
}

// The tensors of one fused update: a param group's stepped parameters of
// one device and dtype, with their state and float32 step counts.
struct FusedBucket {
  c10::Device device = c10::Device(c10::kCPU);
  at::ScalarType dtype = at::kFloat;
  Tensors params;
  Tensors grads;
  Tensors exp_avgs;
  Tensors exp_avg_sqs;
  Tensors max_exp_avg_sqs;
  Tensors steps;
};

// Sorts `stepped` into fused updates by device and dtype, in the order the
// parameters come; `count(p, state)` gives each one's step count tensor.
template <typename State, typename Options, typename StateMap, typename Count>
std::vector<FusedBucket> fused_buckets(
    StateMap& states,
    const Options& options,
    const Stepped& stepped,
    const Count& count) {
  std::vector<FusedBucket> buckets;
  for (size_t i = 0; i < stepped.params.size(); ++i) {
    const at::Tensor& p = stepped.params[i];
    State& state = adam_state<State>(states, options, p);
    auto bucket =
        std::find_if(buckets.begin(), buckets.end(), [&](const FusedBucket& b) {
          return b.device == p.device() && b.dtype == p.scalar_type();
        });
    if (bucket == buckets.end()) {
      buckets.emplace_back();
      bucket = std::prev(buckets.end());
      bucket->device = p.device();
      bucket->dtype = p.scalar_type();
    }
    bucket->params.push_back(p);
    bucket->grads.push_back(stepped.grads[i]);
    bucket->exp_avgs.push_back(state.exp_avg());
    bucket->exp_avg_sqs.push_back(state.exp_avg_sq());
    if (options.amsgrad()) {
      bucket->max_exp_avg_sqs.push_back(state.max_exp_avg_sq());
    }
    bucket->steps.push_back(count(p, state));
  }
  return buckets;
}

// Advances the step counts on the device, then runs the fused update of
// each bucket.
template <typename Options>
void run_fused(
    bool decoupled,
    const Options& options,
    std::vector<FusedBucket>& buckets,
    const compat::FusedRate& lr) {
  for (FusedBucket& b : buckets) {
    at::_foreach_add_(b.steps, 1);
    compat::fused_adam(
        decoupled,
        b.params,
        b.grads,
        b.exp_avgs,
        b.exp_avg_sqs,
        b.max_exp_avg_sqs,
        b.steps,
        lr,
        std::get<0>(options.betas()),
        std::get<1>(options.betas()),
        options.weight_decay(),
        options.eps(),
        options.amsgrad());
  }
}

// What the fused kernels take as numbers, per param group: beta1, beta2,
// eps, weight decay.
template <typename Options>
std::vector<std::vector<double>> fixed_options(
    const std::vector<torch::optim::OptimizerParamGroup>& groups) {
  std::vector<std::vector<double>> out;
  for (const auto& group : groups) {
    const auto& options = static_cast<const Options&>(group.options());
    out.push_back(
        {std::get<0>(options.betas()),
         std::get<1>(options.betas()),
         options.eps(),
         options.weight_decay()});
  }
  return out;
}

// Which of the options `names` names (those `fixed_options` lists, or
// the first of them) changed, as "beta1 0.95 -> 0.94 (param group 1)";
// empty when none did (or nothing was fixed yet). A null name is not
// compared.
std::string changed_option(
    const std::vector<std::vector<double>>& was,
    const std::vector<std::vector<double>>& now,
    const std::vector<const char*>& names = {
        "beta1", "beta2", "eps", "weight_decay"}) {
  for (size_t g = 0; g < std::min(was.size(), now.size()); ++g) {
    for (size_t k = 0; k < names.size(); ++k) {
      if (names[k] != nullptr && was[g][k] != now[g][k]) {
        std::ostringstream out;
        out << names[k] << " " << was[g][k] << " -> " << now[g][k]
            << " (param group " << g + 1 << ")";
        return out.str();
      }
    }
  }
  return "";
}

// Why a captured `update` ("the multi-tensor SGD update") that took the
// options `fixed` as numbers no longer does what step() would: `changed`
// (changed_option's answer) since; empty when nothing changed.
std::string stale_capture(
    const std::string& update,
    const char* fixed,
    const std::string& changed) {
  if (changed.empty()) {
    return "";
  }
  return update + " fixed " + fixed + " when it was captured, and " +
      changed +
      " since: a captured step cannot follow that (set "
      "trainer.cuda_graphs=false)";
}

} // namespace

void GraphStep::upload(
    const std::vector<float>& values,
    const std::optional<c10::Device>& stepped_on) {
  if (!stepped_on.has_value()) {
    return;
  }
  const c10::Device device = *stepped_on;
  const auto count = static_cast<int64_t>(values.size());
  // A fresh pinned buffer each time: the copy from the last one may still
  // be queued, and the pinned allocator reuses a buffer only after it ran.
  at::Tensor host = at::empty(
      {count},
      at::TensorOptions().dtype(at::kFloat).pinned_memory(device.is_cuda()));
  std::copy(values.begin(), values.end(), host.data_ptr<float>());
  if (!scalars_.defined() || scalars_.numel() != count ||
      scalars_.device() != device) {
    scalars_ = at::empty(
        {count}, at::TensorOptions().dtype(at::kFloat).device(device));
  }
  scalars_.copy_(host, /*non_blocking=*/device.is_cuda());
}

at::Tensor GraphStep::scalar(int64_t index) const {
  return scalars_.select(0, index);
}

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

bool FusedChoice::uses_fused(
    const std::vector<torch::optim::OptimizerParamGroup>& groups,
    std::optional<bool> foreach) const {
  if (fused_.has_value() && !*fused_) {
    return false;
  }
  const bool chosen = fused_.has_value();
  if (!chosen && foreach.has_value() && !*foreach) {
    return false;
  }
  bool any = false;
  for (const auto& group : groups) {
    for (const at::Tensor& p : group.params()) {
      any = true;
      const c10::DeviceType type = p.device().type();
      if (chosen) {
        HOTLOOP_CHECK_AS(
            ConfigError,
            compat::has_fused_adam(type),
            "optimizer.fused=true: LibTorch ",
            TORCH_VERSION_MAJOR,
            ".",
            TORCH_VERSION_MINOR,
            " has no fused Adam/AdamW kernels for ",
            c10::DeviceTypeName(type, /*lower_case=*/true),
            " parameters (CUDA from LibTorch 2.1, the CPU from 2.4); use "
            "optimizer.fused=auto or false");
        continue;
      }
      const at::ScalarType dtype = p.scalar_type();
      if (type != c10::DeviceType::CUDA || !compat::has_fused_adam(type) ||
          !(dtype == at::kFloat || dtype == at::kHalf ||
            dtype == at::kBFloat16)) {
        return false;
      }
    }
  }
  return any;
}

at::Tensor& FusedChoice::fused_step_count(
    const at::Tensor& p, int64_t previous) {
  Count& count = counts_[p.unsafeGetTensorImpl()];
  if (!count.tensor.defined() || count.tensor.device() != p.device()) {
    count.tensor = at::full(
        {},
        static_cast<double>(previous),
        at::TensorOptions().dtype(at::kFloat).device(p.device()));
  } else if (count.value != previous) {
    // LibTorch's state moved on without it (a checkpoint was loaded, or
    // steps were taken another way): in place, so the storage stays.
    count.tensor.fill_(static_cast<double>(previous));
  }
  count.value = previous + 1;
  return count.tensor;
}

const at::Tensor& FusedChoice::fused_step_count(const at::Tensor& p) const {
  const auto found = counts_.find(p.unsafeGetTensorImpl());
  TORCH_CHECK(
      found != counts_.end(),
      "graph_step: a parameter has no step count; run prepare_graph_step "
      "first");
  return found->second.tensor;
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

template <typename Base>
torch::Tensor ForeachAdamFamily<Base>::step(
    torch::optim::Optimizer::LossClosure closure) {
  using Kind = AdamKind<Base>;
  using Options = typename Kind::Options;
  using State = typename Kind::State;
  if (uses_fused(this->param_groups_, foreach ())) {
    return step_groups<Options>(
        this->param_groups_,
        closure,
        Kind::kName,
        [&](const auto& options, Stepped& stepped) {
          auto buckets = fused_buckets<State>(
              this->state_,
              options,
              stepped,
              [&](const at::Tensor& p, auto& state) {
                state.step(state.step() + 1);
                return fused_step_count(p, state.step() - 1);
              });
          run_fused(Kind::kDecoupled, options, buckets, {options.lr()});
        });
  }
  if (!uses_foreach(this->param_groups_)) {
    return Base::step(std::move(closure));
  }
  return step_groups<Options>(
      this->param_groups_,
      closure,
      Kind::kName,
      [&](const auto& options, Stepped& stepped) {
        if (options.weight_decay() != 0) {
          if constexpr (Kind::kDecoupled) {
            at::_foreach_mul_(
                stepped.params, 1 - options.lr() * options.weight_decay());
          } else {
            stepped.grads = at::_foreach_add(
                stepped.grads, stepped.params, options.weight_decay());
          }
        }
        adam_update<State>(
            this->state_, options, stepped.params, stepped.grads);
      });
}

} // namespace hotloop::optim

namespace hotloop::optim {

namespace {

// What SGD's graph step takes as numbers, per param group: dampening,
// nesterov and the weight decay (the rate and momentum are its scalars).
std::vector<std::vector<double>> sgd_fixed_options(
    const std::vector<torch::optim::OptimizerParamGroup>& groups) {
  std::vector<std::vector<double>> out;
  for (const auto& group : groups) {
    const auto& options =
        static_cast<const torch::optim::SGDOptions&>(group.options());
    out.push_back(
        {options.dampening(),
         options.nesterov() ? 1.0 : 0.0,
         options.weight_decay()});
  }
  return out;
}

} // namespace

void ForeachSGD::prepare_graph_step() {
  using Key = std::decay_t<decltype(state_)>::key_type;
  stale_ = stale_capture(
      "the multi-tensor SGD update",
      "dampening, nesterov and weight_decay",
      changed_option(
          fixed_,
          sgd_fixed_options(param_groups_),
          {"dampening", "nesterov", "weight_decay"}));
  GraphScalars scalars;
  fresh_.clear();
  step_groups<torch::optim::SGDOptions>(
      param_groups_,
      nullptr,
      "SGD",
      [&](const auto& options, Stepped& stepped) {
        // One rate and one momentum (a schedule may cycle it: one-cycle's
        // cycle_momentum) for the group, which every parameter in it
        // shares.
        scalars.add(stepped.params.front(), -options.lr());
        if (options.momentum() == 0) {
          return;
        }
        scalars.add(stepped.params.front(), options.momentum());
        for (const at::Tensor& p : stepped.params) {
          // A first step's buffer is its direction, as step() makes it.
          auto& entry = state_[state_key<Key>(p)];
          fresh_.push_back(entry == nullptr);
          if (entry == nullptr) {
            auto state = std::make_unique<torch::optim::SGDParamState>();
            state->momentum_buffer(
                options.weight_decay() != 0
                    ? at::add(p.grad(), p, options.weight_decay())
                    : torch::clone(p.grad()).detach());
            entry = std::move(state);
          }
        }
      });
  upload(scalars.values, scalars.device);
}

void ForeachSGD::graph_step() {
  using Key = std::decay_t<decltype(state_)>::key_type;
  fixed_ = sgd_fixed_options(param_groups_);
  int64_t index = 0;
  size_t buffered = 0;
  step_groups<torch::optim::SGDOptions>(
      param_groups_,
      nullptr,
      "SGD",
      [&](const auto& options, Stepped& stepped) {
        // Multi-tensor kernels throughout, the rate and momentum read on
        // the device (in a captured graph, a kernel a parameter would be
        // ResNet-18's 62 parameters' worth of launches a step). A factor
        // on the device is its own multiply before the add, two roundings
        // where LibTorch's add with a host alpha has one, as PyTorch's
        // multi-tensor SGD with a tensor rate.
        Tensors steps =
            options.weight_decay() != 0
                ? at::_foreach_add(
                      stepped.grads, stepped.params, options.weight_decay())
                : stepped.grads;
        const at::Tensor rate = scalar(index++);
        if (options.momentum() != 0) {
          const at::Tensor momentum = scalar(index++);
          Tensors buffers;
          Tensors decayed;
          Tensors decayed_steps;
          for (size_t i = 0; i < stepped.params.size(); ++i) {
            const auto found = state_.find(state_key<Key>(stepped.params[i]));
            TORCH_CHECK(
                found != state_.end() && buffered < fresh_.size(),
                "graph_step: a parameter has no state; run "
                "prepare_graph_step first");
            const at::Tensor& buffer =
                static_cast<torch::optim::SGDParamState&>(*found->second)
                    .momentum_buffer();
            if (!fresh_[buffered++]) {
              decayed.push_back(buffer);
              decayed_steps.push_back(steps[i]);
            }
            buffers.push_back(buffer);
          }
          if (!decayed.empty()) {
            compat::foreach_mul_(decayed, momentum);
            at::_foreach_add_(decayed, decayed_steps, 1 - options.dampening());
          }
          steps = options.nesterov()
              ? at::_foreach_add(steps, compat::foreach_mul(buffers, momentum))
              : buffers;
        }
        at::_foreach_add_(stepped.params, compat::foreach_mul(steps, rate));
      });
  // Replays of a captured step find every buffer made.
  std::fill(fresh_.begin(), fresh_.end(), false);
}

namespace {

// Adam's and AdamW's prepare_graph_step with the fused update: each stepped
// parameter's step advanced on the host and its count made current, one
// rate per param group with a stepped parameter.
template <typename State, typename Options, typename StateMap, typename Count>
GraphScalars fused_prepare(
    StateMap& states,
    std::vector<torch::optim::OptimizerParamGroup>& groups,
    const char* optimizer,
    const Count& count) {
  at::NoGradGuard no_grad;
  GraphScalars scalars;
  for (auto& group : groups) {
    const auto& options = static_cast<const Options&>(group.options());
    const Stepped stepped = with_gradients(group, optimizer);
    for (const at::Tensor& p : stepped.params) {
      State& state = adam_state<State>(states, options, p);
      state.step(state.step() + 1);
      count(p, state.step() - 1);
    }
    if (!stepped.params.empty()) {
      scalars.add(stepped.params.front(), options.lr());
    }
  }
  return scalars;
}

} // namespace

template <typename Base>
void ForeachAdamFamily<Base>::prepare_graph_step() {
  using Kind = AdamKind<Base>;
  using Options = typename Kind::Options;
  using State = typename Kind::State;
  const auto now = fixed_options<Options>(this->param_groups_);
  const std::string changed = changed_option(graph_.fixed, now);
  graph_.stale.clear();
  if (!changed.empty()) {
    graph_.varies = true;
    // The multi-tensor update reads beta1 (and AdamW's decay, in the
    // parameters' factor) at every replay; beta2, eps and Adam's weight
    // decay it takes as numbers, as the fused one takes all four.
    graph_.stale = stale_capture(
        std::string("the ") + (graph_.fused ? "fused " : "multi-tensor ") +
            Kind::kName + " update",
        Kind::kDecoupled ? "beta2 and eps" : "beta2, eps and weight_decay",
        changed_option(
            graph_.fixed,
            now,
            {nullptr,
             "beta2",
             "eps",
             Kind::kDecoupled ? nullptr : "weight_decay"}));
    if (graph_.stale.empty() && graph_.fused) {
      graph_.stale =
          std::string("the fused ") + Kind::kName +
          " update fixed its options when it was captured, and " + changed +
          " since (a schedule that cycles momentum, such as onecycle's "
          "cycle_momentum): set optimizer.fused=false to capture the "
          "multi-tensor update, which reads beta1" +
          (Kind::kDecoupled ? " and weight_decay" : "") + " at every replay";
    }
  }
  graph_.fused = uses_fused(this->param_groups_, foreach ()) &&
                 (fused() == std::optional<bool>(true) || !graph_.varies);
  const GraphScalars scalars =
      graph_.fused ? fused_prepare<State, Options>(
                         this->state_,
                         this->param_groups_,
                         Kind::kName,
                         [&](const at::Tensor& p, int64_t previous) {
                           fused_step_count(p, previous);
                         })
                   : adam_prepare<State, Options>(
                         this->state_,
                         this->param_groups_,
                         Kind::kDecoupled,
                         Kind::kName);
  upload(scalars.values, scalars.device);
}

template <typename Base>
void ForeachAdamFamily<Base>::graph_step() {
  using Kind = AdamKind<Base>;
  using Options = typename Kind::Options;
  using State = typename Kind::State;
  graph_.fixed = fixed_options<Options>(this->param_groups_);
  int64_t index = 0;
  if (graph_.fused) {
    step_groups<Options>(
        this->param_groups_,
        nullptr,
        Kind::kName,
        [&](const auto& options, Stepped& stepped) {
          auto buckets = fused_buckets<State>(
              this->state_, options, stepped, [&](const at::Tensor& p, auto&) {
                return fused_step_count(p);
              });
          const at::Tensor lr = scalar(index++);
          run_fused(Kind::kDecoupled, options, buckets, {0, &lr});
        });
    return;
  }
  adam_graph_step<State, Options>(
      this->state_, this->param_groups_, Kind::kDecoupled, Kind::kName, [&] {
        return scalar(index++);
      });
}

template class ForeachAdamFamily<torch::optim::Adam>;
template class ForeachAdamFamily<torch::optim::AdamW>;

} // namespace hotloop::optim
