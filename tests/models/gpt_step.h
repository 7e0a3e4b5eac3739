#pragma once

// One training step of the tiny GPT, for the tests that check a model
// option (a fused kernel) trains as the model without it.

#include "hotloop/models/gpt.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <string>
#include <vector>

namespace hotloop::testing {

struct GptStep {
  double loss = 0;
  std::vector<at::Tensor> grads; // every parameter's, on the CPU
  at::Tensor logits; // the same batch in evaluation (inference mode), CPU
};

/// A Gpt(options) made after seed 1 on `device`, a [3, 16] batch of tokens
/// below 64 drawn after seed 2, its token_loss (under bfloat16 autocast
/// where `bf16`) and backward; then its logits in evaluation.
GptStep tiny_gpt_step(
    const models::GptOptions& options, const at::Device& device, bool bf16 = false);

/// `options` with hotloop's three GPT kernels off (they are on by
/// default): the baseline a test of one kernel compares against.
models::GptOptions without_fused_kernels(models::GptOptions options);

/// Expects `step` to equal `reference` bit for bit: loss, gradients and
/// evaluation logits.
void expect_same_step(const GptStep& step, const GptStep& reference);

/// Expects the losses within `loss_tolerance` and each gradient within
/// `grad_tolerance` times the largest of its reference's values (plus
/// 1e-6, for a gradient of zeros); `where` names the case in a failure.
void expect_close_step(
    const GptStep& step,
    const GptStep& reference,
    double loss_tolerance,
    double grad_tolerance,
    const std::string& where = "");

} // namespace hotloop::testing
