// add_layer_norm's CUDA kernels (src/models/add_layer_norm_kernels.cu) on
// the CPU emulator, against ATen's add and LayerNorm: the values and
// gradients, every row width class, rows beyond one wave of warps, and the
// same bits whatever the order the threads run in.

#include "cuda_emulation/emulator.h"
#include "test_util.h"

#include "models/add_layer_norm_kernels.cu"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace hotloop::models::cuda {
namespace {

namespace emulation = hotloop::testing::cuda_emulation;

using hotloop::testing::max_difference;

struct Case {
  int64_t rows;
  int64_t width;
  at::ScalarType y_dtype;
  at::ScalarType out_dtype;
  bool bias;
  bool grad_sum;

  std::string name() const {
    return std::to_string(rows) + " x " + std::to_string(width) + ", y " +
        c10::toString(y_dtype) + ", out " + c10::toString(out_dtype) +
        (bias ? ", bias" : ", no bias") +
        (grad_sum ? ", the sum's gradient" : "");
  }
};

struct Operands {
  at::Tensor x, y, weight, bias, grad_out, grad_sum;
};

Operands operands(const Case& c) {
  at::manual_seed(7);
  const auto f = at::TensorOptions().dtype(at::kFloat);
  Operands o;
  o.x = at::randn({c.rows, c.width}, f).mul(2).add(0.5);
  o.y = at::randn({c.rows, c.width}, f).to(c.y_dtype);
  o.weight = at::randn({c.width}, f).mul(0.3).add(1);
  o.bias = c.bias ? at::randn({c.width}, f).mul(0.1) : at::Tensor();
  o.grad_out = at::randn({c.rows, c.width}, f).to(c.out_dtype);
  o.grad_sum = c.grad_sum ? at::randn({c.rows, c.width}, f) : at::Tensor();
  return o;
}

// What the kernels give, allocated as add_layer_norm.cpp does.
struct Result {
  at::Tensor sum, out, mean, rstd;
  at::Tensor grad_x, grad_y, grad_weight, grad_bias;

  std::vector<at::Tensor> all() const {
    return {sum, out, mean, rstd, grad_x, grad_y, grad_weight, grad_bias};
  }
};

Result run(const Case& c, const Operands& o) {
  Result r;
  r.sum = at::empty_like(o.x);
  r.out = at::empty_like(o.x, o.x.options().dtype(c.out_dtype));
  r.mean = at::empty({c.rows}, o.x.options());
  r.rstd = at::empty({c.rows}, o.x.options());
  add_layer_norm_forward(
      o.x, o.y, o.weight, o.bias, 1e-5, r.sum, r.out, r.mean, r.rstd);
  r.grad_x = at::empty_like(r.sum);
  r.grad_y = at::empty_like(r.sum, r.sum.options().dtype(c.y_dtype));
  add_layer_norm_backward(
      o.grad_out,
      o.grad_sum,
      r.sum,
      r.mean,
      r.rstd,
      o.weight,
      c.bias,
      r.grad_x,
      r.grad_y,
      r.grad_weight,
      r.grad_bias);
  return r;
}

void expect_like_aten(const Case& c, const Operands& o, const Result& r) {
  const std::string where = c.name();
  // The sum: one float add, as ATen's x + y.
  const at::Tensor sum = o.x + o.y;
  EXPECT_TRUE(r.sum.equal(sum)) << where;
  const auto [out, mean, rstd] =
      at::native_layer_norm(sum, {c.width}, o.weight, o.bias, 1e-5);
  // ATen's are [rows, 1].
  EXPECT_LE(max_difference(r.mean, mean.reshape(-1)), 1e-6) << where;
  EXPECT_LE(
      max_difference(r.rstd, rstd.reshape(-1)) /
          rstd.abs().max().item<double>(),
      1e-6)
      << where;
  ASSERT_EQ(r.out.scalar_type(), c.out_dtype) << where;
  if (c.out_dtype == at::kFloat) {
    EXPECT_LE(max_difference(r.out, out), 1e-5) << where;
  } else {
    // The float LayerNorm rounded once: at most a step of the out dtype.
    const at::Tensor apart = (r.out.to(at::kFloat) - out).abs();
    EXPECT_TRUE(apart.le(out.abs() / 128 + 1e-3).all().item<bool>())
        << where << ": " << max_difference(r.out, out);
  }
  // ATen's LayerNorm backward of the float gradient of the output, plus
  // the sum's own gradient.
  const auto [dx, dw, db] = at::native_layer_norm_backward(
      o.grad_out.to(at::kFloat),
      sum,
      {c.width},
      mean,
      rstd,
      o.weight,
      o.bias,
      {true, true, c.bias});
  const at::Tensor d = c.grad_sum ? dx + o.grad_sum : dx;
  const auto relative = [](const at::Tensor& a, const at::Tensor& b) {
    return max_difference(a, b) / (b.abs().max().item<double>() + 1e-6);
  };
  EXPECT_LE(relative(r.grad_x, d), 1e-5) << where;
  ASSERT_EQ(r.grad_y.scalar_type(), c.y_dtype) << where;
  EXPECT_LE(relative(r.grad_y, d), c.y_dtype == at::kFloat ? 1e-5 : 1e-2)
      << where;
  EXPECT_LE(relative(r.grad_weight, dw), 1e-5) << where;
  ASSERT_EQ(r.grad_bias.defined(), c.bias) << where;
  if (c.bias) {
    EXPECT_LE(relative(r.grad_bias, db), 1e-5) << where;
  }
}

TEST(AddLayerNormKernels, GiveTheAtenOpsValuesAndGradientsOnTheEmulator) {
  const emulation::ScopedDevice scope;
  // One multiprocessor of two blocks: 16 warps, so 40 rows take a warp
  // two or three rows in the backward's loop.
  emulation::device().multiprocessors = 1;
  // GPT-2's width (24 values a lane), one that is no multiple of 32, the
  // widest, one of 16 values a lane, one value a lane.
  for (const int64_t width : {768, 100, 1024, 384, 32}) {
    for (const auto& [y_dtype, out_dtype] :
         {std::tuple{at::kFloat, at::kFloat},
          std::tuple{at::kBFloat16, at::kFloat},
          std::tuple{at::kBFloat16, at::kBFloat16},
          std::tuple{at::kHalf, at::kHalf}}) {
      for (const auto& [bias, grad_sum] :
           {std::pair{true, true}, std::pair{false, false},
            std::pair{true, false}, std::pair{false, true}}) {
        if (bias != grad_sum && y_dtype != at::kBFloat16) {
          continue; // the mixed pairs once per width
        }
        const Case c{40, width, y_dtype, out_dtype, bias, grad_sum};
        const Operands o = operands(c);
        expect_like_aten(c, o, run(c, o));
      }
    }
  }
}

TEST(AddLayerNormKernels, RowsOfTinyVarianceAreWhereEpsTells) {
  // A variance near eps (1e-5): without eps, or with it in the wrong
  // place, the output is far off.
  const Case c{40, 768, at::kFloat, at::kFloat, true, true};
  Operands o = operands(c);
  o.x = at::randn_like(o.x).mul(1e-3);
  o.y = at::zeros_like(o.y);
  const Result r = run(c, o);
  const at::Tensor out =
      at::layer_norm(o.x + o.y, {768}, o.weight, o.bias, 1e-5);
  const at::Tensor without_eps =
      at::layer_norm(o.x + o.y, {768}, o.weight, o.bias, 0);
  EXPECT_LE(max_difference(r.out, out), 1e-4);
  EXPECT_GT(max_difference(out, without_eps), 0.1);
  expect_like_aten(c, o, r);
}

TEST(AddLayerNormKernels, ARowOfOneValueNormalizesToTheBiasExactly) {
  // Its mean is itself: the output is the bias, the input's gradient the
  // sum's alone, the weight's zero, the bias's the output's gradient
  // summed (exact: small integers). ATen's float LayerNorm leaves
  // rounding noise in each.
  for (const at::ScalarType y_dtype : {at::kFloat, at::kBFloat16}) {
    const Case c{15, 1, y_dtype, at::kFloat, true, true};
    Operands o = operands(c);
    o.grad_out = at::randint(-8, 9, {15, 1}, o.x.options());
    const Result r = run(c, o);
    EXPECT_TRUE(r.sum.equal(o.x + o.y));
    EXPECT_TRUE(r.out.equal(o.bias.expand({15, 1})));
    EXPECT_TRUE(r.grad_x.equal(o.grad_sum));
    EXPECT_TRUE(r.grad_y.equal(o.grad_sum.to(y_dtype)));
    EXPECT_TRUE(r.grad_weight.equal(at::zeros({1})));
    EXPECT_TRUE(r.grad_bias.equal(o.grad_out.sum(0)));
  }
}

TEST(AddLayerNormKernels, TheSameBitsWhateverOrderTheThreadsRunIn) {
  const emulation::ScopedDevice scope;
  const Case c{40, 768, at::kBFloat16, at::kBFloat16, true, true};
  const Operands o = operands(c);
  emulation::device().multiprocessors = 1;
  const Result first = run(c, o);
  for (const uint32_t seed : {0u, 1u, 2u, 3u}) {
    emulation::device().order =
        seed == 0 ? emulation::Order::reverse : emulation::Order::shuffled;
    emulation::device().seed = seed;
    const Result again = run(c, o);
    for (size_t i = 0; i < first.all().size(); ++i) {
      EXPECT_TRUE(again.all()[i].equal(first.all()[i])) << i << ", " << seed;
    }
  }
  // The backward's grid: one wave of the emulated device's two blocks.
  EXPECT_EQ(emulation::launches().blocks.x, 2u);
  EXPECT_EQ(emulation::launches().threads.x, 256u);
}

} // namespace
} // namespace hotloop::models::cuda
