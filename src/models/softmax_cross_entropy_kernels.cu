// chunked_cross_entropy's fused path: a chunk of logits becomes its rows'
// losses and, in place, its gradient, in one kernel that reads each row
// from memory once and writes it once (ATen's ops take a log-softmax that
// writes its output, and a backward that reads it and a one-hot seed and
// writes the gradient: five passes over [rows, V] to this kernel's two).
//
// A block takes a row. Its threads walk the row in 16-byte packs where the
// row allows (V a multiple of the pack), keeping a running maximum and the
// sum of exp(value - maximum); the block combines those in a fixed order
// (butterfly within each warp, then warp 0 over the warps), so the result
// is the same run to run. Then lse = max + log(sum), the loss lse - the
// target's logit, and the second walk reads the row again (from L2 as far
// as it still holds it) and writes exp(value - lse), less one at the
// target.

#include "softmax_cross_entropy_kernels.h"
#include "kernel_launch.cuh"

#include <c10/cuda/CUDAGuard.h>
#include <c10/macros/Macros.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hotloop::models::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;

// The largest of some values, and the sum of exp(value - largest) over
// them; none seen yet: {-inf, 0}.
struct MaxSum {
  float max;
  float sum;
};

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  if (a.max == -INFINITY) {
    return b;
  }
  if (b.max == -INFINITY) {
    return a;
  }
  const float top = fmaxf(a.max, b.max);
  return {top, a.sum * expf(a.max - top) + b.sum * expf(b.max - top)};
}

__device__ __forceinline__ MaxSum add_value(MaxSum a, float x) {
  if (x == -INFINITY) {
    return a; // exp(-inf) adds nothing
  }
  if (x <= a.max) {
    return {a.max, a.sum + expf(x - a.max)};
  }
  return {x, a.sum * expf(a.max - x) + 1.f}; // a NaN ends up here too
}

// The warp's MaxSum, in every lane (a butterfly: every lane combines the
// same pairs, and combine is symmetric). All 32 lanes call it.
__device__ __forceinline__ MaxSum warp_max_sum(MaxSum v) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const MaxSum other{
        __shfl_xor_sync(0xffffffffu, v.max, offset),
        __shfl_xor_sync(0xffffffffu, v.sum, offset)};
    v = combine(v, other);
  }
  return v;
}

// The block's MaxSum, in every thread. Every thread of the block calls it.
__device__ MaxSum block_max_sum(MaxSum v, MaxSum* shared) {
  v = warp_max_sum(v);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (lane == 0) {
    shared[warp] = v;
  }
  __syncthreads();
  if (warp == 0) {
    v = warp_max_sum(lane < kWarps ? shared[lane] : MaxSum{-INFINITY, 0.f});
    if (lane == 0) {
      shared[0] = v;
    }
  }
  __syncthreads();
  return shared[0];
}

template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

template <typename T, int N>
__global__ void __launch_bounds__(kThreads) softmax_cross_entropy_kernel(
    T* __restrict__ logits,
    const int64_t* __restrict__ targets,
    float* __restrict__ losses,
    int64_t vocab,
    bool gradient) {
  __shared__ MaxSum shared[kWarps];
  __shared__ float target_logit;
  const int64_t row = blockIdx.x;
  const int64_t target = targets[row];
  CUDA_KERNEL_ASSERT(target >= -1 && target < vocab);
  T* line = logits + row * vocab;
  auto* packs = reinterpret_cast<Pack<T, N>*>(line);
  const int64_t count = vocab / N;
  MaxSum v{-INFINITY, 0.f};
  for (int64_t j = threadIdx.x; j < count; j += kThreads) {
    const Pack<T, N> p = packs[j];
#pragma unroll
    for (int e = 0; e < N; ++e) {
      v = add_value(v, static_cast<float>(p.v[e]));
    }
  }
  if (threadIdx.x == 0) {
    // Read before the block's barrier: the second walk overwrites it.
    target_logit = target >= 0 ? static_cast<float>(line[target]) : 0.f;
  }
  const MaxSum all = block_max_sum(v, shared);
  const float lse = all.max + logf(all.sum);
  if (threadIdx.x == 0) {
    losses[row] = target >= 0 ? lse - target_logit : 0.f;
  }
  if (!gradient) {
    return;
  }
  for (int64_t j = threadIdx.x; j < count; j += kThreads) {
    Pack<T, N> p = packs[j];
#pragma unroll
    for (int e = 0; e < N; ++e) {
      float g = target >= 0 ? expf(static_cast<float>(p.v[e]) - lse) : 0.f;
      if (j * N + e == target) {
        g -= 1.f;
      }
      p.v[e] = static_cast<T>(g);
    }
    packs[j] = p;
  }
}

template <typename T>
void launch(
    at::Tensor& logits,
    const at::Tensor& targets,
    at::Tensor& losses,
    bool gradient) {
  const int64_t rows = logits.size(0);
  const int64_t vocab = logits.size(1);
  T* data = logits.data_ptr<T>();
  constexpr int kPack = 16 / sizeof(T);
  const bool packed = vocab % kPack == 0 &&
      reinterpret_cast<std::uintptr_t>(data) % 16 == 0;
  const auto kernel = packed ? softmax_cross_entropy_kernel<T, kPack>
                             : softmax_cross_entropy_kernel<T, 1>;
  launch_kernel(
      kernel,
      static_cast<unsigned>(rows),
      kThreads,
      data,
      targets.data_ptr<int64_t>(),
      losses.data_ptr<float>(),
      vocab,
      gradient);
}

// softmax_cross_entropy_() past its checks: the dtype's kernel launched.
void by_dtype(
    at::Tensor& logits,
    const at::Tensor& targets,
    at::Tensor& losses,
    bool gradient) {
  switch (logits.scalar_type()) {
    case at::kFloat:
      launch<float>(logits, targets, losses, gradient);
      break;
    case at::kBFloat16:
      launch<c10::BFloat16>(logits, targets, losses, gradient);
      break;
    case at::kHalf:
      launch<c10::Half>(logits, targets, losses, gradient);
      break;
    default:
      TORCH_CHECK(
          false,
          "softmax_cross_entropy_: logits must be float32, bfloat16 or "
          "float16, got ",
          logits.scalar_type());
  }
}

} // namespace

void softmax_cross_entropy_(
    at::Tensor& logits,
    const at::Tensor& targets,
    at::Tensor& losses,
    bool gradient) {
  TORCH_CHECK(
      logits.dim() == 2 && logits.is_cuda() && logits.is_contiguous() &&
          logits.size(1) > 0,
      "softmax_cross_entropy_: logits must be [N, V] with V > 0, contiguous "
      "on a CUDA device, got ",
      logits.sizes(),
      " on ",
      logits.device());
  // One value per row of logits, contiguous on their device.
  const auto check_per_row = [&](const at::Tensor& t,
                                 at::ScalarType type,
                                 const char* what,
                                 const char* type_name) {
    TORCH_CHECK(
        t.scalar_type() == type && t.is_contiguous() &&
            t.device() == logits.device() && t.numel() == logits.size(0),
        "softmax_cross_entropy_: ",
        what,
        " must be ",
        logits.size(0),
        " ",
        type_name,
        " values on ",
        logits.device());
  };
  check_per_row(targets, at::kLong, "targets", "int64");
  check_per_row(losses, at::kFloat, "losses", "float32");
  if (logits.size(0) == 0) {
    return;
  }
  const c10::cuda::CUDAGuard guard(logits.device());
  by_dtype(logits, targets, losses, gradient);
}

} // namespace hotloop::models::cuda
