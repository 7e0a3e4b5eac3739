#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <functional>
#include <string>
#include <typeindex>

namespace hotloop::compress {

/// Where a module's forward reads a parameter from: the public member
/// (`LinearImpl::weight`), which is what pruning must replace with the
/// masked tensor, since LibTorch modules have no forward pre-hooks and read
/// their members, not their parameter dictionary. Returns null for a module
/// type or name that is not known.
///
/// Known: Linear, Bilinear, Conv1d/2d/3d, ConvTranspose1d/2d/3d, Embedding,
/// BatchNorm1d/2d/3d, InstanceNorm1d/2d/3d, LayerNorm, GroupNorm and
/// dist::SyncBatchNorm (`weight`, and `bias` where they have one).
at::Tensor* forward_tensor(torch::nn::Module& module, const std::string& name);

namespace detail {
void register_forward_tensor(
    std::type_index type,
    const std::string& name,
    std::function<at::Tensor*(torch::nn::Module&)> member);
} // namespace detail

/// Makes `Impl`'s member tensor `member`, registered as parameter `name`,
/// prunable (a module of your own whose forward reads `member`):
///
///   compress::register_forward_tensor<MyLayerImpl>("w", &MyLayerImpl::w);
///
/// Thread-safe; register before pruning.
template <typename Impl>
void register_forward_tensor(
    const std::string& name, at::Tensor Impl::*member) {
  detail::register_forward_tensor(
      std::type_index(typeid(Impl)),
      name,
      [member](torch::nn::Module& module) -> at::Tensor* {
        return &(dynamic_cast<Impl&>(module).*member);
      });
}

} // namespace hotloop::compress
