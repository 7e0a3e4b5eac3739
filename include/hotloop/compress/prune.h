#pragma once

#include "hotloop/compress/parametrization.h"
#include "hotloop/compress/pruning_amount.h"
#include "hotloop/compress/pruning_method.h"

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <string>
#include <vector>

namespace hotloop::compress {

/// torch.nn.utils.prune for LibTorch modules: the same functions, the same
/// masks for the same weights and generator state (tested against PyTorch
/// 1.13), the same reparametrisation (parametrization.h).
///
/// `name` is a parameter of `module` or a dotted path below it
/// ("features.0.weight"). Pruning a tensor again acts only on what is still
/// alive: the remaining entries for an unstructured method, the remaining
/// channels for a structured one, and the fraction counts those. Errors are
/// ConfigError naming the parameter's path: an amount out of range or over
/// the units left, a dimension the tensor lacks, structured pruning of a
/// 1-D tensor, a parameter that does not exist (the module's parameters
/// listed).
///
/// The importance of a tensor pruned before is its masked value as it is
/// now (mask * orig); PyTorch reads the value its last forward computed,
/// which is the same unless the tensor changed since that forward.

/// A parameter of a model: the module that holds it, its name there, and
/// its dotted path from the root it was found under.
struct ParameterRef {
  torch::nn::Module* module = nullptr;
  std::string name;
  std::string path;
};

/// Finds the parameter `path` ("network.features.0.weight") under `root`,
/// pruned or not. Throws ConfigError `no parameter '<path>' in the model;
/// its parameters: ...` listing every name (pruned ones by their names
/// before pruning).
ParameterRef find_parameter(torch::nn::Module& root, const std::string& path);

/// The names of every prunable parameter of `root` in named_parameters
/// order, pruned ones by their names before pruning.
std::vector<std::string> parameter_names(torch::nn::Module& root);

/// BasePruningMethod.apply: the first time, `method.compute_mask(scores,
/// ones)`; after that, combine_masks with the current mask. `importance`
/// replaces the tensor's own values as scores (same shape).
void prune(
    torch::nn::Module& module,
    const std::string& name,
    const PruningMethod& method,
    const at::Tensor& importance = {});

/// The same for a parameter found by find_parameter (errors name its path).
void prune(
    const ParameterRef& parameter,
    const PruningMethod& method,
    const at::Tensor& importance = {});

/// prune.identity: the reparametrisation with a mask of ones.
void identity(torch::nn::Module& module, const std::string& name);
/// prune.l1_unstructured.
void l1_unstructured(
    torch::nn::Module& module,
    const std::string& name,
    PruningAmount amount,
    const at::Tensor& importance = {});
/// prune.random_unstructured.
void random_unstructured(
    torch::nn::Module& module, const std::string& name, PruningAmount amount);
/// prune.ln_structured: `n` as torch.norm's p (INFINITY, -INFINITY too).
void ln_structured(
    torch::nn::Module& module,
    const std::string& name,
    PruningAmount amount,
    double n,
    int64_t dim,
    const at::Tensor& importance = {});
/// prune.random_structured.
void random_structured(
    torch::nn::Module& module,
    const std::string& name,
    PruningAmount amount,
    int64_t dim);
/// prune.custom_from_mask: `mask` (any dtype, 0 prunes) over the current
/// mask.
void custom_from_mask(
    torch::nn::Module& module, const std::string& name, const at::Tensor& mask);

/// prune.global_unstructured: `method` (an unstructured one, such as
/// L1Unstructured(amount)) applied once to all of `parameters` flattened
/// and joined in order, so the amount counts across them, then each gets
/// its share of the mask. `importance`: empty, or one tensor (or an
/// undefined one) per parameter. Throws ConfigError when the method is not
/// unstructured: `global pruning needs an unstructured method (...), got
/// LnStructured (structured)`.
void global_unstructured(
    const std::vector<ParameterRef>& parameters,
    const PruningMethod& method,
    const std::vector<at::Tensor>& importance = {});

} // namespace hotloop::compress
