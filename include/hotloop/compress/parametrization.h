#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hotloop::compress {

/// The pruning reparametrisation of torch.nn.utils.prune: a pruned tensor
/// `weight` of a module becomes the parameter `weight_orig` (the same
/// tensor, so optimizers keep stepping it) and the buffer `weight_mask`
/// (0/1, the parameter's dtype), and what the module's forward reads is
/// `weight_mask * weight_orig`.
///
/// PyTorch recomputes that product in a forward pre-hook before every
/// forward. LibTorch modules have no pre-hooks, so whoever runs the forward
/// calls recompute_pruned first: the Trainer does before every training
/// step and evaluation (so gradients reach `weight_orig` through the mask
/// as in PyTorch); a loop of your own calls it before each forward.
///
/// One difference from PyTorch: `weight_orig` takes `weight`'s place among
/// the module's parameters (PyTorch appends it), and remove() puts `weight`
/// back there, so a pruned or made-permanent model keeps the parameter order
/// hotloop's checkpoints compare. Masks are appended to the buffers, as in
/// PyTorch.

/// A pruned tensor in a module tree.
struct PrunedTensor {
  /// Its name before pruning, from the root: "network.features.0.weight".
  std::string path;
  /// The module that holds it, and its name there ("weight").
  torch::nn::Module* module = nullptr;
  std::string name;
};

/// Whether `name` of `module` itself is pruned (has `<name>_orig` and
/// `<name>_mask`).
bool is_pruned(const torch::nn::Module& module, const std::string& name);
/// Whether any tensor of the tree is pruned (prune.is_pruned).
bool is_pruned(const torch::nn::Module& root);
/// Every pruned tensor of the tree, modules in named_modules order and each
/// module's in the order its masks were added.
std::vector<PrunedTensor> pruned_tensors(torch::nn::Module& root);

/// Gives `name` of `module` the mask `mask` (same shape; stored in the
/// parameter's dtype and device), reparametrising on first use, then
/// recomputes the forward tensor under the current grad mode. The mask is
/// set as given: pruning methods combine it with the previous one first
/// (see prune.h). Throws ConfigError when `name` is not a parameter of
/// `module` (its parameters listed), when the module type's forward tensor
/// is not known (see forward_tensor.h), or when the shapes differ.
void set_mask(
    torch::nn::Module& module, const std::string& name, const at::Tensor& mask);

/// `name`'s mask; throws Error when it is not pruned.
at::Tensor mask_of(const torch::nn::Module& module, const std::string& name);

/// `mask * orig` for pruned `name`: what the forward reads (BasePruningMethod
/// .apply_mask).
at::Tensor masked_tensor(
    const torch::nn::Module& module, const std::string& name);

/// Sets every pruned tensor's forward tensor to `mask * orig` (the forward
/// pre-hook), under the current grad mode.
void recompute_pruned(torch::nn::Module& root);

/// prune.remove: makes the pruning of `name` permanent. The parameter
/// `name` comes back as the same tensor as `<name>_orig`, holding
/// `mask * orig`; `<name>_orig` and `<name>_mask` go. Throws ConfigError
/// when `name` is not pruned.
void remove(torch::nn::Module& module, const std::string& name);

/// remove() for every pruned tensor of the tree (what Lightning's
/// ModelPruning calls make_pruning_permanent); returns how many.
int64_t make_pruning_permanent(torch::nn::Module& root);

/// A number that changes whenever some tensor anywhere is reparametrised or
/// made permanent (thread-safe), for caches of pruned_tensors.
uint64_t pruning_generation();

/// Gives `root` the layout of a checkpoint whose model was pruned: for
/// every `<path>_mask` among `saved_names` (a checkpoint's parameter then
/// buffer names, in order) with `<path>_orig` beside it, where `root` has
/// `<path>` unpruned, reparametrises it with a mask of ones (loading then
/// fills both), in the order of the masks, so the names line up with the
/// checkpoint's. Returns how many were reparametrised.
int64_t match_pruning(
    torch::nn::Module& root, const std::vector<std::string>& saved_names);

/// Recomputes the pruned tensors of one module tree before each forward
/// (what the Trainer holds): the list of pruned tensors is collected again
/// only when pruning_generation() changed, so a model without pruning costs
/// one comparison per call. Not thread-safe.
class PrunedForward {
 public:
  /// recompute_pruned(root), from the cached list.
  void recompute(torch::nn::Module& root);
  /// Whether the last recompute found pruned tensors.
  bool any() const {
    return !tensors_.empty();
  }

 private:
  uint64_t generation_ = ~uint64_t{0};
  const torch::nn::Module* root_ = nullptr;
  std::vector<std::pair<torch::nn::Module*, std::string>> tensors_;
};

} // namespace hotloop::compress
