#pragma once

#include "hotloop/models/gpt.h"

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include <cstdint>
#include <functional>

namespace hotloop::models {

/// Sampling settings of nanoGPT's sample.py.
struct GenerateOptions {
  /// Tokens to append; >= 0.
  TORCH_ARG(int64_t, max_new_tokens) = 100;
  /// Divides the logits before the softmax: < 1 sharper, > 1 more random;
  /// > 0.
  TORCH_ARG(double, temperature) = 1.0;
  /// Sample among the k most likely tokens only; 0: all of them.
  TORCH_ARG(int64_t, top_k) = 0;
  /// Seeds the sampling's own CPU generator, as sample.py's
  /// torch.manual_seed(seed): the same seed and model give the same tokens.
  TORCH_ARG(uint64_t, seed) = 1337;
  /// Keep every layer's keys and values (GptKvCache), so each new token
  /// costs one position instead of the whole context.
  TORCH_ARG(bool, kv_cache) = true;
  /// Sample only tokens below this id (a vocabulary padded past the
  /// tokenizer's, such as nanoGPT's 50304 rows for GPT-2's 50257); 0: every
  /// token.
  TORCH_ARG(int64_t, vocab_limit) = 0;
};

/// nanoGPT's GPT.generate: appends max_new_tokens sampled tokens to `idx`
/// ([B, T] int64, T >= 1) and returns [B, T + max_new_tokens]. Each step
/// takes the last position's logits over the last block_size tokens,
/// divides them by the temperature, keeps the top_k, and samples from the
/// softmax. With the KV cache the context is fed once and then a token a
/// step; once the sequence outgrows block_size every position moves, so
/// each step recomputes the cropped context, as nanoGPT does. The tokens
/// equal nanoGPT's for the same weights, prompt and seed. `on_token`, when
/// given, gets each new token [B] as it is chosen. Runs in eval mode
/// without gradients, restoring the module's mode. Throws ConfigError for
/// a bad option, Error for a bad `idx`.
at::Tensor generate(
    GptImpl& model,
    const at::Tensor& idx,
    const GenerateOptions& options,
    const std::function<void(const at::Tensor&)>& on_token = {});

} // namespace hotloop::models
