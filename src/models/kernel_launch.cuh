#pragma once

// How hotloop's CUDA kernels are launched: one_wave() sizes the grid of
// those that leave a row of partial sums per block (add_layer_norm's
// backward, bias_gradient), launch_kernel() starts a kernel on the current stream.
//
// Compiled by a C++ compiler for the CPU instead (the kernels' tests in
// tests/cuda_emulation, with HOTLOOP_CUDA_EMULATION defined by its
// cuda_runtime.h), launch_kernel() hands the kernel to that emulator.

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
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

template <typename T>
struct Exactly {
  using type = T;
};

/// kernel<<<blocks, threads, 0, current stream>>>(args...), then the
/// launch's error check. The arguments convert to the kernel's parameter
/// types here, as in a call.
template <typename... Params>
void launch_kernel(
    void (*kernel)(Params...),
    dim3 blocks,
    dim3 threads,
    typename Exactly<Params>::type... args) {
#if defined(HOTLOOP_CUDA_EMULATION)
  HOTLOOP_CUDA_EMULATION(kernel, blocks, threads, args...);
#else
  kernel<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(args...);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
#endif
}

} // namespace hotloop::models::cuda
