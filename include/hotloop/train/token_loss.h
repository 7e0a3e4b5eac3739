#pragma once

#include <ATen/core/Tensor.h>

namespace hotloop::train {

/// A language-model network that computes its training loss itself, without
/// handing the logits of the whole batch back (models::Gpt does it a chunk
/// of positions at a time, models::chunked_cross_entropy). LanguageModel
/// trains such a network through token_loss and evaluates it through its
/// forward.
class TokenLossNetwork {
 public:
  virtual ~TokenLossNetwork() = default;
  /// The mean next-token cross-entropy of the network's logits for `idx`
  /// ([B, T] int64) against `targets` ([B, T] int64; -1 ignored): what
  /// cross-entropy over forward(idx) gives, up to rounding, with the same
  /// gradients.
  virtual at::Tensor token_loss(
      const at::Tensor& idx, const at::Tensor& targets) = 0;
};

} // namespace hotloop::train
