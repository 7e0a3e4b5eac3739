#pragma once

// The CUDA side of add_layer_norm (add_layer_norm_kernels.cu), built where
// LibTorch has CUDA and CMake finds CUDA's compiler
// (HOTLOOP_HAS_CUDA_KERNELS).

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace hotloop::models::cuda {

/// The widest row the kernels take: each lane of a warp holds C / 32 of a
/// row's values in registers, and in the backward as many column sums of
/// the weight's and bias's gradients (GPT-2 124M's 768: 24).
constexpr int kAddLayerNormMaxWidth = 1024;

/// sum = x + y; out = (sum - mean) * rstd * weight + bias, row by row over
/// the last dimension; mean and rstd ([rows], float32) for the backward.
/// Every tensor contiguous on one CUDA device; x, weight, bias, sum, mean
/// and rstd float32; y and out float32, bfloat16 or float16. `bias` may be
/// undefined.
void add_layer_norm_forward(
    const at::Tensor& x,
    const at::Tensor& y,
    const at::Tensor& weight,
    const at::Tensor& bias,
    double eps,
    at::Tensor& sum,
    at::Tensor& out,
    at::Tensor& mean,
    at::Tensor& rstd);

/// The gradients of the forward above: with d = grad_sum + LayerNorm's
/// input gradient of grad_out, grad_x = d (float32) and grad_y = d in y's
/// dtype; grad_weight and grad_bias (float32, [C]) summed over the rows.
/// `grad_sum` may be undefined (zero); grad_bias is left undefined when
/// `with_bias` is false.
void add_layer_norm_backward(
    const at::Tensor& grad_out,
    const at::Tensor& grad_sum,
    const at::Tensor& sum,
    const at::Tensor& mean,
    const at::Tensor& rstd,
    const at::Tensor& weight,
    bool with_bias,
    at::Tensor& grad_x,
    at::Tensor& grad_y,
    at::Tensor& grad_weight,
    at::Tensor& grad_bias);

} // namespace hotloop::models::cuda
