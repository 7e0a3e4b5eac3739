#include "hotloop/models/max_pool2x2.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

namespace hotloop::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Planes ([H, W] images) per task: about 64 K input values.
int64_t grain(int64_t plane) {
  return std::max<int64_t>(1, (64 << 10) / std::max<int64_t>(1, plane));
}

// One window, as LibTorch's CPU kernel visits it: row by row, a value
// replaces the maximum when greater or NaN; the maximum starts at -inf and
// its position at the first value.
template <typename Acc>
inline void visit(Acc value, uint8_t position, Acc& best, uint8_t& winner) {
  if (value > best || std::isnan(value)) {
    best = value;
    winner = position;
  }
}

// input [P, H, W] contiguous -> output [P, OH, OW], and where wanted the
// winner of each window (0 top left, 1 top right, 2 bottom left, 3 bottom
// right).
template <typename T>
void pool_forward(
    const T* input,
    T* output,
    uint8_t* winners,
    int64_t planes,
    int64_t height,
    int64_t width) {
  // bfloat16 compared in float, as LibTorch's kernel does.
  using Acc = std::conditional_t<std::is_same_v<T, at::BFloat16>, float, T>;
  const int64_t out_h = height / 2;
  const int64_t out_w = width / 2;
  at::parallel_for(
      0, planes, grain(height * width), [&](int64_t begin, int64_t end) {
        for (int64_t p = begin; p < end; ++p) {
          const T* plane = input + p * height * width;
          T* out = output + p * out_h * out_w;
          uint8_t* won = winners ? winners + p * out_h * out_w : nullptr;
          for (int64_t oh = 0; oh < out_h; ++oh) {
            const T* top = plane + 2 * oh * width;
            const T* bottom = top + width;
            for (int64_t ow = 0; ow < out_w; ++ow) {
              Acc best = -std::numeric_limits<Acc>::infinity();
              uint8_t winner = 0;
              visit(static_cast<Acc>(top[2 * ow]), 0, best, winner);
              visit(static_cast<Acc>(top[2 * ow + 1]), 1, best, winner);
              visit(static_cast<Acc>(bottom[2 * ow]), 2, best, winner);
              visit(static_cast<Acc>(bottom[2 * ow + 1]), 3, best, winner);
              out[oh * out_w + ow] = static_cast<T>(best);
              if (won) {
                won[oh * out_w + ow] = winner;
              }
            }
          }
        }
      });
}

// grad_output [P, OH, OW] -> grad_input [P, H, W]: each window's gradient
// to its winner, zero elsewhere (the row and column a rounded-down pool
// leaves out included).
template <typename T>
void pool_backward(
    const T* grad_output,
    const uint8_t* winners,
    T* grad_input,
    int64_t planes,
    int64_t height,
    int64_t width) {
  const int64_t out_h = height / 2;
  const int64_t out_w = width / 2;
  at::parallel_for(
      0, planes, grain(height * width), [&](int64_t begin, int64_t end) {
        for (int64_t p = begin; p < end; ++p) {
          const T* grad = grad_output + p * out_h * out_w;
          const uint8_t* won = winners + p * out_h * out_w;
          T* plane = grad_input + p * height * width;
          std::fill(plane, plane + height * width, T(0));
          for (int64_t oh = 0; oh < out_h; ++oh) {
            T* top = plane + 2 * oh * width;
            for (int64_t ow = 0; ow < out_w; ++ow) {
              const uint8_t winner = won[oh * out_w + ow];
              top[(winner >> 1) * width + 2 * ow + (winner & 1)] =
                  grad[oh * out_w + ow];
            }
          }
        }
      });
}

// The gradient from the winners with differentiable ops, for a backward
// that builds a graph (second derivatives).
at::Tensor differentiable_backward(
    const at::Tensor& grad, // [P, OH, OW]
    const at::Tensor& winners,
    int64_t height,
    int64_t width) {
  const int64_t planes = grad.size(0);
  const int64_t out_h = grad.size(1);
  const int64_t out_w = grad.size(2);
  const at::Tensor zero = at::zeros({}, grad.options());
  std::vector<at::Tensor> corners;
  for (int64_t k = 0; k < 4; ++k) {
    corners.push_back(at::where(winners.eq(k), grad, zero));
  }
  const at::Tensor windows = at::stack(corners, -1) // [P, OH, OW, 4]
                                 .view({planes, out_h, out_w, 2, 2})
                                 .permute({0, 1, 3, 2, 4})
                                 .reshape({planes, 2 * out_h, 2 * out_w});
  return at::constant_pad_nd(
      windows, {0, width - 2 * out_w, 0, height - 2 * out_h});
}

std::vector<int64_t> pooled_sizes(const at::Tensor& input) {
  auto sizes = input.sizes().vec();
  sizes[sizes.size() - 2] /= 2;
  sizes[sizes.size() - 1] /= 2;
  return sizes;
}

// The kernel on a contiguous input; `winners` null where no gradient is
// wanted.
void run_forward(
    const at::Tensor& input, const at::Tensor& output, uint8_t* winners) {
  const int64_t height = input.size(-2);
  const int64_t width = input.size(-1);
  const int64_t planes = input.numel() / (height * width);
  AT_DISPATCH_FLOATING_TYPES_AND(
      at::kBFloat16, input.scalar_type(), "max_pool2x2", [&] {
        pool_forward<scalar_t>(
            input.data_ptr<scalar_t>(),
            output.data_ptr<scalar_t>(),
            winners,
            planes,
            height,
            width);
      });
}

class MaxPool2x2Function
    : public torch::autograd::Function<MaxPool2x2Function> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input) {
    const int64_t height = input.size(-2);
    const int64_t width = input.size(-1);
    const auto sizes = pooled_sizes(input);
    at::Tensor output = at::empty(sizes, input.options());
    at::Tensor winners = at::empty(sizes, input.options().dtype(at::kByte));
    run_forward(input, output, winners.data_ptr<uint8_t>());
    ctx->save_for_backward({winners});
    ctx->saved_data["height"] = height;
    ctx->saved_data["width"] = width;
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor winners = ctx->get_saved_variables()[0];
    const int64_t height = ctx->saved_data["height"].toInt();
    const int64_t width = ctx->saved_data["width"].toInt();
    const int64_t out_h = winners.size(-2);
    const int64_t out_w = winners.size(-1);
    const int64_t planes = winners.numel() / (out_h * out_w);
    auto sizes = winners.sizes().vec();
    sizes[sizes.size() - 2] = height;
    sizes[sizes.size() - 1] = width;
    const at::Tensor grad = grads[0].contiguous();
    if (at::GradMode::is_enabled()) {
      return {differentiable_backward(
                  grad.reshape({planes, out_h, out_w}),
                  winners.reshape({planes, out_h, out_w}),
                  height,
                  width)
                  .view(sizes)};
    }
    at::Tensor grad_input = at::empty(sizes, grad.options());
    AT_DISPATCH_FLOATING_TYPES_AND(
        at::kBFloat16, grad.scalar_type(), "max_pool2x2", [&] {
          pool_backward<scalar_t>(
              grad.data_ptr<scalar_t>(),
              winners.data_ptr<uint8_t>(),
              grad_input.data_ptr<scalar_t>(),
              planes,
              height,
              width);
        });
    return {grad_input};
  }
};

bool has_own_kernel(const at::Tensor& input) {
  const auto type = input.scalar_type();
  return input.device().is_cpu() && input.layout() == at::kStrided &&
         (input.dim() == 3 || input.dim() == 4) && input.is_contiguous() &&
         (type == at::kFloat || type == at::kDouble || type == at::kBFloat16) &&
         input.size(-2) >= 2 && input.size(-1) >= 2 && input.numel() > 0;
}

} // namespace

at::Tensor max_pool2x2(const at::Tensor& input) {
  if (!has_own_kernel(input)) {
    return at::max_pool2d(input, {2, 2}, {2, 2});
  }
  if (at::GradMode::is_enabled() && input.requires_grad()) {
    return MaxPool2x2Function::apply(input);
  }
  // No gradient: no winners kept, no graph.
  at::Tensor output = at::empty(pooled_sizes(input), input.options());
  run_forward(input, output, nullptr);
  return output;
}

} // namespace hotloop::models
