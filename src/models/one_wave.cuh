#pragma once

// How many blocks of a kernel a CUDA device runs at once, for hotloop's
// kernels that size their grid to one wave of blocks, each leaving a row
// of partial sums (add_layer_norm's backward, bias_gradient).

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace hotloop::models::cuda {

/// Blocks of `Kernel`, launched with `threads` threads and no dynamic
/// shared memory, that `device` holds at once: its multiprocessors (ATen's
/// cached properties) times the blocks that fit on one (their registers
/// and shared memory decide), asked of CUDA once per kernel, not at every
/// step's host cost. A kernel is always launched with the same `threads`.
template <auto Kernel>
int64_t one_wave(int threads, int device) {
  static const int per_multiprocessor = [threads] {
    int fits = 0;
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &fits, Kernel, threads, 0));
    return std::max(fits, 1);
  }();
  return static_cast<int64_t>(
             at::cuda::getDeviceProperties(device)->multiProcessorCount) *
      per_multiprocessor;
}

} // namespace hotloop::models::cuda
