// add_layer_norm's CUDA kernels: a transformer's residual add and the next
// LayerNorm in one pass each way (add_layer_norm.cpp holds the autograd
// function and the ATen path they stand in for).
//
// Both kernels give a row to one warp, each lane K of its columns (lane,
// lane + 32, ...), held in registers: a row is read once and written once.
//
// Forward: the sum x + y, its mean, then the squares about that mean (two
// passes over the registers, as PyTorch's float LayerNorm is exact about
// the mean), then the normalized row in the output's dtype.
//
// Backward: a warp takes rows warp, warp + warps, ... and keeps its lanes'
// column sums of the weight's and bias's gradients in registers; the 8
// warps of a block add theirs in shared memory in a fixed order, each block
// writes one row of a [blocks, C] buffer, and ATen's sum reduces those, so
// the gradients are the same run to run.

#include "add_layer_norm_kernels.h"
#include "kernel_launch.cuh"

#include <ATen/ops/empty.h>
#include <ATen/ops/sum.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

namespace hotloop::models::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = 32 * kWarpsPerBlock;

__device__ __forceinline__ float warp_sum(float value) {
  for (int offset = 16; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

template <typename Y, typename O, int K>
__global__ void add_layer_norm_forward_kernel(
    const float* __restrict__ x,
    const Y* __restrict__ y,
    const float* __restrict__ weight,
    const float* __restrict__ bias,
    float* __restrict__ sum,
    O* __restrict__ out,
    float* __restrict__ mean,
    float* __restrict__ rstd,
    int64_t rows,
    int width,
    float eps) {
  const int64_t row =
      static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) {
    return; // the whole warp: a row is one warp's
  }
  const int64_t base = row * width;
  float v[K];
  float total = 0.f;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int i = lane + 32 * k;
    v[k] = 0.f;
    if (i < width) {
      v[k] = x[base + i] + static_cast<float>(y[base + i]);
      sum[base + i] = v[k];
      total += v[k];
    }
  }
  const float m = warp_sum(total) / width;
  float squares = 0.f;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (lane + 32 * k < width) {
      const float d = v[k] - m;
      squares += d * d;
    }
  }
  const float r = rsqrtf(warp_sum(squares) / width + eps);
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int i = lane + 32 * k;
    if (i < width) {
      const float shift = bias == nullptr ? 0.f : bias[i];
      out[base + i] = static_cast<O>((v[k] - m) * r * weight[i] + shift);
    }
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// Adds the K column sums `a` of the block's 8 warps into warp 0's, in a
// fixed tree order (4 + 4, 2 + 2, 1 + 1), through `shared` (4 x width
// floats). Every thread of the block calls it.
template <int K>
__device__ void block_column_sums(float (&a)[K], float* shared, int width) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  for (int half = kWarpsPerBlock / 2; half >= 1; half /= 2) {
    if (warp >= half && warp < 2 * half) {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const int i = lane + 32 * k;
        if (i < width) {
          shared[(warp - half) * width + i] = a[k];
        }
      }
    }
    __syncthreads();
    if (warp < half) {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const int i = lane + 32 * k;
        if (i < width) {
          a[k] += shared[warp * width + i];
        }
      }
    }
    __syncthreads();
  }
}

template <typename Y, typename O, int K>
__global__ void add_layer_norm_backward_kernel(
    const O* __restrict__ grad_out,
    const float* __restrict__ grad_sum,
    const float* __restrict__ sum,
    const float* __restrict__ mean,
    const float* __restrict__ rstd,
    const float* __restrict__ weight,
    float* __restrict__ grad_x,
    Y* __restrict__ grad_y,
    float* __restrict__ weight_parts,
    float* __restrict__ bias_parts,
    int64_t rows,
    int width) {
  __shared__ float shared[(kWarpsPerBlock / 2) * kAddLayerNormMaxWidth];
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  const int64_t warp =
      static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  float dw[K];
  float db[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    dw[k] = 0.f;
    db[k] = 0.f;
  }
  for (int64_t row = warp; row < rows; row += warps) {
    const int64_t base = row * width;
    const float m = mean[row];
    const float r = rstd[row];
    float g[K];
    float xhat[K];
    float mean_wg = 0.f; // sum of grad * weight, then its mean
    float mean_wgx = 0.f; // sum of grad * weight * xhat, then its mean
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int i = lane + 32 * k;
      g[k] = 0.f;
      xhat[k] = 0.f;
      if (i < width) {
        g[k] = static_cast<float>(grad_out[base + i]);
        xhat[k] = (sum[base + i] - m) * r;
        const float wg = g[k] * weight[i];
        mean_wg += wg;
        mean_wgx += wg * xhat[k];
        dw[k] += g[k] * xhat[k];
        db[k] += g[k];
      }
    }
    mean_wg = warp_sum(mean_wg) / width;
    mean_wgx = warp_sum(mean_wgx) / width;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int i = lane + 32 * k;
      if (i < width) {
        float d = r * (g[k] * weight[i] - mean_wg - xhat[k] * mean_wgx);
        if (grad_sum != nullptr) {
          d += grad_sum[base + i];
        }
        grad_x[base + i] = d;
        grad_y[base + i] = static_cast<Y>(d);
      }
    }
  }
  block_column_sums<K>(dw, shared, width);
  if (bias_parts != nullptr) {
    block_column_sums<K>(db, shared, width);
  }
  if (threadIdx.x / 32 == 0) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int i = lane + 32 * k;
      if (i < width) {
        weight_parts[static_cast<int64_t>(blockIdx.x) * width + i] = dw[k];
        if (bias_parts != nullptr) {
          bias_parts[static_cast<int64_t>(blockIdx.x) * width + i] = db[k];
        }
      }
    }
  }
}

// Calls f with a value of the C++ type of `type` (float, BFloat16, Half).
template <typename F>
void with_type(at::ScalarType type, const char* what, const F& f) {
  switch (type) {
    case at::kFloat:
      f(float{});
      break;
    case at::kBFloat16:
      f(c10::BFloat16{});
      break;
    case at::kHalf:
      f(c10::Half{});
      break;
    default:
      TORCH_CHECK(
          false,
          "add_layer_norm: ",
          what,
          " must be float32, bfloat16 or float16, got ",
          type);
  }
}

// Calls f with std::integral_constant<int, K>, K the columns per lane of a
// row `width` wide: 8, 16, 24 or 32.
template <typename F>
void with_columns_per_lane(int width, const F& f) {
  TORCH_CHECK(
      width > 0 && width <= kAddLayerNormMaxWidth,
      "add_layer_norm: rows of 1 to ",
      kAddLayerNormMaxWidth,
      " values, got ",
      width);
  const int per_lane = (width + 31) / 32;
  if (per_lane <= 8) {
    f(std::integral_constant<int, 8>{});
  } else if (per_lane <= 16) {
    f(std::integral_constant<int, 16>{});
  } else if (per_lane <= 24) {
    f(std::integral_constant<int, 24>{});
  } else {
    f(std::integral_constant<int, 32>{});
  }
}

} // namespace

void add_layer_norm_forward(
    const at::Tensor& x,
    const at::Tensor& y,
    const at::Tensor& weight,
    const at::Tensor& bias,
    double eps,
    at::Tensor& sum,
    at::Tensor& out,
    at::Tensor& mean,
    at::Tensor& rstd) {
  const c10::cuda::CUDAGuard guard(x.device());
  const int width = static_cast<int>(x.size(-1));
  const int64_t rows = x.numel() / width;
  if (rows == 0) {
    return;
  }
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  with_type(y.scalar_type(), "y", [&](auto y_type) {
    using Y = decltype(y_type);
    with_type(out.scalar_type(), "the output", [&](auto out_type) {
      using O = decltype(out_type);
      with_columns_per_lane(width, [&](auto k) {
        constexpr int K = decltype(k)::value;
        launch_kernel(
            add_layer_norm_forward_kernel<Y, O, K>,
            static_cast<unsigned>(blocks),
            kThreads,
            x.data_ptr<float>(),
            y.data_ptr<Y>(),
            weight.data_ptr<float>(),
            bias.defined() ? bias.data_ptr<float>() : nullptr,
            sum.data_ptr<float>(),
            out.data_ptr<O>(),
            mean.data_ptr<float>(),
            rstd.data_ptr<float>(),
            rows,
            width,
            static_cast<float>(eps));
      });
    });
  });
}

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
    at::Tensor& grad_bias) {
  const c10::cuda::CUDAGuard guard(sum.device());
  const int width = static_cast<int>(sum.size(-1));
  const int64_t rows = sum.numel() / width;
  with_type(grad_y.scalar_type(), "y", [&](auto y_type) {
    using Y = decltype(y_type);
    with_type(grad_out.scalar_type(), "the output", [&](auto out_type) {
      using O = decltype(out_type);
      with_columns_per_lane(width, [&](auto k) {
        constexpr int K = decltype(k)::value;
        constexpr auto kernel = add_layer_norm_backward_kernel<Y, O, K>;
        // As many blocks as the device runs at once, fewer for few rows:
        // each block's column sums are one row of the buffers below.
        const int64_t blocks = std::max<int64_t>(
            1,
            std::min<int64_t>(
                one_wave<kernel>(kThreads, sum.get_device()),
                (rows + kWarpsPerBlock - 1) / kWarpsPerBlock));
        at::Tensor weight_parts = at::empty({blocks, width}, sum.options());
        at::Tensor bias_parts = with_bias
            ? at::empty({blocks, width}, sum.options())
            : at::Tensor();
        launch_kernel(
            kernel,
            static_cast<unsigned>(blocks),
            kThreads,
            grad_out.data_ptr<O>(),
            grad_sum.defined() ? grad_sum.data_ptr<float>() : nullptr,
            sum.data_ptr<float>(),
            mean.data_ptr<float>(),
            rstd.data_ptr<float>(),
            weight.data_ptr<float>(),
            grad_x.data_ptr<float>(),
            grad_y.data_ptr<Y>(),
            weight_parts.data_ptr<float>(),
            with_bias ? bias_parts.data_ptr<float>() : nullptr,
            rows,
            width);
        grad_weight = weight_parts.sum(0);
        if (with_bias) {
          grad_bias = bias_parts.sum(0);
        }
      });
    });
  });
}

} // namespace hotloop::models::cuda
