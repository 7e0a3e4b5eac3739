#include "models/gpt_step.h"

#include "hotloop/core/compat.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

namespace hotloop::testing {

models::GptOptions without_fused_kernels(models::GptOptions options) {
  return options.fused_layer_norm(false)
      .fused_cross_entropy(false)
      .fused_bias_gradient(false);
}

GptStep tiny_gpt_step(
    const models::GptOptions& options, const at::Device& device, bool bf16) {
  at::manual_seed(1);
  models::Gpt model(options);
  model->to(device);
  at::manual_seed(2);
  const at::Tensor idx = at::randint(0, 64, {3, 16}, at::kLong).to(device);
  const at::Tensor targets =
      at::randint(0, 64, {3, 16}, at::kLong).to(device);
  const c10::DeviceType type = device.type();
  if (bf16) {
    compat::set_autocast_dtype(type, at::kBFloat16);
    compat::set_autocast_enabled(type, true);
  }
  const at::Tensor loss = model->token_loss(idx, targets);
  if (bf16) {
    compat::set_autocast_enabled(type, false);
    at::autocast::clear_cache();
  }
  loss.backward();
  GptStep step;
  step.loss = loss.item<double>();
  for (const auto& p : model->parameters()) {
    step.grads.push_back(p.grad().cpu().clone());
  }
  model->eval();
  const c10::InferenceMode evaluation; // as EvaluationLoop
  step.logits = model->forward(idx).cpu();
  return step;
}

void expect_same_step(const GptStep& step, const GptStep& reference) {
  EXPECT_EQ(step.loss, reference.loss);
  EXPECT_TRUE(step.logits.equal(reference.logits));
  ASSERT_EQ(step.grads.size(), reference.grads.size());
  for (size_t i = 0; i < reference.grads.size(); ++i) {
    EXPECT_TRUE(step.grads[i].equal(reference.grads[i])) << "parameter " << i;
  }
}

void expect_close_step(
    const GptStep& step,
    const GptStep& reference,
    double loss_tolerance,
    double grad_tolerance,
    const std::string& where) {
  EXPECT_NEAR(step.loss, reference.loss, loss_tolerance) << where;
  ASSERT_EQ(step.grads.size(), reference.grads.size()) << where;
  for (size_t i = 0; i < reference.grads.size(); ++i) {
    const at::Tensor a = step.grads[i].to(at::kDouble);
    const at::Tensor b = reference.grads[i].to(at::kDouble);
    const double scale = b.abs().max().item<double>() + 1e-6;
    EXPECT_LE((a - b).abs().max().item<double>() / scale, grad_tolerance)
        << where << ", parameter " << i;
  }
}

} // namespace hotloop::testing
