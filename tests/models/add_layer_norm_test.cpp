// add_layer_norm against the ATen ops it joins (x + y, then layer_norm):
// on the CPU it is those ops; on a GPU its kernels give their values and
// gradients; a GPT with model.fused_layer_norm trains as one without.

#include "hotloop/models/add_layer_norm.h"

#include "hotloop/core/compat.h"
#include "hotloop/models/gpt.h"
#include "models/gpt_step.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <optional>
#include <tuple>
#include <string>
#include <vector>

namespace hotloop::models {
namespace {

using hotloop::testing::max_difference;

struct Operands {
  at::Tensor x;      // [rows..., width] float32, the residual stream
  at::Tensor y;      // the branch's output, in its dtype
  at::Tensor weight; // [width]
  at::Tensor bias;   // [width] or undefined
};

Operands operands(
    at::Device device, int64_t width, at::ScalarType y_dtype, bool bias) {
  at::manual_seed(3);
  const auto f = at::TensorOptions().dtype(at::kFloat);
  Operands o;
  o.x = at::randn({3, 5, width}, f).mul(2).add(0.5).to(device);
  o.y = at::randn({3, 5, width}, f).to(device, y_dtype);
  o.weight = at::randn({width}, f).mul(0.3).add(1).to(device);
  o.bias = bias ? at::randn({width}, f).mul(0.1).to(device) : at::Tensor();
  for (at::Tensor* t : {&o.x, &o.y, &o.weight, &o.bias}) {
    if (t->defined()) {
      t->set_requires_grad(true);
    }
  }
  return o;
}

struct Result {
  at::Tensor sum;
  at::Tensor normalized;
  std::vector<at::Tensor> grads; // x, y, weight, bias (undefined without)
};

// Both outputs into a loss that reads each: gradients flow into the sum
// (the residual stream goes on) and the normalized output (the next layer).
Result run(const Operands& o, bool fused, const at::Tensor& probe) {
  for (const at::Tensor& t : {o.x, o.y, o.weight, o.bias}) {
    if (t.defined() && t.grad().defined()) {
      at::Tensor(t).mutable_grad().reset();
    }
  }
  Result r;
  std::tie(r.sum, r.normalized) =
      add_layer_norm(o.x, o.y, o.weight, o.bias, 1e-5, fused);
  const at::Tensor loss = (r.normalized.to(at::kFloat) * probe).sum() +
      r.sum.pow(2).mean();
  loss.backward();
  for (const at::Tensor& t : {o.x, o.y, o.weight, o.bias}) {
    r.grads.push_back(t.defined() ? t.grad().clone() : at::Tensor());
  }
  return r;
}

at::Tensor probe_like(const at::Tensor& x) {
  at::manual_seed(4);
  return at::randn(x.sizes(), at::TensorOptions().dtype(at::kFloat))
      .to(x.device());
}

TEST(AddLayerNorm, OnTheCpuItIsTheAtenOps) {
  for (const bool bias : {true, false}) {
    const Operands o =
        operands(at::Device(at::kCPU), 24, at::kFloat, bias);
    EXPECT_FALSE(add_layer_norm_is_fused(o.x, o.y, o.weight, o.bias));
    const at::Tensor probe = probe_like(o.x);
    const Result fused = run(o, true, probe);
    const Result plain = run(o, false, probe);
    const at::Tensor sum = o.x + o.y;
    EXPECT_TRUE(fused.sum.equal(sum));
    EXPECT_TRUE(fused.normalized.equal(
        at::layer_norm(sum, {24}, o.weight, o.bias, 1e-5)));
    for (size_t i = 0; i < plain.grads.size(); ++i) {
      if (plain.grads[i].defined()) {
        EXPECT_TRUE(fused.grads[i].equal(plain.grads[i])) << i;
      }
    }
  }
}

TEST(AddLayerNorm, TheGptWithFusedLayerNormTrainsAsWithoutOnTheCpu) {
  // model.fused_layer_norm reorders the blocks' calls (each residual add
  // with the LayerNorm after it); on the CPU the ops are the same, so the
  // loss, every gradient and the evaluation's logits are equal bit for
  // bit (dropout drawn in the same order).
  const auto options =
      testing::without_fused_kernels(GptOptions::tiny().dropout(0.1));
  const at::Device cpu(at::kCPU);
  testing::expect_same_step(
      testing::tiny_gpt_step(GptOptions(options).fused_layer_norm(true), cpu),
      testing::tiny_gpt_step(options, cpu));
}

TEST(AddLayerNormCuda, TheKernelsGiveTheAtenOpsValuesAndGradients) {
  if (const std::string why = testing::cuda_kernels_missing(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  const at::Device gpu(at::kCUDA, 0);
  // GPT-2's width, one that is no multiple of 32, and the widest.
  for (const int64_t width : {768, 100, 1024}) {
    for (const at::ScalarType y_dtype : {at::kFloat, at::kBFloat16}) {
      for (const bool bias : {true, false}) {
        const std::string where = "width " + std::to_string(width) + ", y " +
            std::string(c10::toString(y_dtype)) +
            (bias ? ", bias" : ", no bias");
        const Operands o = operands(gpu, width, y_dtype, bias);
        ASSERT_TRUE(add_layer_norm_is_fused(o.x, o.y, o.weight, o.bias))
            << where;
        const at::Tensor probe = probe_like(o.x);
        const Result fused = run(o, true, probe);
        const Result plain = run(o, false, probe);
        // The sum is one float add either way.
        EXPECT_TRUE(fused.sum.equal(plain.sum)) << where;
        EXPECT_EQ(fused.normalized.scalar_type(), at::kFloat) << where;
        // The kernel's two-pass variance against ATen's Welford, and
        // rsqrtf: about 5e-7 of the largest value (up to about 8 here).
        EXPECT_LE(
            max_difference(fused.normalized, plain.normalized),
            4e-6 * plain.normalized.abs().max().item<double>())
            << where;
        const char* names[] = {"x", "y", "weight", "bias"};
        for (size_t i = 0; i < plain.grads.size(); ++i) {
          if (!plain.grads[i].defined()) {
            EXPECT_FALSE(fused.grads[i].defined()) << where << names[i];
            continue;
          }
          EXPECT_EQ(fused.grads[i].scalar_type(), plain.grads[i].scalar_type())
              << where << ", " << names[i];
          const double scale =
              plain.grads[i].abs().max().item<double>() + 1e-6;
          const double tolerance = y_dtype == at::kBFloat16 && i == 1
              ? 1e-2 // one bfloat16 rounding of the same float
              : 1e-4;
          EXPECT_LE(
              max_difference(fused.grads[i], plain.grads[i]) / scale,
              tolerance)
              << where << ", " << names[i];
        }
      }
    }
  }
}

TEST(AddLayerNormCuda, WhatTheKernelsDoNotTakeGoesToTheAtenOps) {
  if (const std::string why = testing::cuda_kernels_missing(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  const at::Device gpu(at::kCUDA, 0);
  const Operands wide = operands(gpu, 1056, at::kFloat, true);
  EXPECT_FALSE(
      add_layer_norm_is_fused(wide.x, wide.y, wide.weight, wide.bias));
  const Operands o = operands(gpu, 64, at::kFloat, true);
  EXPECT_FALSE(add_layer_norm_is_fused(
      o.x.transpose(0, 1), o.y.transpose(0, 1), o.weight, o.bias));
  EXPECT_FALSE(
      add_layer_norm_is_fused(o.x.to(at::kDouble), o.y, o.weight, o.bias));
  // A [1, C] weight or bias: the kernel's gradient would be [C].
  EXPECT_FALSE(
      add_layer_norm_is_fused(o.x, o.y, o.weight.unsqueeze(0), o.bias));
  EXPECT_FALSE(
      add_layer_norm_is_fused(o.x, o.y, o.weight, o.bias.unsqueeze(0)));
  const at::Tensor probe = probe_like(wide.x);
  const Result r = run(wide, true, probe);
  EXPECT_TRUE(r.sum.equal(wide.x + wide.y));
}

TEST(AddLayerNormCuda, OnlyTheSumsGradientGivesTheWeightAndBiasNone) {
  if (const std::string why = testing::cuda_kernels_missing(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  // The normalized output unused: x and y get the sum's gradient, and the
  // weight and bias none, as with ATen's ops (a weight decay then leaves
  // them alone).
  const Operands o = operands(at::Device(at::kCUDA, 0), 768, at::kBFloat16, true);
  const auto [sum, normalized] =
      add_layer_norm(o.x, o.y, o.weight, o.bias, 1e-5, true);
  sum.pow(2).sum().backward();
  const at::Tensor expected = 2 * (o.x + o.y).detach();
  EXPECT_TRUE(o.x.grad().equal(expected));
  EXPECT_TRUE(o.y.grad().equal(expected.to(at::kBFloat16)));
  EXPECT_FALSE(o.weight.grad().defined());
  EXPECT_FALSE(o.bias.grad().defined());
}

TEST(AddLayerNormCuda, ABackwardWithCreateGraphIsAnErrorNamingTheOption) {
  if (const std::string why = testing::cuda_kernels_missing(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  const Operands o = operands(at::Device(at::kCUDA, 0), 64, at::kFloat, true);
  const auto [sum, normalized] =
      add_layer_norm(o.x, o.y, o.weight, o.bias, 1e-5, true);
  const at::Tensor loss = normalized.pow(2).sum() + sum.sum();
  EXPECT_EQ(
      testing::double_backward_error(loss),
      "add_layer_norm (model.fused_layer_norm) has no double backward "
      "(backward with create_graph): for one, set "
      "model.fused_layer_norm=false");
  loss.backward();
  EXPECT_TRUE(o.weight.grad().defined());
}

TEST(AddLayerNormCuda, UnderAutocastTheOutputIsWhatTheNextMatmulReads) {
  if (const std::string why = testing::cuda_kernels_missing(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  const Operands o =
      operands(at::Device(at::kCUDA, 0), 768, at::kBFloat16, true);
  compat::set_autocast_dtype(c10::DeviceType::CUDA, at::kBFloat16);
  compat::set_autocast_enabled(c10::DeviceType::CUDA, true);
  const auto [sum, normalized] =
      add_layer_norm(o.x, o.y, o.weight, o.bias, 1e-5, true);
  compat::set_autocast_enabled(c10::DeviceType::CUDA, false);
  at::autocast::clear_cache();
  EXPECT_EQ(sum.scalar_type(), at::kFloat);
  EXPECT_EQ(normalized.scalar_type(), at::kBFloat16);
  // The float LayerNorm rounded once to bfloat16, as the linear's cast of
  // layer_norm's float output would.
  const at::Tensor expected =
      at::layer_norm(o.x + o.y, {768}, o.weight, o.bias, 1e-5)
          .to(at::kBFloat16);
  // At most one bfloat16 step apart (2^-8 of the value's binade, so 2^-7
  // of the value covers it), for the values that round the other way.
  const at::Tensor apart = (normalized.to(at::kFloat) -
                            expected.to(at::kFloat)).abs();
  EXPECT_TRUE(
      apart.le(expected.to(at::kFloat).abs() / 128 + 1e-3).all().item<bool>())
      << max_difference(normalized, expected);
  EXPECT_GT(
      normalized.eq(expected).to(at::kFloat).mean().item<double>(), 0.99);
}

TEST(AddLayerNormCuda, TheGptWithFusedLayerNormTrainsAsWithout) {
  if (const std::string why = testing::cuda_kernels_missing(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  const at::Device gpu(at::kCUDA, 0);
  // float32, and bfloat16 autocast as the Trainer's bf16-mixed; with the
  // LayerNorms' and Linears' biases and without.
  for (const bool bf16 : {false, true}) {
    for (const bool bias : {true, false}) {
      const std::string where = std::string(bf16 ? "bf16" : "float32") +
          (bias ? ", bias" : ", no bias");
      const auto options =
          testing::without_fused_kernels(GptOptions::tiny().bias(bias));
      testing::expect_close_step(
          testing::tiny_gpt_step(
              GptOptions(options).fused_layer_norm(true), gpu, bf16),
          testing::tiny_gpt_step(options, gpu, bf16),
          bf16 ? 1e-3 : 1e-5,
          bf16 ? 5e-2 : 1e-3,
          where);
    }
  }
}

} // namespace
} // namespace hotloop::models
