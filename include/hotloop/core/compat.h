#pragma once

// The one place that hides differences between LibTorch 1.13 (Debian, CPU)
// and LibTorch 2.x (the CUDA wheels). Code elsewhere calls these helpers
// instead of testing TORCH_VERSION_* itself.

#include <torch/optim/optimizer.h>
#include <torch/version.h>

/// LibTorch's version as one comparable number: 1.13 -> 113, 2.4 -> 204.
#define HOTLOOP_TORCH_VERSION (TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR)

namespace hotloop::compat {

/// Drops every gradient of `optimizer`'s parameters (PyTorch's
/// `zero_grad(set_to_none=True)`): the next backward writes fresh gradient
/// tensors instead of adding into zero-filled ones, which saves a memset per
/// parameter and lets the allocator reuse the memory. LibTorch 1.13's
/// `zero_grad()` has no such flag and zero-fills; 2.x defaults to it.
inline void zero_grad_set_to_none(torch::optim::Optimizer& optimizer) {
#if HOTLOOP_TORCH_VERSION >= 200
  optimizer.zero_grad(/*set_to_none=*/true);
#else
  for (auto& group : optimizer.param_groups()) {
    for (auto& param : group.params()) {
      if (param.mutable_grad().defined()) {
        param.mutable_grad().reset();
      }
    }
  }
#endif
}

} // namespace hotloop::compat
