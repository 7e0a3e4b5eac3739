// chunked_cross_entropy's fused CUDA kernel
// (src/models/softmax_cross_entropy_kernels.cu) on the CPU emulator, against
// ATen's log-softmax: the rows' losses and, in place, their gradients,
// ignored rows, masked and NaN logits, with and without 16-byte packs, and
// the same bits whatever the order the threads run in.

#include "cuda_emulation/emulator.h"

#include "models/softmax_cross_entropy_kernels.cu"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace hotloop::models::cuda {
namespace {

namespace emulation = hotloop::testing::cuda_emulation;

// Rows of logits with what a language model's chunk holds: targets, one
// ignored row (-1), one row partly masked to -inf.
struct Chunk {
  at::Tensor logits;
  at::Tensor targets;
};

Chunk chunk(int64_t rows, int64_t vocab, at::ScalarType dtype) {
  at::manual_seed(21);
  Chunk c;
  at::Tensor values =
      at::randn({rows, vocab}, at::TensorOptions().dtype(at::kFloat)).mul(3);
  values[1].slice(0, 0, vocab / 2).fill_(-std::numeric_limits<float>::infinity());
  c.logits = values.to(dtype);
  c.targets = at::randint(0, vocab, {rows}, at::TensorOptions().dtype(at::kLong));
  c.targets[1] = vocab - 1; // among the unmasked half
  c.targets[2] = -1;
  return c;
}

TEST(SoftmaxCrossEntropyKernel, GivesAtensLossAndGradientInPlace) {
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    // Packs of 16 bytes, more packs than the block's threads (as GPT-2's
    // 50304: each thread walks several), a vocabulary that takes none
    // (odd), and one narrower than the block (most threads see no logit).
    for (const int64_t vocab : {1024, 8200, 1001, 10}) {
      const std::string where =
          std::to_string(vocab) + " " + c10::toString(dtype);
      const Chunk c = chunk(6, vocab, dtype);
      const at::Tensor log_probs =
          at::_log_softmax(c.logits.to(at::kFloat), 1, false);
      at::Tensor logits = c.logits.clone();
      at::Tensor losses = at::empty({6}, at::TensorOptions().dtype(at::kFloat));
      by_dtype(logits, c.targets, losses, /*gradient=*/true);
      for (int64_t row = 0; row < 6; ++row) {
        const int64_t target = c.targets[row].item<int64_t>();
        if (target < 0) {
          // Ignored: no loss, no gradient.
          EXPECT_EQ(losses[row].item<float>(), 0.f) << where;
          EXPECT_TRUE(logits[row].eq(0).all().item<bool>()) << where;
          continue;
        }
        EXPECT_NEAR(
            losses[row].item<float>(),
            -log_probs[row][target].item<float>(),
            2e-5 * (1 - log_probs[row][target].item<float>()))
            << where << ", row " << row;
        // softmax - one-hot, rounded once to the dtype.
        at::Tensor expected = log_probs[row].exp();
        expected[target] -= 1;
        const at::Tensor apart =
            (logits[row].to(at::kFloat) - expected).abs();
        const double step =
            dtype == at::kFloat ? 1e-5 : (dtype == at::kHalf ? 1e-3 : 8e-3);
        EXPECT_TRUE(apart.le(expected.abs() * step + 1e-6).all().item<bool>())
            << where << ", row " << row << ": " << apart.max().item<float>();
      }
      // The masked logits' gradient is exactly zero.
      EXPECT_TRUE(logits[1].slice(0, 0, vocab / 2).eq(0).all().item<bool>())
          << where;
      EXPECT_EQ(
          emulation::launches().blocks.x, 6u); // a block a row
      EXPECT_EQ(emulation::launches().threads.x, 512u);
    }
  }
}

TEST(SoftmaxCrossEntropyKernel, WithoutTheGradientTheLogitsStay) {
  const Chunk c = chunk(4, 1024, at::kBFloat16);
  at::Tensor logits = c.logits.clone();
  at::Tensor losses = at::empty({4}, at::TensorOptions().dtype(at::kFloat));
  by_dtype(logits, c.targets, losses, /*gradient=*/false);
  EXPECT_TRUE(logits.equal(c.logits));
  at::Tensor with_gradient = c.logits.clone();
  at::Tensor same = at::empty({4}, at::TensorOptions().dtype(at::kFloat));
  by_dtype(with_gradient, c.targets, same, /*gradient=*/true);
  EXPECT_TRUE(losses.equal(same));
}

TEST(SoftmaxCrossEntropyKernel, ANanLogitMakesItsRowNan) {
  // As ATen's log-softmax: the row's loss and every gradient NaN, the
  // other rows as they were.
  const Chunk c = chunk(4, 256, at::kFloat);
  at::Tensor logits = c.logits.clone();
  logits[3][17] = std::numeric_limits<float>::quiet_NaN();
  at::Tensor losses = at::empty({4}, at::TensorOptions().dtype(at::kFloat));
  by_dtype(logits, c.targets, losses, /*gradient=*/true);
  EXPECT_TRUE(std::isnan(losses[3].item<float>()));
  EXPECT_TRUE(logits[3].isnan().all().item<bool>());
  EXPECT_FALSE(losses.slice(0, 0, 3).isnan().any().item<bool>());
  EXPECT_FALSE(logits.slice(0, 0, 3).isnan().any().item<bool>());
}

TEST(SoftmaxCrossEntropyKernel, ATargetPastTheVocabularyIsTheKernelsAssertion) {
  const Chunk c = chunk(4, 256, at::kFloat);
  at::Tensor logits = c.logits.clone();
  at::Tensor targets = c.targets.clone();
  targets[2] = 256;
  at::Tensor losses = at::empty({4}, at::TensorOptions().dtype(at::kFloat));
  try {
    by_dtype(logits, targets, losses, /*gradient=*/true);
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(
        e.what(), "CUDA_KERNEL_ASSERT(target >= -1 && target < vocab) failed");
  }
}

TEST(SoftmaxCrossEntropyKernel, TheSameBitsWhateverOrderTheThreadsRunIn) {
  const Chunk c = chunk(3, 5000, at::kBFloat16);
  at::Tensor first = c.logits.clone();
  at::Tensor first_losses =
      at::empty({3}, at::TensorOptions().dtype(at::kFloat));
  by_dtype(first, c.targets, first_losses, /*gradient=*/true);
  const emulation::ScopedDevice scope;
  for (const uint32_t seed : {0u, 1u, 2u, 3u}) {
    emulation::device().order =
        seed == 0 ? emulation::Order::reverse : emulation::Order::shuffled;
    emulation::device().seed = seed;
    at::Tensor again = c.logits.clone();
    at::Tensor losses = at::empty({3}, at::TensorOptions().dtype(at::kFloat));
    by_dtype(again, c.targets, losses, /*gradient=*/true);
    EXPECT_TRUE(again.equal(first)) << seed;
    EXPECT_TRUE(losses.equal(first_losses)) << seed;
  }
}

} // namespace
} // namespace hotloop::models::cuda
