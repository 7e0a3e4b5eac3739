#pragma once

#include <ATen/core/Tensor.h>

namespace hotloop::models {

/// at::linear(x, weight, bias), then the exact GELU where `gelu`: a
/// transformer's Linear layers, the MLP's first with its activation.
///
/// With `fused` and a bias, one autograd function of hotloop's computes
/// the same forward (ATen's addmm, the bias in the GEMM's epilogue, and
/// ATen's GELU) and a backward of its own: on a CUDA device (a build with
/// hotloop's CUDA kernels) the bias's gradient comes from one kernel that
/// sums the output gradient's columns in float32 near the memory's
/// bandwidth, in the same pass as GELU's backward where `gelu` (ATen reads
/// the gradient GELU's backward wrote once more for its general
/// reduction), and goes to the bias's dtype without a bfloat16 rounding
/// between; elsewhere ATen's gelu_backward and sum, the same values as the
/// unfused path. The input and weight gradients are ATen's two matmuls
/// either way. Under autocast x and weight are cast as autocast casts
/// linear's (the weight's cast cached for the step), the bias inside the
/// function. No double backward (a backward with create_graph is an
/// error naming the option). Without `fused`, or without a bias, the
/// ATen ops.
at::Tensor linear_gelu(
    const at::Tensor& x,
    const at::Tensor& weight,
    const at::Tensor& bias,
    bool gelu,
    bool fused);

} // namespace hotloop::models
