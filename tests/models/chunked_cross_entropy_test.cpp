// The chunked output layer and cross-entropy against the plain ones: the
// same loss and the same gradients, for every chunk size.

#include "hotloop/models/chunked_cross_entropy.h"

#include "hotloop/core/compat.h"
#include "hotloop/models/gpt.h"
#include "models/gpt_step.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace hotloop::models {
namespace {

struct Case {
  at::Tensor hidden;  // [3, 7, 8]
  at::Tensor weight;  // [11, 8]
  at::Tensor targets; // [3, 7], three of them -1
};

Case make_case(at::ScalarType dtype) {
  at::manual_seed(0);
  const auto options = at::TensorOptions().dtype(dtype);
  Case c;
  c.hidden = at::randn({3, 7, 8}, options).set_requires_grad(true);
  c.weight = at::randn({11, 8}, options).mul(0.5).set_requires_grad(true);
  c.targets = at::randint(0, 11, {3, 7}, at::kLong);
  c.targets.index_put_({0, 2}, -1);
  c.targets.index_put_({1, 6}, -1);
  c.targets.index_put_({2, 0}, -1);
  return c;
}

using hotloop::testing::max_difference;

// loss * 1.7 backward (so that the loss's own gradient is not 1), for both
// the chunked and the plain loss: loss and gradients within `tolerance`.
void expect_same(at::ScalarType dtype, int64_t chunk, double tolerance) {
  const Case a = make_case(dtype);
  const Case b = make_case(dtype);
  const at::Tensor chunked =
      chunked_cross_entropy(a.hidden, a.weight, a.targets, chunk);
  const at::Tensor plain = gpt_loss(at::linear(b.hidden, b.weight), b.targets);
  EXPECT_EQ(chunked.dim(), 0);
  EXPECT_LE(max_difference(chunked, plain), tolerance) << "loss";
  chunked.mul(1.7).backward();
  plain.mul(1.7).backward();
  EXPECT_EQ(a.hidden.grad().sizes(), b.hidden.grad().sizes());
  EXPECT_EQ(a.hidden.grad().scalar_type(), dtype);
  EXPECT_EQ(a.weight.grad().scalar_type(), dtype);
  EXPECT_LE(max_difference(a.hidden.grad(), b.hidden.grad()), tolerance)
      << "hidden's gradient";
  EXPECT_LE(max_difference(a.weight.grad(), b.weight.grad()), tolerance)
      << "weight's gradient";
  // An ignored position's row gets no gradient.
  EXPECT_EQ(a.hidden.grad()[0][2].abs().max().item<double>(), 0);
}

TEST(ChunkedCrossEntropy, EqualsThePlainLossAndGradientsForAnyChunk) {
  // 21 positions: chunks of one row, uneven chunks, one chunk, more than
  // all of them.
  for (const int64_t chunk : {1, 4, 5, 21, 100}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    expect_same(at::kFloat, chunk, 1e-6);
    expect_same(at::kDouble, chunk, 1e-12);
  }
}

TEST(ChunkedCrossEntropy, UnderAutocastTheProductsRunInItsDtype) {
  // bfloat16 products on the CPU, as the plain path's autocast linear:
  // within bfloat16's rounding of each other, and far from float32's.
  const Case a = make_case(at::kFloat);
  const Case b = make_case(at::kFloat);
  compat::set_autocast_dtype(c10::DeviceType::CPU, at::kBFloat16);
  compat::set_autocast_enabled(c10::DeviceType::CPU, true);
  const at::Tensor chunked =
      chunked_cross_entropy(a.hidden, a.weight, a.targets, 4);
  const at::Tensor plain = gpt_loss(at::linear(b.hidden, b.weight), b.targets);
  chunked.backward();
  plain.backward();
  compat::set_autocast_enabled(c10::DeviceType::CPU, false);
  at::autocast::clear_cache();
  EXPECT_EQ(chunked.scalar_type(), at::kFloat);
  EXPECT_LE(max_difference(chunked, plain), 2e-2);
  EXPECT_LE(max_difference(a.hidden.grad(), b.hidden.grad()), 2e-2);
  EXPECT_LE(max_difference(a.weight.grad(), b.weight.grad()), 2e-2);
  const Case c = make_case(at::kFloat);
  const at::Tensor exact =
      chunked_cross_entropy(c.hidden, c.weight, c.targets, 4);
  EXPECT_GT(max_difference(chunked, exact), 1e-7); // bfloat16 did round
}

TEST(ChunkedCrossEntropy, WithoutGradientsItIsTheLossAlone) {
  // Under no_grad (an evaluation) the parameters still require gradients,
  // but no backward can follow: each chunk of 3 of the 21 positions is one
  // product, the logits, not three (the gradients' two as well).
  const Case c = make_case(at::kFloat);
  {
    const at::NoGradGuard no_grad;
    const testing::OpCount mm("aten::mm");
    const at::Tensor loss =
        chunked_cross_entropy(c.hidden, c.weight, c.targets, 3);
    EXPECT_EQ(mm.calls(), 7);
    EXPECT_FALSE(loss.requires_grad());
    EXPECT_LE(
        max_difference(
            loss, gpt_loss(at::linear(c.hidden, c.weight), c.targets)),
        1e-6);
  }
  const testing::OpCount mm("aten::mm");
  chunked_cross_entropy(c.hidden, c.weight, c.targets, 3);
  EXPECT_EQ(mm.calls(), 21);
}

TEST(ChunkedCrossEntropy, RejectsBadShapesAndChunks) {
  const Case c = make_case(at::kFloat);
  const auto message = [&](const at::Tensor& hidden,
                           const at::Tensor& weight,
                           const at::Tensor& targets,
                           int64_t chunk) {
    try {
      chunked_cross_entropy(hidden, weight, targets, chunk);
    } catch (const c10::Error& error) {
      return std::string(error.what_without_backtrace());
    }
    return std::string("no error");
  };
  EXPECT_EQ(
      message(c.hidden, c.weight, c.targets, 0),
      "chunked_cross_entropy: chunk_rows must be positive, got 0");
  EXPECT_EQ(
      message(c.hidden, at::zeros({11, 5}), c.targets, 4),
      "chunked_cross_entropy: hidden [..., 8] does not fit weight [11, 5]");
  EXPECT_EQ(
      message(c.hidden, c.weight, at::zeros({3, 6}, at::kLong), 4),
      "chunked_cross_entropy: targets [3, 6] do not match hidden [3, 7, 8]");
}

TEST(ChunkedCrossEntropy, ABackwardWithCreateGraphIsAnErrorNamingTheOption) {
  // Its gradients are made in the forward, with no graph: a second
  // derivative would be silently wrong, so asking for one fails.
  const Case c = make_case(at::kFloat);
  const at::Tensor loss =
      chunked_cross_entropy(c.hidden, c.weight, c.targets, 4).mul(1.7);
  EXPECT_EQ(
      testing::double_backward_error(loss),
      "chunked_cross_entropy (model.loss_chunk_size) has no double backward "
      "(backward with create_graph): set model.loss_chunk_size=0 for it");
  // Without create_graph the same graph runs backward.
  loss.backward();
  EXPECT_TRUE(c.hidden.grad().defined());
  EXPECT_TRUE(c.weight.grad().defined());
}

// A tiny GPT's training loss on a fixed batch, and every parameter's
// gradient, on `device`.
TEST(ChunkedCrossEntropy, TheGptsTrainingLossEqualsItsLogitsLoss) {
  // model.loss_chunk_size: every parameter's gradient (the tied embedding
  // gets the output layer's and the embedding's) as with the whole batch's
  // logits.
  std::vector<testing::GptStep> runs;
  for (const int64_t chunk : {0, 5, 4096}) {
    runs.push_back(testing::tiny_gpt_step(
        GptOptions::tiny().loss_chunk_size(chunk), at::Device(at::kCPU)));
  }
  for (size_t run = 1; run < runs.size(); ++run) {
    EXPECT_NEAR(runs[run].loss, runs[0].loss, 1e-6) << "run " << run;
    for (size_t i = 0; i < runs[0].grads.size(); ++i) {
      EXPECT_LE(max_difference(runs[run].grads[i], runs[0].grads[i]), 1e-6)
          << "run " << run << ", parameter " << i;
    }
  }
}

TEST(ChunkedCrossEntropy, FusedIsTheSameOpsWhereThereIsNoKernel) {
  // On the CPU model.fused_cross_entropy changes nothing, bit for bit.
  const Case a = make_case(at::kFloat);
  const Case b = make_case(at::kFloat);
  EXPECT_FALSE(chunked_cross_entropy_is_fused(a.hidden, a.targets, at::kFloat));
  const at::Tensor fused =
      chunked_cross_entropy(a.hidden, a.weight, a.targets, 4, true);
  const at::Tensor plain =
      chunked_cross_entropy(b.hidden, b.weight, b.targets, 4, false);
  EXPECT_TRUE(fused.equal(plain));
  fused.backward();
  plain.backward();
  EXPECT_TRUE(a.hidden.grad().equal(b.hidden.grad()));
  EXPECT_TRUE(a.weight.grad().equal(b.weight.grad()));
}

TEST(ChunkedCrossEntropy, WithoutChunksTheFusedLossOptionLeavesThePlainLoss) {
  // model.fused_cross_entropy is on by default; with loss_chunk_size=0
  // there is no chunk to fuse, so the GPT takes the whole batch's logits
  // (gpt_loss) as with the option off, rather than refusing the setting.
  const auto whole = GptOptions::tiny().loss_chunk_size(0).dropout(0.1);
  ASSERT_TRUE(whole.fused_cross_entropy());
  const at::Device cpu(at::kCPU);
  testing::expect_same_step(
      testing::tiny_gpt_step(whole, cpu),
      testing::tiny_gpt_step(
          GptOptions(whole).fused_cross_entropy(false), cpu));
}

// A case on the GPU with `vocab` words: 11 takes the kernel's one-value
// walk, 50,304 (GPT-2's padded vocabulary) its 16-byte packs.
Case gpu_case(int64_t vocab) {
  at::manual_seed(5);
  const auto f = at::TensorOptions().dtype(at::kFloat);
  const at::Device gpu(at::kCUDA, 0);
  Case c;
  c.hidden = at::randn({3, 7, 64}, f).to(gpu).set_requires_grad(true);
  c.weight = at::randn({vocab, 64}, f).mul(0.3).to(gpu).set_requires_grad(true);
  c.targets = at::randint(0, vocab, {3, 7}, at::kLong);
  c.targets.index_put_({0, 2}, -1);
  c.targets.index_put_({2, 6}, -1);
  c.targets = c.targets.to(gpu);
  return c;
}

TEST(ChunkedCrossEntropyCuda, TheFusedKernelGivesTheAtenPathsLossAndGradients) {
  if (const std::string why = testing::cuda_kernels_missing(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  for (const int64_t vocab : {11, 50304}) {
    for (const bool bf16 : {false, true}) {
      for (const int64_t chunk : {4, 100}) {
        const std::string where = "vocab " + std::to_string(vocab) +
            (bf16 ? ", bf16 autocast" : ", float32") + ", chunk " +
            std::to_string(chunk);
        const Case a = gpu_case(vocab);
        const Case b = gpu_case(vocab);
        ASSERT_TRUE(chunked_cross_entropy_is_fused(
            a.hidden, a.targets, bf16 ? at::kBFloat16 : at::kFloat))
            << where;
        compat::set_autocast_dtype(c10::DeviceType::CUDA, at::kBFloat16);
        compat::set_autocast_enabled(c10::DeviceType::CUDA, bf16);
        const at::Tensor fused =
            chunked_cross_entropy(a.hidden, a.weight, a.targets, chunk, true);
        const at::Tensor plain = chunked_cross_entropy(
            b.hidden, b.weight, b.targets, chunk, false);
        compat::set_autocast_enabled(c10::DeviceType::CUDA, false);
        at::autocast::clear_cache();
        // The ATen path's bfloat16 log-softmax rounds each log-probability
        // (near -14 on average for 50,304 words and these logits: steps of
        // 1/16, 1/8 below -16); the kernel's are float32.
        EXPECT_LE(max_difference(fused, plain), bf16 ? 4e-2 : 1e-5) << where;
        fused.mul(1.7).backward();
        plain.mul(1.7).backward();
        for (const auto& [mine, theirs, name] :
             {std::make_tuple(a.hidden.grad(), b.hidden.grad(), "hidden"),
              std::make_tuple(a.weight.grad(), b.weight.grad(), "weight")}) {
          ASSERT_TRUE(mine.defined()) << where << ", " << name;
          EXPECT_EQ(mine.scalar_type(), at::kFloat) << where << ", " << name;
          const double scale = theirs.abs().max().item<double>() + 1e-12;
          EXPECT_LE(max_difference(mine, theirs) / scale, bf16 ? 2e-2 : 1e-5)
              << where << ", " << name;
        }
        // An ignored position's row gets no gradient.
        EXPECT_EQ(a.hidden.grad()[0][2].abs().max().item<double>(), 0) << where;
        // Without gradients (the kernel's loss-only walk), the loss alone.
        const at::NoGradGuard no_grad;
        EXPECT_LE(
            max_difference(
                chunked_cross_entropy(a.hidden, a.weight, a.targets, chunk, true),
                chunked_cross_entropy(a.hidden, a.weight, a.targets, chunk)),
            1e-5)
            << where;
      }
    }
  }
}

TEST(ChunkedCrossEntropyCuda, TheGptWithFusedCrossEntropyTrainsAsWithout) {
  if (const std::string why = testing::cuda_kernels_missing(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  const at::Device gpu(at::kCUDA, 0);
  const auto options =
      testing::without_fused_kernels(GptOptions::tiny().loss_chunk_size(5));
  testing::expect_close_step(
      testing::tiny_gpt_step(GptOptions(options).fused_cross_entropy(true), gpu),
      testing::tiny_gpt_step(options, gpu),
      1e-5,
      1e-4);
}

} // namespace
} // namespace hotloop::models
