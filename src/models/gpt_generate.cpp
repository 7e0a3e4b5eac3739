#include "hotloop/models/gpt_generate.h"

#include "hotloop/core/error.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/multinomial.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/topk.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <cmath>

namespace hotloop::models {

at::Tensor generate(
    GptImpl& model,
    const at::Tensor& idx,
    const GenerateOptions& options,
    const std::function<void(const at::Tensor&)>& on_token) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.max_new_tokens() >= 0,
      "max_new_tokens must be >= 0, got ",
      options.max_new_tokens());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.temperature() > 0 && std::isfinite(options.temperature()),
      "temperature must be positive, got ",
      options.temperature());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.top_k() >= 0,
      "top_k must be >= 0 (0: every token), got ",
      options.top_k());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.vocab_limit() >= 0,
      "vocab_limit must be >= 0 (0: every token), got ",
      options.vocab_limit());
  HOTLOOP_CHECK(
      idx.dim() == 2 && idx.size(1) >= 1 && idx.scalar_type() == at::kLong,
      "generate: the prompt must be [B, T] int64 token ids with T >= 1, got ",
      idx.sizes(),
      " ",
      idx.scalar_type());
  const int64_t vocab = model.options().vocab_size();
  HOTLOOP_CHECK(
      idx.min().item<int64_t>() >= 0 && idx.max().item<int64_t>() < vocab,
      "generate: prompt token ids must lie in [0, ",
      vocab,
      ")");
  const bool was_training = model.is_training();
  model.eval();
  torch::NoGradGuard no_grad;
  const int64_t block = model.options().block_size();
  at::Generator generator =
      at::make_generator<at::CPUGeneratorImpl>(options.seed());
  GptKvCache cache;
  at::Tensor tokens = idx;
  for (int64_t i = 0; i < options.max_new_tokens(); ++i) {
    const int64_t t = tokens.size(1);
    at::Tensor logits;
    if (options.kv_cache() && t <= block) {
      // The first step feeds the prompt; later ones only the newest token.
      const int64_t fed = cache.length();
      logits = model.decode(tokens.slice(1, fed), cache);
    } else {
      logits = model.forward(tokens.slice(1, std::max<int64_t>(t - block, 0)));
    }
    logits = logits.select(1, -1).to(at::kFloat) / options.temperature();
    if (options.vocab_limit() > 0 && options.vocab_limit() < vocab) {
      logits.slice(1, options.vocab_limit()).fill_(-INFINITY);
    }
    if (options.top_k() > 0) {
      const at::Tensor kth = std::get<0>(
          at::topk(logits, std::min(options.top_k(), vocab))).slice(1, -1);
      logits = logits.masked_fill(logits < kth, -INFINITY);
    }
    const at::Tensor probs = at::softmax(logits, -1);
    const at::Tensor next =
        at::multinomial(probs.cpu(), 1, /*replacement=*/false, generator)
            .to(tokens.device());
    tokens = at::cat({tokens, next}, 1);
    if (on_token) {
      on_token(next.select(1, 0));
    }
  }
  model.train(was_training);
  return tokens;
}

} // namespace hotloop::models
