#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace hotloop::optim {

/// Scales the gradients of `parameters` so that their joint `norm_type`-norm
/// is at most `max_norm` (PyTorch's `clip_grad_norm_`, same arithmetic as
/// LibTorch's, so the clipped gradients are bitwise the same). Returns the
/// norm before clipping as a 0-dim tensor on the gradients' device:
/// LibTorch's version returns a double, which makes the host wait for the
/// device on every step. Parameters without a gradient are skipped; with
/// none, returns an undefined tensor.
at::Tensor clip_grad_norm_(
    const std::vector<at::Tensor>& parameters,
    double max_norm,
    double norm_type = 2.0);

} // namespace hotloop::optim
