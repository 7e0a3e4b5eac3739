// linear_gelu's CUDA kernel: a Linear layer's bias gradient (the column
// sums of its output gradient), and for the MLP's first layer GELU's
// backward in the same pass (linear_gelu.cpp holds the autograd function
// and the ATen path it stands in for). ATen sums a bias gradient with its
// general reduction, at about a third of the memory's bandwidth for GPT-2's
// [16384, 768 .. 3072] bfloat16 gradients, after GELU's backward has
// written the gradient it then reads again.
//
// A block is 32 lanes across 32 packs of columns (16 bytes each where the
// columns allow, so that a warp reads 512 contiguous bytes of a row) by 8
// rows at a time, over one slice of the rows; each thread keeps its
// columns' sums in registers, the block adds its 8 row lanes in shared
// memory in a fixed order and writes one row of a [slices, M] float32
// buffer, which ATen's sum reduces: the same values run to run.

#include "bias_gradient_kernels.h"
#include "kernel_launch.cuh"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace hotloop::models::cuda {
namespace {

constexpr int kLanes = 32;
constexpr int kRowLanes = 8;
constexpr int kThreads = kLanes * kRowLanes;

template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// GELU's backward, as ATen's (approximate "none"): dy * (Phi(x) + x phi(x)).
__device__ __forceinline__ float gelu_backward(float dy, float x) {
  constexpr float kBeta = M_SQRT1_2;
  constexpr float kAlpha = M_2_SQRTPI * M_SQRT1_2 * 0.5;
  const float cdf = 0.5f * (1.f + erff(x * kBeta));
  const float pdf = expf(-0.5f * x * x) * kAlpha;
  return dy * (cdf + x * pdf);
}

template <typename T, int V, bool kGelu>
__global__ void __launch_bounds__(kThreads, 4) bias_gradient_kernel(
    const T* __restrict__ grad,
    const T* __restrict__ pre_gelu,
    T* __restrict__ grad_pre_gelu,
    float* __restrict__ parts,
    int64_t rows,
    int64_t cols,
    int64_t rows_per_slice) {
  __shared__ float shared[kRowLanes][kLanes * V];
  const int lane = threadIdx.x;
  const int row_lane = threadIdx.y;
  const int64_t tile = static_cast<int64_t>(blockIdx.x) * kLanes * V;
  const int64_t col = tile + static_cast<int64_t>(lane) * V;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * rows_per_slice;
  const int64_t end = begin + rows_per_slice < rows ? begin + rows_per_slice
                                                    : rows;
  float sums[V];
#pragma unroll
  for (int e = 0; e < V; ++e) {
    sums[e] = 0.f;
  }
  // V > 1 only where cols is a multiple of V: a pack is in the row or not.
  if (col < cols) {
#pragma unroll 4
    for (int64_t r = begin + row_lane; r < end; r += kRowLanes) {
      const int64_t at = r * cols + col;
      Pack<T, V> g = *reinterpret_cast<const Pack<T, V>*>(grad + at);
      if constexpr (kGelu) {
        const Pack<T, V> x = *reinterpret_cast<const Pack<T, V>*>(pre_gelu + at);
#pragma unroll
        for (int e = 0; e < V; ++e) {
          g.v[e] = static_cast<T>(gelu_backward(
              static_cast<float>(g.v[e]), static_cast<float>(x.v[e])));
        }
        *reinterpret_cast<Pack<T, V>*>(grad_pre_gelu + at) = g;
      }
      // The sum of the gradient as the matmuls read it (in T).
#pragma unroll
      for (int e = 0; e < V; ++e) {
        sums[e] += static_cast<float>(g.v[e]);
      }
    }
  }
#pragma unroll
  for (int e = 0; e < V; ++e) {
    shared[row_lane][lane * V + e] = sums[e];
  }
  __syncthreads();
  for (int c = row_lane * kLanes + lane; c < kLanes * V; c += kThreads) {
    if (tile + c < cols) {
      float total = 0.f;
#pragma unroll
      for (int y = 0; y < kRowLanes; ++y) {
        total += shared[y][c];
      }
      parts[static_cast<int64_t>(blockIdx.y) * cols + tile + c] = total;
    }
  }
}

template <typename T, int V, bool kGelu>
at::Tensor launch(
    const at::Tensor& grad,
    const at::Tensor& pre_gelu,
    at::Tensor& grad_pre_gelu) {
  const int64_t rows = grad.size(0);
  const int64_t cols = grad.size(1);
  constexpr auto kernel = bias_gradient_kernel<T, V, kGelu>;
  // At most as many blocks as the device runs at once (a block past one
  // wave would run alone after it), the rows split among each column
  // tile's blocks (a slice at least one row per row lane).
  const int64_t resident = one_wave<kernel>(kThreads, grad.get_device());
  const int64_t tiles = (cols + kLanes * V - 1) / (kLanes * V);
  const int64_t wanted = std::max<int64_t>(
      1,
      std::min<int64_t>(
          resident / tiles, (rows + kRowLanes - 1) / kRowLanes));
  const int64_t rows_per_slice = (rows + wanted - 1) / wanted;
  const int64_t slices = (rows + rows_per_slice - 1) / rows_per_slice;
  TORCH_CHECK(
      tiles <= 0x7fffffff && slices <= 65535,
      "bias_gradient: [",
      rows,
      ", ",
      cols,
      "] is more than one launch covers");
  at::Tensor parts =
      at::empty({slices, cols}, grad.options().dtype(at::kFloat));
  const dim3 blocks(static_cast<unsigned>(tiles), static_cast<unsigned>(slices));
  const dim3 threads(kLanes, kRowLanes);
  launch_kernel(
      kernel,
      blocks,
      threads,
      grad.data_ptr<T>(),
      kGelu ? pre_gelu.data_ptr<T>() : nullptr,
      kGelu ? grad_pre_gelu.data_ptr<T>() : nullptr,
      parts.data_ptr<float>(),
      rows,
      cols,
      rows_per_slice);
  return parts.sum(0);
}

bool aligned(const at::Tensor& t) {
  return !t.defined() ||
      reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0;
}

template <typename T>
at::Tensor dispatch(
    const at::Tensor& grad,
    const at::Tensor& pre_gelu,
    at::Tensor& grad_pre_gelu) {
  constexpr int kPack = 16 / sizeof(T);
  const bool packed = grad.size(1) % kPack == 0 && aligned(grad) &&
      aligned(pre_gelu) && aligned(grad_pre_gelu);
  if (pre_gelu.defined()) {
    return packed ? launch<T, kPack, true>(grad, pre_gelu, grad_pre_gelu)
                  : launch<T, 1, true>(grad, pre_gelu, grad_pre_gelu);
  }
  return packed ? launch<T, kPack, false>(grad, pre_gelu, grad_pre_gelu)
                : launch<T, 1, false>(grad, pre_gelu, grad_pre_gelu);
}

// bias_gradient() past its checks: grad_pre_gelu made, the dtype's kernel
// launched.
at::Tensor by_dtype(
    const at::Tensor& grad,
    const at::Tensor& pre_gelu,
    at::Tensor& grad_pre_gelu) {
  grad_pre_gelu =
      pre_gelu.defined() ? at::empty_like(grad) : at::Tensor();
  if (grad.numel() == 0) {
    return at::zeros({grad.size(1)}, grad.options().dtype(at::kFloat));
  }
  switch (grad.scalar_type()) {
    case at::kFloat:
      return dispatch<float>(grad, pre_gelu, grad_pre_gelu);
    case at::kBFloat16:
      return dispatch<c10::BFloat16>(grad, pre_gelu, grad_pre_gelu);
    case at::kHalf:
      return dispatch<c10::Half>(grad, pre_gelu, grad_pre_gelu);
    default:
      TORCH_CHECK(
          false,
          "bias_gradient: grad must be float32, bfloat16 or float16, got ",
          grad.scalar_type());
  }
}

} // namespace

at::Tensor bias_gradient(
    const at::Tensor& grad,
    const at::Tensor& pre_gelu,
    at::Tensor& grad_pre_gelu) {
  TORCH_CHECK(
      grad.dim() == 2 && grad.is_cuda() && grad.is_contiguous(),
      "bias_gradient: grad must be [N, M], contiguous on a CUDA device, "
      "got ",
      grad.sizes(),
      " on ",
      grad.device());
  TORCH_CHECK(
      !pre_gelu.defined() ||
          (pre_gelu.sizes() == grad.sizes() &&
           pre_gelu.scalar_type() == grad.scalar_type() &&
           pre_gelu.device() == grad.device() && pre_gelu.is_contiguous()),
      "bias_gradient: pre_gelu must be contiguous ",
      grad.sizes(),
      " ",
      grad.scalar_type(),
      " on ",
      grad.device());
  const c10::cuda::CUDAGuard guard(grad.device());
  return by_dtype(grad, pre_gelu, grad_pre_gelu);
}

} // namespace hotloop::models::cuda
