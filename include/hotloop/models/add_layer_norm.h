#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

namespace hotloop::models {

/// `x + y` and the LayerNorm of that sum over its last dimension (weight,
/// optional bias, eps), as `s = x + y; at::layer_norm(s, {C}, weight, bias,
/// eps)` gives them: a transformer's residual add and the next layer's
/// normalized input. Returns {s, normalized}.
///
/// With `fused` on a CUDA device (a build with hotloop's CUDA kernels),
/// float32 `x` and `weight`, `y` of float32, bfloat16 or float16, both
/// contiguous and C at most 1024, one kernel each way does what takes
/// ATen five (the add, the LayerNorm, the cast for the next matmul; the
/// LayerNorm's two backward kernels and the residual gradient's add): the
/// normalized output comes in autocast's dtype where autocast is on (the
/// dtype the next matmul reads), float32 otherwise; no double backward
/// (a backward with create_graph is an error naming the option).
/// Everywhere else, and without `fused`, the ATen ops above.
std::pair<at::Tensor, at::Tensor> add_layer_norm(
    const at::Tensor& x,
    const at::Tensor& y,
    const at::Tensor& weight,
    const at::Tensor& bias,
    double eps,
    bool fused);

/// Whether add_layer_norm would use its CUDA kernels for these operands.
bool add_layer_norm_is_fused(
    const at::Tensor& x,
    const at::Tensor& y,
    const at::Tensor& weight,
    const at::Tensor& bias);

} // namespace hotloop::models
