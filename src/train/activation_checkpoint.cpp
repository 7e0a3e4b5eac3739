#include "hotloop/train/activation_checkpoint.h"

#include "hotloop/core/compat.h"
#include "hotloop/train/checkpoint.h"
#include "hotloop/train/precision.h"

#include <ATen/autocast_mode.h>
#include <ATen/core/ivalue.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <optional>

namespace hotloop::train {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What backward needs besides the inputs: the segment, and the random and
// autocast state its first run saw.
struct Recipe : torch::CustomClassHolder {
  Segment segment;
  RngStates rng;
  std::vector<at::Tensor> buffers; // the owner's, restored after the re-run
  bool cpu_autocast = false;
  at::ScalarType cpu_dtype = at::kBFloat16;
  bool cuda_autocast = false;
  at::ScalarType cuda_dtype = at::kHalf;
};

class CheckpointFunction
    : public torch::autograd::Function<CheckpointFunction> {
 public:
  static variable_list forward(
      AutogradContext* ctx,
      c10::intrusive_ptr<Recipe> recipe,
      at::TensorList inputs) {
    const variable_list kept(inputs.begin(), inputs.end());
    ctx->save_for_backward(kept);
    ctx->saved_data["recipe"] = c10::IValue::make_capsule(recipe);
    const torch::NoGradGuard no_grad; // keep nothing but the inputs
    // Autocast would cache its casts of the weights made here, without
    // grad, and the re-run would take them and leave the weights without
    // gradients (pytorch/pytorch#65766): no caching in this pass.
    const bool cache = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_cache_enabled(false);
    try {
      variable_list outputs = recipe->segment(kept);
      at::autocast::set_autocast_cache_enabled(cache);
      return outputs;
    } catch (...) {
      at::autocast::set_autocast_cache_enabled(cache);
      throw;
    }
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto recipe = c10::static_intrusive_pointer_cast<Recipe>(
        ctx->saved_data["recipe"].toCapsule());
    variable_list inputs;
    for (const at::Tensor& input : ctx->get_saved_variables()) {
      at::Tensor detached = input.detach();
      detached.requires_grad_(input.requires_grad());
      inputs.push_back(std::move(detached));
    }
    // The second run draws what the first drew, then the generators go on
    // from where backward found them.
    const RngStates now = get_rng_states();
    set_rng_states(recipe->rng);
    std::vector<at::Tensor> kept_buffers;
    for (const at::Tensor& buffer : recipe->buffers) {
      kept_buffers.push_back(buffer.clone());
    }
    const auto restore_buffers = [&] {
      const torch::NoGradGuard no_grad;
      for (size_t i = 0; i < kept_buffers.size(); ++i) {
        recipe->buffers[i].copy_(kept_buffers[i]);
      }
    };
    variable_list outputs;
    try {
      const torch::AutoGradMode grad(true);
      std::optional<AutocastGuard> cpu, cuda;
      if (recipe->cpu_autocast) {
        cpu.emplace(c10::DeviceType::CPU, recipe->cpu_dtype);
      }
      if (recipe->cuda_autocast) {
        cuda.emplace(c10::DeviceType::CUDA, recipe->cuda_dtype);
      }
      outputs = recipe->segment(inputs);
    } catch (...) {
      set_rng_states(now);
      restore_buffers();
      throw;
    }
    set_rng_states(now);
    variable_list roots, root_grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].requires_grad() && i < grads.size() &&
          grads[i].defined()) {
        roots.push_back(outputs[i]);
        root_grads.push_back(grads[i]);
      }
    }
    // Reentrant: the segment's parameters accumulate their gradients here.
    if (!roots.empty()) {
      torch::autograd::backward(roots, root_grads);
    }
    // After the backward, whose graph saved the buffers as they were.
    restore_buffers();
    // A slot for the recipe argument, then one per input.
    variable_list input_grads = {at::Tensor()};
    for (const at::Tensor& input : inputs) {
      input_grads.push_back(
          input.requires_grad() ? input.grad() : at::Tensor());
    }
    return input_grads;
  }
};

} // namespace

std::vector<at::Tensor> checkpoint(
    const Segment& segment,
    const std::vector<at::Tensor>& inputs,
    torch::nn::Module* owner) {
  bool any_requires_grad = false;
  for (const at::Tensor& input : inputs) {
    any_requires_grad = any_requires_grad ||
        (input.defined() && input.requires_grad());
  }
  if (!torch::GradMode::is_enabled() || !any_requires_grad) {
    return segment(inputs);
  }
  auto recipe = c10::make_intrusive<Recipe>();
  recipe->segment = segment;
  recipe->rng = get_rng_states();
  if (owner != nullptr) {
    recipe->buffers = owner->buffers();
  }
  recipe->cpu_autocast = compat::autocast_enabled(c10::DeviceType::CPU);
  recipe->cpu_dtype = compat::autocast_dtype(c10::DeviceType::CPU);
  recipe->cuda_autocast = compat::autocast_enabled(c10::DeviceType::CUDA);
  recipe->cuda_dtype = compat::autocast_dtype(c10::DeviceType::CUDA);
  return compat::apply_function<CheckpointFunction>(
      recipe, at::TensorList(inputs));
}

at::Tensor checkpoint(
    const std::function<at::Tensor(const at::Tensor&)>& segment,
    const at::Tensor& input,
    torch::nn::Module* owner) {
  return checkpoint(
      [segment](const std::vector<at::Tensor>& inputs) {
        return std::vector<at::Tensor>{segment(inputs[0])};
      },
      std::vector<at::Tensor>{input},
      owner)[0];
}

} // namespace hotloop::train
