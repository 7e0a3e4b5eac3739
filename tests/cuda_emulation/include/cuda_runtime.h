#pragma once

// The CUDA runtime as hotloop's kernels use it, for compiling them as C++
// that runs on tests/cuda_emulation's emulator (see emulator.h): the
// function qualifiers, the built-in variables, __syncthreads, warp
// shuffles, the device functions the kernels call, and the runtime calls
// of their launchers.

#include "../emulator.h"

#include <c10/macros/Macros.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// One block runs at a time: a static is its shared memory.
#define __shared__ static

// A device-side assertion that fails throws out of the launch (on a GPU
// it ends the kernel with an error), instead of aborting the tests.
#undef CUDA_KERNEL_ASSERT
#define CUDA_KERNEL_ASSERT(cond)                                           \
  if (!(cond)) {                                                           \
    throw std::runtime_error("CUDA_KERNEL_ASSERT(" #cond ") failed");      \
  }

inline void __syncthreads() {
  ::hotloop::testing::cuda_emulation::sync_threads();
}

template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
  static_assert(
      std::is_trivially_copyable_v<T> && sizeof(T) <= sizeof(uint64_t),
      "the emulator shuffles values of up to 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = ::hotloop::testing::cuda_emulation::shuffle_xor(
      bits, mask, lane_mask, width);
  std::memcpy(&value, &bits, sizeof(T));
  return value;
}

inline float rsqrtf(float x) {
  return 1.f / std::sqrt(x);
}

enum cudaError_t { cudaSuccess = 0 };
using cudaStream_t = struct CUstream_st*;

struct cudaDeviceProp {
  int multiProcessorCount = 0;
};

inline cudaError_t cudaGetLastError() {
  return cudaSuccess;
}

inline const char* cudaGetErrorString(cudaError_t) {
  return "no error";
}

template <typename Kernel>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(
    int* blocks, Kernel, int, size_t) {
  *blocks = ::hotloop::testing::cuda_emulation::device()
                .blocks_per_multiprocessor;
  return cudaSuccess;
}
