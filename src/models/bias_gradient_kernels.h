#pragma once

// The CUDA side of linear_gelu's fused path (bias_gradient_kernels.cu),
// built where LibTorch has CUDA and CMake finds CUDA's compiler
// (HOTLOOP_HAS_CUDA_KERNELS).

#include <ATen/core/Tensor.h>

namespace hotloop::models::cuda {

/// A Linear layer's bias gradient: the column sums of `grad` ([N, M],
/// contiguous, float32, bfloat16 or float16, on a CUDA device), added in
/// float32 and returned as float32 [M]. With `pre_gelu` defined (the
/// layer's output before an exact GELU, [N, M] in grad's dtype, contiguous),
/// `grad` is the GELU's output gradient: `grad_pre_gelu` (allocated here,
/// grad's dtype) gets GELU's backward, grad * GELU'(pre_gelu), and the sums
/// are of it, in the same pass. The same values run to run: each block
/// sums its rows in a fixed order and ATen's sum adds the blocks' rows.
at::Tensor bias_gradient(
    const at::Tensor& grad,
    const at::Tensor& pre_gelu,
    at::Tensor& grad_pre_gelu);

} // namespace hotloop::models::cuda
