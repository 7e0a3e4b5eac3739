#pragma once

#include "hotloop/train/token_loss.h"

#include <ATen/core/Tensor.h>
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace hotloop::models {

namespace detail {
class GptBlockImpl;
class GptLayerNormImpl;
} // namespace detail

/// Shape of a GPT-2-style decoder; names and defaults as nanoGPT's
/// GPTConfig, except vocab_size (GPT-2's 50257, where nanoGPT pads to 50304).
struct GptOptions {
  /// GPT-2 small (124M parameters), the defaults.
  static GptOptions gpt2_124m();
  /// 64 tokens, 16 positions, 2 layers of 2 heads, 32 dims: for tests and
  /// smoke runs.
  static GptOptions tiny();

  /// Tokens in the vocabulary; > 0.
  TORCH_ARG(int64_t, vocab_size) = 50257;
  /// Longest sequence (number of position embeddings); > 0.
  TORCH_ARG(int64_t, block_size) = 1024;
  /// Transformer blocks; > 0.
  TORCH_ARG(int64_t, n_layer) = 12;
  /// Attention heads per block; > 0 and divides n_embd.
  TORCH_ARG(int64_t, n_head) = 12;
  /// Width of the residual stream; > 0.
  TORCH_ARG(int64_t, n_embd) = 768;
  /// Dropout on embeddings, attention weights and residual branches, in
  /// [0, 1).
  TORCH_ARG(double, dropout) = 0.0;
  /// Biases in the Linear layers and LayerNorms, as GPT-2.
  TORCH_ARG(bool, bias) = true;
  /// In training, keep only each block's input and recompute the block in
  /// backward (train::checkpoint): activation memory of one block instead
  /// of n_layer, for one more forward.
  TORCH_ARG(bool, activation_checkpointing) = false;
  /// Positions per chunk of the training loss (token_loss): the output
  /// layer and cross-entropy run this many rows at a time
  /// (chunked_cross_entropy), so that the float32 logits of the whole batch
  /// never exist; 0 computes forward's logits and their cross-entropy
  /// (gpt_loss). >= 0.
  TORCH_ARG(int64_t, loss_chunk_size) = 4096;
  // hotloop's three CUDA kernels for the GPT, on by default since they
  // were measured: together GPT-2 124M's steady tokens/s rose 1.18x on an
  // H200, from 34.5% to 40.8% MFU (docs/PERFORMANCE.md, 2026-11-28). Where
  // a kernel cannot run (the CPU, a build without hotloop's CUDA kernels,
  // a shape or dtype it does not take) the same ATen ops run as with the
  // option off, giving the same values bit for bit. The kernels'
  // backward has no double backward: a backward with create_graph is an
  // error naming the option to turn off.

  /// Each residual add and the LayerNorm after it in one CUDA kernel each
  /// way (add_layer_norm), in training and evaluation without activation
  /// checkpointing or a KV cache.
  TORCH_ARG(bool, fused_layer_norm) = true;
  /// Each chunk of the training loss as one CUDA kernel of hotloop's:
  /// log-softmax, loss and gradient from one read of the logits
  /// (chunked_cross_entropy's `fused`). Nothing to fuse with
  /// loss_chunk_size = 0 (the whole batch's logits, gpt_loss).
  TORCH_ARG(bool, fused_cross_entropy) = true;
  /// Each Linear layer's bias gradient summed by a CUDA kernel of
  /// hotloop's, the MLP's first in the same pass as GELU's backward
  /// (linear_gelu's `fused`).
  TORCH_ARG(bool, fused_bias_gradient) = true;
};

/// What takes a Linear layer's place in a Gpt (GptImpl::replace_linears):
/// compress::DynamicLinear, its int8 form. forward maps [..., in] to
/// [..., out] as the layer did.
class GptLinearReplacement : public torch::nn::Module {
 public:
  virtual at::Tensor forward(const at::Tensor& x) = 0;
};

/// For GptImpl::replace_linears: the replacement of the Linear layer
/// `name` (weight [out, in], bias [out] or undefined), or nullptr to keep
/// it.
using GptLinearMaker = std::function<std::shared_ptr<GptLinearReplacement>(
    const std::string& name, const at::Tensor& weight, const at::Tensor& bias)>;

/// The keys and values every attention layer computed for the positions
/// seen so far, so that generation feeds each new token alone (nanoGPT
/// recomputes the whole context for every token). Empty at first.
struct GptKvCache {
  struct Entry {
    at::Tensor keys;   ///< [B, n_head, T, n_embd / n_head]
    at::Tensor values; ///< [B, n_head, T, n_embd / n_head]
  };
  /// One per block, filled by the first forward.
  std::vector<Entry> blocks;
  /// Positions held (T).
  int64_t length() const;
  void clear() {
    blocks.clear();
  }
};

/// nanoGPT's GPT: token + position embeddings -> n_layer pre-LayerNorm blocks
/// (x + attn(ln_1(x)), then x + mlp(ln_2(x))) -> ln_f -> lm_head. Attention
/// is causal and multi-head (compat::causal_attention); the MLP is
/// c_fc (4 n_embd) -> exact erf GELU (nanoGPT's nn.GELU(); GPT-2 used the
/// tanh approximation) -> c_proj. Parameter names equal nanoGPT's
/// named_parameters(): transformer.wte, transformer.wpe,
/// transformer.h.N.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc,
/// mlp.c_proj}, transformer.ln_f. lm_head's weight is transformer.wte.weight
/// itself (weight tying), registered once, so it is counted and optimised
/// once; a nanoGPT state_dict's `lm_head.weight` entry is that same tensor.
///
/// Initialised as nanoGPT: Linear and Embedding weights normal(0, 0.02),
/// the residual projections (attn.c_proj, mlp.c_proj) normal(0,
/// 0.02 / sqrt(2 n_layer)), biases 0, LayerNorm weight 1 and bias 0.
class GptImpl : public torch::nn::Module, public train::TokenLossNetwork {
 public:
  /// Throws ConfigError naming the model option that is out of range.
  explicit GptImpl(GptOptions options = {});

  /// idx: [B, T] int64 token ids, T <= block_size; returns [B, T, vocab_size]
  /// float logits for the token after each position (nanoGPT computes only
  /// the last position when it has no targets; this always computes all).
  /// Throws hotloop::Error when T > block_size.
  at::Tensor forward(const at::Tensor& idx);
  /// The final LayerNorm's output [B, T, n_embd] for `idx`: forward's
  /// logits are at::linear of it with lm_head_weight() (or lm_head's
  /// replacement's output, after replace_linears).
  at::Tensor hidden(const at::Tensor& idx);
  /// The mean next-token cross-entropy of forward(idx) against targets
  /// ([B, T] int64, -1 ignored), as gpt_loss gives it: chunked by
  /// options().loss_chunk_size() positions (chunked_cross_entropy), or
  /// over forward's logits when that is 0 or lm_head was replaced.
  at::Tensor token_loss(
      const at::Tensor& idx, const at::Tensor& targets) override;
  /// The same for tokens at positions cache.length() .. + T, attending to
  /// the cached positions too; appends their keys and values to `cache`.
  /// Logits equal forward's over the whole sequence up to rounding. Throws
  /// hotloop::Error when the cache and idx together exceed block_size.
  at::Tensor decode(const at::Tensor& idx, GptKvCache& cache);

  /// lm_head's weight: [vocab_size, n_embd], the same tensor as
  /// transformer.wte.weight (which replace_linears leaves as the token
  /// embedding, while the replacement computes the logits).
  const at::Tensor& lm_head_weight() const;

  /// Parameters in the model; without the position embeddings when
  /// `non_embedding` (nanoGPT's get_num_params: 123.65M for gpt2_124m).
  /// Replaced Linear layers (replace_linears) hold buffers, not
  /// parameters, and are not counted.
  int64_t num_params(bool non_embedding = true) const;

  /// Forward FLOPs per token of a sequence of `block` tokens, nanoGPT's
  /// estimate_mfu divided by 3: 2 N (N = num_params()) for the matrix
  /// products with the weights plus 4 L C T for attention's scores and
  /// their weighted sum. Three times this is the training FLOPs per token
  /// that bench/run's MFU column counts (bench/python_train.py's
  /// gpt_flops_per_token).
  double forward_flops_per_token(int64_t block) const;

  /// Puts `make`'s modules in place of the model's Linear layers, by
  /// nanoGPT's module names (transformer.h.N.attn.c_attn,
  /// transformer.h.N.attn.c_proj, transformer.h.N.mlp.c_fc,
  /// transformer.h.N.mlp.c_proj, then lm_head, whose weight is
  /// transformer.wte.weight): a replaced layer leaves the model with its
  /// parameters, its replacement is registered under its name (lm_head
  /// beside wte, which stays the token embedding). A layer replaced before
  /// is not offered again. Inference: a replaced model trains no further
  /// through those layers.
  void replace_linears(const GptLinearMaker& make);

  /// The options the model was built with.
  const GptOptions& options() const {
    return options_;
  }

 private:
  // The logits of the final LayerNorm's output.
  at::Tensor head(const at::Tensor& hidden);
  // The final LayerNorm's output for idx (appended to `cache` when given).
  at::Tensor run(const at::Tensor& idx, GptKvCache* cache);

  GptOptions options_;
  torch::nn::Embedding wte_{nullptr};
  torch::nn::Embedding wpe_{nullptr};
  torch::nn::ModuleList h_{nullptr};
  std::vector<std::shared_ptr<detail::GptBlockImpl>> blocks_;
  std::shared_ptr<detail::GptLayerNormImpl> ln_f_;
  // lm_head once replace_linears replaced it; null: wte's weight.
  std::shared_ptr<GptLinearReplacement> lm_head_;
};
TORCH_MODULE(Gpt);

/// Mean next-token cross-entropy, as nanoGPT: logits [B, T, V] float,
/// targets [B, T] int64; targets equal to -1 are ignored.
at::Tensor gpt_loss(const at::Tensor& logits, const at::Tensor& targets);

} // namespace hotloop::models
