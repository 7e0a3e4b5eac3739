// linear_gelu against the ATen ops it stands for (at::linear, then
// at::gelu): on the CPU its fused path gives their values and gradients bit
// for bit, autocast included; on a GPU its bias-gradient kernel gives
// theirs to the rounding it skips; a GPT with model.fused_bias_gradient
// trains as one without (on the CPU its layers keep ATen's ops).

#include "hotloop/models/linear_gelu.h"

#include "hotloop/core/compat.h"
#include "hotloop/models/gpt.h"
#include "models/gpt_step.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hotloop::models {
namespace {

struct Layer {
  at::Tensor x;      // [3, rows / 3, in]
  at::Tensor weight; // [out, in]
  at::Tensor bias;   // [out] or undefined
};

Layer layer(
    at::Device device,
    int64_t rows,
    int64_t in,
    int64_t out,
    at::ScalarType dtype,
    bool bias) {
  at::manual_seed(5);
  const auto f = at::TensorOptions().dtype(at::kFloat);
  Layer l;
  l.x = at::randn({3, rows / 3, in}, f).to(device, dtype);
  l.weight = at::randn({out, in}, f).mul(0.2).to(device, dtype);
  l.bias = bias ? at::randn({out}, f).mul(0.5).to(device, dtype)
                : at::Tensor();
  for (at::Tensor* t : {&l.x, &l.weight, &l.bias}) {
    if (t->defined()) {
      t->set_requires_grad(true);
    }
  }
  return l;
}

struct Result {
  at::Tensor out;
  std::vector<at::Tensor> grads; // x, weight, bias (undefined without)
};

// The layer's output into a loss through a fixed probe, under autocast on
// `device`'s type in `autocast` (at::kFloat: off).
Result run(
    const Layer& l,
    bool gelu,
    bool fused,
    at::ScalarType autocast,
    const at::Tensor& probe) {
  for (const at::Tensor& t : {l.x, l.weight, l.bias}) {
    if (t.defined() && t.grad().defined()) {
      at::Tensor(t).mutable_grad().reset();
    }
  }
  const c10::DeviceType type = l.x.device().type();
  if (autocast != at::kFloat) {
    compat::set_autocast_dtype(type, autocast);
    compat::set_autocast_enabled(type, true);
  }
  Result r;
  r.out = linear_gelu(l.x, l.weight, l.bias, gelu, fused);
  compat::set_autocast_enabled(type, false);
  at::autocast::clear_cache();
  (r.out.to(at::kFloat) * probe).sum().backward();
  for (const at::Tensor& t : {l.x, l.weight, l.bias}) {
    r.grads.push_back(
        t.defined() && t.grad().defined() ? t.grad().clone() : at::Tensor());
  }
  r.out = r.out.detach();
  return r;
}

at::Tensor probe_for(const Layer& l) {
  at::manual_seed(6);
  return at::randn({l.x.size(0), l.x.size(1), l.weight.size(0)})
      .to(l.x.device());
}

double relative_difference(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.to(at::kDouble);
  const at::Tensor y = b.to(at::kDouble);
  return (x - y).abs().max().item<double>() /
      (y.abs().max().item<double>() + 1e-12);
}

const char* const kNames[] = {"x", "weight", "bias"};

TEST(LinearGelu, OnTheCpuTheFusedPathIsTheAtenOpsBitForBit) {
  // The autograd function's backward runs ATen's gelu_backward, sum and
  // the two products as autograd's linear and gelu do: equal bit for bit,
  // in float32 and under bfloat16 autocast (the weight's cast cached, the
  // bias's gradient summed in bfloat16 as the unfused path's).
  for (const at::ScalarType autocast : {at::kFloat, at::kBFloat16}) {
    for (const bool gelu : {false, true}) {
      for (const bool bias : {true, false}) {
        const std::string where = std::string(c10::toString(autocast)) +
            (gelu ? ", gelu" : "") + (bias ? ", bias" : ", no bias");
        const Layer l =
            layer(at::Device(at::kCPU), 12, 24, 20, at::kFloat, bias);
        const at::Tensor probe = probe_for(l);
        const Result fused = run(l, gelu, true, autocast, probe);
        const Result plain = run(l, gelu, false, autocast, probe);
        EXPECT_EQ(fused.out.scalar_type(), plain.out.scalar_type()) << where;
        EXPECT_TRUE(fused.out.equal(plain.out)) << where;
        for (size_t i = 0; i < plain.grads.size(); ++i) {
          ASSERT_EQ(fused.grads[i].defined(), plain.grads[i].defined())
              << where << ", " << kNames[i];
          if (plain.grads[i].defined()) {
            EXPECT_TRUE(fused.grads[i].equal(plain.grads[i]))
                << where << ", " << kNames[i];
          }
        }
      }
    }
  }
}

TEST(LinearGelu, OnlyTheGradientsAskedForAreComputed) {
  // A frozen input (a first layer's data) or a frozen weight costs no
  // product in backward (autograd would drop what came anyway), and the
  // others' gradients are what they are when everything is trained.
  const Layer l = layer(at::Device(at::kCPU), 6, 8, 4, at::kFloat, true);
  const at::Tensor probe = probe_for(l);
  const auto backward_products = [&](const Layer& part) {
    const at::Tensor loss =
        (linear_gelu(part.x, part.weight, part.bias, true, true) * probe)
            .sum();
    const testing::OpCount mm("aten::mm");
    loss.backward();
    return mm.calls();
  };
  const Result all = run(l, true, true, at::kFloat, probe);
  EXPECT_EQ(backward_products(l), 2);
  for (const int frozen : {0, 1}) {
    Layer part = l;
    part.x = l.x.detach();
    part.weight = l.weight.detach();
    (frozen == 0 ? part.weight : part.x).set_requires_grad(true);
    EXPECT_EQ(backward_products(part), 1) << kNames[frozen] << " frozen";
    const int trained = 1 - frozen;
    const Result r = run(part, true, true, at::kFloat, probe);
    EXPECT_FALSE(r.grads[frozen].defined()) << kNames[frozen];
    EXPECT_TRUE(r.grads[trained].equal(all.grads[trained])) << kNames[trained];
    EXPECT_TRUE(r.grads[2].equal(all.grads[2]));
  }
}

TEST(LinearGelu, ABackwardWithCreateGraphIsAnErrorNamingTheOption) {
  // Its backward's gradients have no graph: a second derivative would be
  // silently wrong, so asking for one fails.
  const Layer l = layer(at::Device(at::kCPU), 6, 8, 4, at::kFloat, true);
  const at::Tensor loss =
      linear_gelu(l.x, l.weight, l.bias, true, true).pow(2).sum();
  EXPECT_EQ(
      testing::double_backward_error(loss),
      "linear_gelu (model.fused_bias_gradient) has no double backward "
      "(backward with create_graph): for one, set "
      "model.fused_bias_gradient=false");
  // Without create_graph the same graph runs backward.
  loss.backward();
  EXPECT_TRUE(l.bias.grad().defined());
}

TEST(LinearGelu, OnTheCpuTheGptsLayersKeepAtensOpsAndTheirDoubleBackward) {
  // model.fused_bias_gradient is on by default and fuses only where its
  // kernel runs: on the CPU the GPT's Linear layers are ATen's ops, not
  // linear_gelu's function (whose backward there gives the same values,
  // above, but has no double backward). So a backward with create_graph
  // runs through the model, and it trains as with the option off.
  const auto options = GptOptions::tiny().loss_chunk_size(0);
  ASSERT_TRUE(options.fused_bias_gradient());
  at::manual_seed(1);
  Gpt model(options);
  at::manual_seed(2);
  const at::Tensor idx = at::randint(0, 64, {3, 16}, at::kLong);
  const at::Tensor loss = model->forward(idx).pow(2).mean();
  EXPECT_EQ(testing::double_backward_error(loss), "no error");
  const at::Device cpu(at::kCPU);
  testing::expect_same_step(
      testing::tiny_gpt_step(GptOptions::tiny().dropout(0.1), cpu),
      testing::tiny_gpt_step(
          GptOptions::tiny().dropout(0.1).fused_bias_gradient(false), cpu));
}

TEST(LinearGeluCuda, TheKernelGivesTheAtenOpsValuesAndGradients) {
  if (const std::string why = testing::cuda_kernels_missing(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  const at::Device gpu(at::kCUDA, 0);
  struct Case {
    int64_t rows, in, out;
    at::ScalarType dtype;    // the layer's tensors
    at::ScalarType autocast; // at::kFloat: off
  };
  // GPT-2's c_fc and c_attn widths under bf16 autocast (16-byte packs,
  // many row slices), float32 (packs of 4), float16 with a width no pack
  // divides, and fewer rows than a block's 8 row lanes.
  const Case cases[] = {
      {3 * 700, 64, 3072, at::kFloat, at::kBFloat16},
      {3 * 700, 64, 2304, at::kFloat, at::kBFloat16},
      {3 * 100, 40, 36, at::kFloat, at::kFloat},
      {3 * 100, 40, 7, at::kHalf, at::kFloat},
      {3, 16, 24, at::kFloat, at::kBFloat16},
  };
  for (const Case& c : cases) {
    for (const bool gelu : {false, true}) {
      const std::string where = std::to_string(c.rows) + " x " +
          std::to_string(c.out) + " " + c10::toString(c.dtype) +
          ", autocast " + c10::toString(c.autocast) + (gelu ? ", gelu" : "");
      const Layer l = layer(gpu, c.rows, c.in, c.out, c.dtype, true);
      const at::Tensor probe = probe_for(l);
      const Result fused = run(l, gelu, true, c.autocast, probe);
      const Result plain = run(l, gelu, false, c.autocast, probe);
      // The forward is ATen's addmm and gelu either way.
      EXPECT_TRUE(fused.out.equal(plain.out)) << where;
      const bool half = c.dtype == at::kHalf || c.autocast != at::kFloat;
      for (size_t i = 0; i < 3; ++i) {
        ASSERT_TRUE(fused.grads[i].defined()) << where << ", " << kNames[i];
        EXPECT_EQ(fused.grads[i].scalar_type(), plain.grads[i].scalar_type())
            << where << ", " << kNames[i];
        // x and weight: the same products of GELU's backward, one formula
        // in float32; the bias: float32 sums where ATen's are rounded to
        // the products' dtype once.
        EXPECT_LE(
            relative_difference(fused.grads[i], plain.grads[i]),
            half ? 1e-2 : 1e-5)
            << where << ", " << kNames[i];
      }
      // The same values run to run.
      const Result again = run(l, gelu, true, c.autocast, probe);
      for (size_t i = 0; i < 3; ++i) {
        EXPECT_TRUE(again.grads[i].equal(fused.grads[i]))
            << where << ", " << kNames[i];
      }
    }
  }
}

TEST(LinearGeluCuda, TheGptWithFusedBiasGradientTrainsAsWithout) {
  if (const std::string why = testing::cuda_kernels_missing(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  const at::Device gpu(at::kCUDA, 0);
  // float32, and bfloat16 autocast as the Trainer's bf16-mixed. The
  // forward is the same ops (cuBLAS may pick its algorithms by the
  // workspace free at the call).
  const auto options = testing::without_fused_kernels(GptOptions::tiny());
  for (const bool bf16 : {false, true}) {
    testing::expect_close_step(
        testing::tiny_gpt_step(
            GptOptions(options).fused_bias_gradient(true), gpu, bf16),
        testing::tiny_gpt_step(options, gpu, bf16),
        1e-6,
        bf16 ? 2e-2 : 1e-5,
        bf16 ? "bf16" : "float32");
  }
}

} // namespace
} // namespace hotloop::models
