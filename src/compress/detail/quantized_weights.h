#pragma once

// What post-training quantization and QAT's conversion share: a layer's
// tensors as its forward sees them, and torch.ao's _quantize_weight.

#include "hotloop/compress/observer.h"

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <string>

namespace hotloop::compress::detail {

/// The forward's value of `name` in `module` (the masked one of a pruned
/// tensor), detached; undefined where the module has none.
at::Tensor forward_value(torch::nn::Module& module, const std::string& name);

/// A buffer of `module`, detached; undefined where it has none.
at::Tensor buffer_value(torch::nn::Module& module, const std::string& name);

/// The child at dotted `path`; Error naming it where there is none.
torch::nn::Module& child(torch::nn::Module& root, const std::string& path);

/// torch.ao's _quantize_weight: qint8, per channel on q.axis (scales as
/// double, zero points as int64) or per tensor.
at::Tensor quantize_weight(const at::Tensor& weight, const QParams& q);

} // namespace hotloop::compress::detail
