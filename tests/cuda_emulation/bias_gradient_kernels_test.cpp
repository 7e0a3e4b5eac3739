// bias_gradient's CUDA kernel (src/models/bias_gradient_kernels.cu) on the
// CPU emulator: column sums exact where the values make them exact, GELU's
// backward as ATen's, the grid it picks (packs, tiles, slices of rows), and
// the same bits whatever the order the threads run in.

#include "cuda_emulation/emulator.h"

#include "models/bias_gradient_kernels.cu"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

namespace hotloop::models::cuda {
namespace {

namespace emulation = hotloop::testing::cuda_emulation;

// Small integers: every column sum is exact in float32, in any order.
at::Tensor integers(int64_t rows, int64_t cols, at::ScalarType dtype) {
  return at::randint(-8, 9, {rows, cols}, at::TensorOptions().dtype(dtype));
}

struct Device : emulation::ScopedDevice {
  Device() {
    emulation::device().multiprocessors = 4; // a wave of 8 blocks
  }
};

TEST(BiasGradientKernel, SumsTheColumnsExactlyOverEveryGrid) {
  const Device device;
  at::manual_seed(11);
  struct Case {
    int64_t rows, cols;
    at::ScalarType dtype;
    unsigned tiles, slices;
  };
  // [rows, cols], and the grid: packs of 16 bytes where cols allows (32
  // lanes x 8 bfloat16 = 256 columns a tile), a wave of 8 blocks shared
  // among the tiles, each slice of rows at least 8.
  for (const Case& c : {
           Case{1000, 768, at::kBFloat16, 3, 2}, // GPT-2's attention out
           Case{300, 64, at::kFloat, 1, 8}, // a tile wider than the row
           Case{37, 100, at::kHalf, 4, 2}, // no packs: 100 % 8
           Case{3, 3072, at::kBFloat16, 12, 1}, // fewer rows than lanes
       }) {
    const std::string where = std::to_string(c.rows) + " x " +
        std::to_string(c.cols) + " " + c10::toString(c.dtype);
    const at::Tensor grad = integers(c.rows, c.cols, c.dtype);
    at::Tensor unused;
    const at::Tensor got = by_dtype(grad, at::Tensor(), unused);
    EXPECT_EQ(got.scalar_type(), at::kFloat) << where;
    EXPECT_TRUE(got.equal(grad.to(at::kFloat).sum(0))) << where;
    EXPECT_FALSE(unused.defined()) << where;
    EXPECT_EQ(emulation::launches().blocks.x, c.tiles) << where;
    EXPECT_EQ(emulation::launches().blocks.y, c.slices) << where;
    EXPECT_EQ(emulation::launches().threads.x, 32u) << where;
    EXPECT_EQ(emulation::launches().threads.y, 8u) << where;
  }
  // Data 4 bytes past a 16-byte boundary: read one value at a time.
  const at::Tensor storage = integers(1, 50 * 96 + 1, at::kFloat);
  const at::Tensor shifted = storage.view(-1).narrow(0, 1, 50 * 96).view({50, 96});
  at::Tensor unused;
  EXPECT_TRUE(by_dtype(shifted, at::Tensor(), unused)
                  .equal(shifted.to(at::kFloat).sum(0)));
  EXPECT_EQ(emulation::launches().blocks.x, 3u); // 96 / 32, unpacked
}

TEST(BiasGradientKernel, GeluBackwardIsAtensAndTheSumIsOfWhatItWrites) {
  const Device device;
  at::manual_seed(12);
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (const int64_t cols : {3072, 100}) {
      const std::string where =
          std::to_string(cols) + " " + c10::toString(dtype);
      const auto f = at::TensorOptions().dtype(at::kFloat);
      const at::Tensor pre = at::randn({70, cols}, f).mul(2).to(dtype);
      const at::Tensor grad = at::randn({70, cols}, f).to(dtype);
      at::Tensor grad_pre;
      const at::Tensor got = by_dtype(grad, pre, grad_pre);
      ASSERT_EQ(grad_pre.scalar_type(), dtype) << where;
      // ATen's formula in double, rounded once to the dtype: the kernel's
      // float is at most a step of the dtype from it.
      const at::Tensor exact =
          at::gelu_backward(grad.to(at::kDouble), pre.to(at::kDouble));
      const double step =
          dtype == at::kFloat ? 1e-6 : (dtype == at::kHalf ? 1e-3 : 8e-3);
      const at::Tensor apart = (grad_pre.to(at::kDouble) - exact).abs();
      EXPECT_TRUE(apart.le(exact.abs() * step + 1e-6).all().item<bool>())
          << where << ": " << apart.max().item<double>();
      // The bias's gradient sums the values the matmuls read.
      const at::Tensor expected = grad_pre.to(at::kDouble).sum(0);
      EXPECT_LE(
          (got.to(at::kDouble) - expected).abs().max().item<double>(),
          1e-5 * (expected.abs().max().item<double>() + 1))
          << where;
    }
  }
}

TEST(BiasGradientKernel, TheSameBitsWhateverOrderTheThreadsRunIn) {
  const Device device;
  at::manual_seed(13);
  const auto f = at::TensorOptions().dtype(at::kFloat);
  const at::Tensor pre = at::randn({300, 768}, f).to(at::kBFloat16);
  const at::Tensor grad = at::randn({300, 768}, f).to(at::kBFloat16);
  at::Tensor first_grad;
  const at::Tensor first = by_dtype(grad, pre, first_grad);
  for (const uint32_t seed : {0u, 1u, 2u, 3u}) {
    emulation::device().order =
        seed == 0 ? emulation::Order::reverse : emulation::Order::shuffled;
    emulation::device().seed = seed;
    at::Tensor again_grad;
    EXPECT_TRUE(by_dtype(grad, pre, again_grad).equal(first)) << seed;
    EXPECT_TRUE(again_grad.equal(first_grad)) << seed;
  }
}

TEST(BiasGradientKernel, RefusesTensorsOffTheGpu) {
  at::Tensor unused;
  try {
    bias_gradient(at::zeros({4, 8}), at::Tensor(), unused);
    ADD_FAILURE() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_NE(
        std::string(e.what()).find(
            "bias_gradient: grad must be [N, M], contiguous on a CUDA "
            "device, got [4, 8] on cpu"),
        std::string::npos)
        << e.what();
  }
}

} // namespace
} // namespace hotloop::models::cuda
