#pragma once

// The CUDA side of chunked_cross_entropy's fused path
// (softmax_cross_entropy_kernels.cu), built where LibTorch has CUDA and
// CMake finds CUDA's compiler (HOTLOOP_HAS_CUDA_KERNELS).

#include <ATen/core/Tensor.h>

namespace hotloop::models::cuda {

/// Row by row over `logits` ([N, V], contiguous, float32, bfloat16 or
/// float16, on a CUDA device): losses[r] = logsumexp(logits[r]) -
/// logits[r, targets[r]] in float32, and with `gradient` logits[r] is
/// replaced by its gradient softmax(logits[r]) - one_hot(targets[r]) in
/// its own dtype. A row whose target is -1 gets a loss of 0 (and a zero
/// gradient). targets: [N] int64 on the same device, each -1 or in
/// [0, V) (a device assertion otherwise); losses: [N] float32.
void softmax_cross_entropy_(
    at::Tensor& logits,
    const at::Tensor& targets,
    at::Tensor& losses,
    bool gradient);

} // namespace hotloop::models::cuda
