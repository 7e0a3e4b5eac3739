#pragma once

// c10's CUDA error checks, on the emulator's runtime (tests/cuda_emulation).

#include <c10/util/Exception.h>
#include <cuda_runtime.h>

#define C10_CUDA_CHECK(EXPR)                                  \
  do {                                                        \
    const cudaError_t hotloop_error = (EXPR);                 \
    TORCH_CHECK(                                              \
        hotloop_error == cudaSuccess,                         \
        "CUDA error: ",                                       \
        cudaGetErrorString(hotloop_error));                   \
  } while (0)

#define C10_CUDA_KERNEL_LAUNCH_CHECK() C10_CUDA_CHECK(cudaGetLastError())
