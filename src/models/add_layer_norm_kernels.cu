// add_layer_norm's CUDA kernels: a transformer's residual add and the next
// LayerNorm in one pass each way (add_layer_norm.cpp holds the autograd
// function and the ATen path they stand in for).
//
// Forward: one warp per row. The sum x + y is written, then read back by the
// lane that wrote it for the variance (two passes over a row in L1, so the
// mean is exact before the squares, as in PyTorch's float LayerNorm), then
// normalized into the output's dtype.
//
// Backward: each warp takes rows warp, warp + warps, ... and keeps its lanes'
// column sums of the weight's and bias's gradients in registers (K columns a
// lane); the per-warp sums go to a [warps, C] buffer that ATen's sum reduces
// in a fixed order, so the result is the same run to run.

#include "add_layer_norm_kernels.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/sum.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <type_traits>

namespace hotloop::models::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = 32 * kWarpsPerBlock;
// Warps of the backward: about 32 on each of an H100's 132 SMs, so that
// their loads hide the memory's latency; the [warps, C] partial sums of the
// weight's and bias's gradients are then 25 MB at C 768, read once by the
// sum that reduces them.
constexpr int64_t kBackwardWarps = 4096;

__device__ __forceinline__ float warp_sum(float value) {
  for (int offset = 16; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

template <typename Y, typename O>
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
  float total = 0.f;
  for (int i = lane; i < width; i += 32) {
    const float value = x[base + i] + static_cast<float>(y[base + i]);
    sum[base + i] = value;
    total += value;
  }
  const float m = warp_sum(total) / width;
  float squares = 0.f;
  for (int i = lane; i < width; i += 32) {
    const float d = sum[base + i] - m;
    squares += d * d;
  }
  const float r = rsqrtf(warp_sum(squares) / width + eps);
  for (int i = lane; i < width; i += 32) {
    const float normalized = (sum[base + i] - m) * r;
    const float shift = bias == nullptr ? 0.f : bias[i];
    out[base + i] = static_cast<O>(normalized * weight[i] + shift);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
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
    float mean_wg = 0.f; // sum of grad * weight, then its mean
    float mean_wgx = 0.f; // sum of grad * weight * xhat, then its mean
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int i = lane + 32 * k;
      if (i < width) {
        const float g = static_cast<float>(grad_out[base + i]);
        const float xhat = (sum[base + i] - m) * r;
        const float wg = g * weight[i];
        mean_wg += wg;
        mean_wgx += wg * xhat;
        dw[k] += g * xhat;
        db[k] += g;
      }
    }
    mean_wg = warp_sum(mean_wg) / width;
    mean_wgx = warp_sum(mean_wgx) / width;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int i = lane + 32 * k;
      if (i < width) {
        const float g = static_cast<float>(grad_out[base + i]);
        const float xhat = (sum[base + i] - m) * r;
        float d = r * (g * weight[i] - mean_wg - xhat * mean_wgx);
        if (grad_sum != nullptr) {
          d += grad_sum[base + i];
        }
        grad_x[base + i] = d;
        grad_y[base + i] = static_cast<Y>(d);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int i = lane + 32 * k;
    if (i < width) {
      weight_parts[warp * width + i] = dw[k];
      bias_parts[warp * width + i] = db[k];
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

template <typename Y, typename O, int K>
void launch_backward(
    int64_t blocks,
    const at::Tensor& grad_out,
    const at::Tensor& grad_sum,
    const at::Tensor& sum,
    const at::Tensor& mean,
    const at::Tensor& rstd,
    const at::Tensor& weight,
    at::Tensor& grad_x,
    at::Tensor& grad_y,
    at::Tensor& weight_parts,
    at::Tensor& bias_parts,
    int64_t rows,
    int width) {
  add_layer_norm_backward_kernel<Y, O, K>
      <<<blocks, kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
          grad_out.data_ptr<O>(),
          grad_sum.defined() ? grad_sum.data_ptr<float>() : nullptr,
          sum.data_ptr<float>(),
          mean.data_ptr<float>(),
          rstd.data_ptr<float>(),
          weight.data_ptr<float>(),
          grad_x.data_ptr<float>(),
          grad_y.data_ptr<Y>(),
          weight_parts.data_ptr<float>(),
          bias_parts.data_ptr<float>(),
          rows,
          width);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
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
      add_layer_norm_forward_kernel<Y, O>
          <<<blocks, kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
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
      C10_CUDA_KERNEL_LAUNCH_CHECK();
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
  TORCH_CHECK(
      width <= kAddLayerNormMaxWidth,
      "add_layer_norm: rows of at most ",
      kAddLayerNormMaxWidth,
      " values, got ",
      width);
  const int64_t rows = sum.numel() / width;
  const int64_t warps = std::max<int64_t>(
      kWarpsPerBlock,
      std::min(
          kBackwardWarps,
          (rows + kWarpsPerBlock - 1) / kWarpsPerBlock * kWarpsPerBlock));
  const int64_t blocks = warps / kWarpsPerBlock;
  at::Tensor weight_parts = at::empty({warps, width}, sum.options());
  at::Tensor bias_parts = at::empty({warps, width}, sum.options());
  with_type(grad_y.scalar_type(), "y", [&](auto y_type) {
    using Y = decltype(y_type);
    with_type(grad_out.scalar_type(), "the output", [&](auto out_type) {
      using O = decltype(out_type);
      const int per_lane = (width + 31) / 32;
      const auto launch = [&](auto k) {
        constexpr int K = decltype(k)::value;
        launch_backward<Y, O, K>(
            blocks,
            grad_out,
            grad_sum,
            sum,
            mean,
            rstd,
            weight,
            grad_x,
            grad_y,
            weight_parts,
            bias_parts,
            rows,
            width);
      };
      if (per_lane <= 8) {
        launch(std::integral_constant<int, 8>{});
      } else if (per_lane <= 16) {
        launch(std::integral_constant<int, 16>{});
      } else if (per_lane <= 24) {
        launch(std::integral_constant<int, 24>{});
      } else if (per_lane <= 32) {
        launch(std::integral_constant<int, 32>{});
      } else {
        launch(std::integral_constant<int, 64>{});
      }
    });
  });
  grad_weight = weight_parts.sum(0);
  if (with_bias) {
    grad_bias = bias_parts.sum(0);
  }
}

} // namespace hotloop::models::cuda
