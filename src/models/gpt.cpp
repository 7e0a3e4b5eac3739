#include "hotloop/models/gpt.h"

#include "hotloop/core/compat.h"
#include "hotloop/core/error.h"
#include "hotloop/models/add_layer_norm.h"
#include "hotloop/models/chunked_cross_entropy.h"
#include "hotloop/models/linear_gelu.h"
#include "hotloop/train/activation_checkpoint.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/dropout.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/layer_norm.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/linear.h>
#include <torch/utils.h>

#include <cmath>
#include <string>
#include <tuple>
#include <utility>

namespace hotloop::models {

namespace detail {

namespace nn = torch::nn;

/// nanoGPT's LayerNorm (eps 1e-5): the bias is optional, which
/// torch::nn::LayerNorm does not allow.
class GptLayerNormImpl : public nn::Module {
 public:
  GptLayerNormImpl(int64_t width, bool bias) : width_(width) {
    weight_ = register_parameter("weight", at::ones({width}));
    if (bias) {
      bias_ = register_parameter("bias", at::zeros({width}));
    }
  }

  at::Tensor forward(const at::Tensor& x) {
    return at::layer_norm(x, {width_}, weight_, bias_, kEps);
  }

  /// {x + y, forward(x + y)}, in one kernel each way where `fused` can.
  std::pair<at::Tensor, at::Tensor> add_forward(
      const at::Tensor& x, const at::Tensor& y, bool fused) {
    return add_layer_norm(x, y, weight_, bias_, kEps, fused);
  }

 private:
  static constexpr double kEps = 1e-5;
  int64_t width_;
  at::Tensor weight_;
  at::Tensor bias_;
};

namespace {

nn::Linear linear(int64_t in, int64_t out, bool bias) {
  return nn::Linear(nn::LinearOptions(in, out).bias(bias));
}

/// One of the model's Linear layers: the float nn::Linear, or what
/// GptImpl::replace_linears put in its place.
class GptLinear {
 public:
  GptLinear(
      nn::Module& owner,
      const std::string& name,
      nn::Linear layer,
      bool fused_bias_gradient)
      : name_(name),
        layer_(owner.register_module(name, std::move(layer))),
        fused_bias_gradient_(fused_bias_gradient) {}

  // The layer's output, GELU of it with `gelu` (the MLP's c_fc). ATen's
  // linear (linear_gelu's), not nn::Linear's forward: for [B, T, C] inputs
  // the latter is a matmul and then `+= bias` (under autocast a float bias
  // added to bf16 outputs by a broadcasting kernel of its own, 48 of them
  // per GPT-2 step, 9% of its device time on an H200), where ATen's folds
  // the rows into one addmm that adds the bias in the GEMM's epilogue, as
  // PyTorch's nn.Linear does.
  at::Tensor operator()(const at::Tensor& x, bool gelu = false) {
    if (replacement_ != nullptr) {
      const at::Tensor out = replacement_->forward(x);
      return gelu ? at::gelu(out) : out;
    }
    // The fused backward only on CUDA, where its kernel runs: elsewhere
    // linear_gelu's function would give ATen's values through a backward
    // of its own (which linear_gelu's tests check), with no double
    // backward, so the layer keeps ATen's ops there.
    return linear_gelu(
        x,
        layer_->weight,
        layer_->bias,
        gelu,
        fused_bias_gradient_ && x.is_cuda());
  }

  void replace(
      nn::Module& owner,
      const std::string& prefix,
      const GptLinearMaker& make) {
    if (replacement_ != nullptr) {
      return;
    }
    auto replacement = make(prefix + name_, layer_->weight, layer_->bias);
    if (replacement == nullptr) {
      return;
    }
    owner.unregister_module(name_);
    replacement_ = owner.register_module(name_, std::move(replacement));
    layer_ = nn::Linear(nullptr);
  }

 private:
  std::string name_;
  nn::Linear layer_;
  bool fused_bias_gradient_;
  std::shared_ptr<GptLinearReplacement> replacement_;
};

at::Tensor maybe_dropout(const at::Tensor& x, double p, bool training) {
  return p > 0 && training ? at::dropout(x, p, /*train=*/true) : x;
}

/// Attention of the last q.size(2) positions over all k.size(2) ones: query
/// i (position p + i, p the positions before it) sees keys 0 .. p + i.
at::Tensor cached_attention(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t t = q.size(2);
  const int64_t past = k.size(2) - t;
  const double scale = 1.0 / std::sqrt(static_cast<double>(k.size(-1)));
  at::Tensor att = q.matmul(k.transpose(-2, -1)).mul(scale);
  if (t > 1) {
    const at::Tensor future =
        at::ones({t, past + t}, q.options().dtype(at::kBool))
            .triu(/*diagonal=*/past + 1);
    att = att.masked_fill(future, -INFINITY);
  }
  return att.softmax(-1).matmul(v);
}

/// nanoGPT's CausalSelfAttention: c_attn makes q, k, v for all heads at once;
/// c_proj mixes the heads' outputs.
class GptAttentionImpl : public nn::Module {
 public:
  explicit GptAttentionImpl(const GptOptions& options)
      : n_head_(options.n_head()),
        dropout_(options.dropout()),
        c_attn_(
            *this,
            "c_attn",
            linear(options.n_embd(), 3 * options.n_embd(), options.bias()),
            options.fused_bias_gradient()),
        c_proj_(
            *this,
            "c_proj",
            linear(options.n_embd(), options.n_embd(), options.bias()),
            options.fused_bias_gradient()) {}

  void replace_linears(const std::string& prefix, const GptLinearMaker& make) {
    c_attn_.replace(*this, prefix, make);
    c_proj_.replace(*this, prefix, make);
  }

  /// x: [B, T, C] -> [B, T, C]. With `cache`, x holds the positions after
  /// the cached ones, which its keys and values are appended to.
  at::Tensor forward(const at::Tensor& x, GptKvCache::Entry* cache = nullptr) {
    const int64_t b = x.size(0);
    const int64_t t = x.size(1);
    const int64_t c = x.size(2);
    const auto qkv = c_attn_(x).split(c, /*dim=*/2);
    const auto heads = [&](const at::Tensor& y) {
      return y.view({b, t, n_head_, c / n_head_}).transpose(1, 2);
    };
    at::Tensor y;
    if (cache == nullptr) {
      y = compat::causal_attention(
          heads(qkv[0]),
          heads(qkv[1]),
          heads(qkv[2]),
          is_training() ? dropout_ : 0.0);
    } else {
      const at::Tensor k = heads(qkv[1]);
      const at::Tensor v = heads(qkv[2]);
      cache->keys = cache->keys.defined() ? at::cat({cache->keys, k}, 2) : k;
      cache->values =
          cache->values.defined() ? at::cat({cache->values, v}, 2) : v;
      y = cached_attention(heads(qkv[0]), cache->keys, cache->values);
    }
    y = y.transpose(1, 2).contiguous().view({b, t, c});
    return maybe_dropout(c_proj_(y), dropout_, is_training());
  }

 private:
  int64_t n_head_;
  double dropout_;
  GptLinear c_attn_;
  GptLinear c_proj_;
};
TORCH_MODULE(GptAttention);

/// nanoGPT's MLP: c_fc (4x wider) -> exact GELU -> c_proj.
class GptMlpImpl : public nn::Module {
 public:
  explicit GptMlpImpl(const GptOptions& options)
      : dropout_(options.dropout()),
        c_fc_(
            *this,
            "c_fc",
            linear(options.n_embd(), 4 * options.n_embd(), options.bias()),
            options.fused_bias_gradient()),
        c_proj_(
            *this,
            "c_proj",
            linear(4 * options.n_embd(), options.n_embd(), options.bias()),
            options.fused_bias_gradient()) {}

  at::Tensor forward(const at::Tensor& x) {
    return maybe_dropout(
        c_proj_(c_fc_(x, /*gelu=*/true)), dropout_, is_training());
  }

  void replace_linears(const std::string& prefix, const GptLinearMaker& make) {
    c_fc_.replace(*this, prefix, make);
    c_proj_.replace(*this, prefix, make);
  }

 private:
  double dropout_;
  GptLinear c_fc_;
  GptLinear c_proj_;
};
TORCH_MODULE(GptMlp);

} // namespace

/// nanoGPT's Block: x + attn(ln_1(x)), then x + mlp(ln_2(x)).
class GptBlockImpl : public nn::Module {
 public:
  explicit GptBlockImpl(const GptOptions& options)
      : ln_1_(register_module(
            "ln_1",
            std::make_shared<GptLayerNormImpl>(
                options.n_embd(), options.bias()))),
        attn_(register_module("attn", GptAttention(options))),
        ln_2_(register_module(
            "ln_2",
            std::make_shared<GptLayerNormImpl>(
                options.n_embd(), options.bias()))),
        mlp_(register_module("mlp", GptMlp(options))) {}

  at::Tensor forward(
      const at::Tensor& input, GptKvCache::Entry* cache = nullptr) {
    at::Tensor x = input + attn_->forward(ln_1_->forward(input), cache);
    return x + mlp_->forward(ln_2_->forward(x));
  }

  /// The same block from `normalized` = ln_1(input), each residual add
  /// joined with the LayerNorm after it: ln_2 here, then `next` (the next
  /// block's ln_1, or ln_f). Returns {the block's output, next(output)}.
  std::pair<at::Tensor, at::Tensor> forward_fused(
      const at::Tensor& input,
      const at::Tensor& normalized,
      GptLayerNormImpl& next) {
    const auto [x, h] =
        ln_2_->add_forward(input, attn_->forward(normalized), true);
    return next.add_forward(x, mlp_->forward(h), true);
  }

  GptLayerNormImpl& ln_1() {
    return *ln_1_;
  }

  void replace_linears(const std::string& prefix, const GptLinearMaker& make) {
    attn_->replace_linears(prefix + "attn.", make);
    mlp_->replace_linears(prefix + "mlp.", make);
  }

 private:
  std::shared_ptr<GptLayerNormImpl> ln_1_;
  GptAttention attn_;
  std::shared_ptr<GptLayerNormImpl> ln_2_;
  GptMlp mlp_;
};

} // namespace detail

GptOptions GptOptions::gpt2_124m() {
  return GptOptions()
      .vocab_size(50257)
      .block_size(1024)
      .n_layer(12)
      .n_head(12)
      .n_embd(768)
      .dropout(0.0)
      .bias(true);
}

GptOptions GptOptions::tiny() {
  return GptOptions()
      .vocab_size(64)
      .block_size(16)
      .n_layer(2)
      .n_head(2)
      .n_embd(32)
      .dropout(0.0)
      .bias(true);
}

GptImpl::GptImpl(GptOptions options) : options_(std::move(options)) {
  namespace nn = torch::nn;
  const auto positive = [](const char* name, int64_t value) {
    HOTLOOP_CHECK_AS(
        ConfigError,
        value > 0,
        "model.",
        name,
        " must be positive, got ",
        value);
  };
  positive("vocab_size", options_.vocab_size());
  positive("block_size", options_.block_size());
  positive("n_layer", options_.n_layer());
  positive("n_head", options_.n_head());
  positive("n_embd", options_.n_embd());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.n_embd() % options_.n_head() == 0,
      "model.n_embd (",
      options_.n_embd(),
      ") must be divisible by model.n_head (",
      options_.n_head(),
      ")");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.dropout() >= 0 && options_.dropout() < 1,
      "model.dropout must be in [0, 1), got ",
      options_.dropout());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.loss_chunk_size() >= 0,
      "model.loss_chunk_size must be >= 0 (0: the whole batch's logits), "
      "got ",
      options_.loss_chunk_size());

  // nanoGPT's nn.ModuleDict `transformer`; lm_head has no parameter of its
  // own (it is wte's weight), so it is not a module here.
  auto transformer = register_module(
      "transformer", std::make_shared<nn::Module>("GptTransformer"));
  wte_ = transformer->register_module(
      "wte", nn::Embedding(options_.vocab_size(), options_.n_embd()));
  wpe_ = transformer->register_module(
      "wpe", nn::Embedding(options_.block_size(), options_.n_embd()));
  h_ = transformer->register_module("h", nn::ModuleList());
  for (int64_t i = 0; i < options_.n_layer(); ++i) {
    blocks_.push_back(std::make_shared<detail::GptBlockImpl>(options_));
    h_->push_back(blocks_.back());
  }
  ln_f_ = transformer->register_module(
      "ln_f",
      std::make_shared<detail::GptLayerNormImpl>(
          options_.n_embd(), options_.bias()));

  torch::NoGradGuard no_grad;
  for (const auto& module : modules(/*include_self=*/false)) {
    if (auto* linear = module->as<nn::Linear>()) {
      nn::init::normal_(linear->weight, 0.0, 0.02);
      if (linear->bias.defined()) {
        nn::init::zeros_(linear->bias);
      }
    } else if (auto* embedding = module->as<nn::Embedding>()) {
      nn::init::normal_(embedding->weight, 0.0, 0.02);
    }
  }
  // GPT-2's scaled init of the projections that write into the residual
  // stream: their sum over 2 n_layer branches keeps the stream's variance.
  const double residual_std =
      0.02 / std::sqrt(2.0 * static_cast<double>(options_.n_layer()));
  const std::string suffix = "c_proj.weight";
  for (auto& param : named_parameters()) {
    const std::string& name = param.key();
    if (name.size() >= suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      nn::init::normal_(param.value(), 0.0, residual_std);
    }
  }
}

at::Tensor GptImpl::forward(const at::Tensor& idx) {
  return head(run(idx, nullptr));
}

at::Tensor GptImpl::head(const at::Tensor& hidden) {
  return lm_head_ != nullptr ? lm_head_->forward(hidden)
                             : at::linear(hidden, wte_->weight);
}

at::Tensor GptImpl::hidden(const at::Tensor& idx) {
  return run(idx, nullptr);
}

at::Tensor GptImpl::decode(const at::Tensor& idx, GptKvCache& cache) {
  return head(run(idx, &cache));
}

at::Tensor GptImpl::token_loss(
    const at::Tensor& idx, const at::Tensor& targets) {
  if (options_.loss_chunk_size() == 0 || lm_head_ != nullptr) {
    return gpt_loss(forward(idx), targets);
  }
  return chunked_cross_entropy(
      hidden(idx),
      wte_->weight,
      targets,
      options_.loss_chunk_size(),
      options_.fused_cross_entropy());
}

at::Tensor GptImpl::run(const at::Tensor& idx, GptKvCache* cache) {
  TORCH_CHECK(
      idx.dim() == 2, "Gpt: idx must be [B, T] token ids, got ", idx.sizes());
  const int64_t past = cache == nullptr ? 0 : cache->length();
  const int64_t t = idx.size(1);
  HOTLOOP_CHECK(
      past + t <= options_.block_size(),
      "Gpt: cannot forward a sequence of length ",
      past + t,
      ", model.block_size is only ",
      options_.block_size());
  const at::Tensor pos =
      at::arange(past, past + t, idx.options().dtype(at::kLong));
  at::Tensor x = detail::maybe_dropout(
      wte_->forward(idx) + wpe_->forward(pos),
      options_.dropout(),
      is_training());
  if (cache != nullptr) {
    cache->blocks.resize(blocks_.size());
  }
  if (options_.fused_layer_norm() && cache == nullptr &&
      !(options_.activation_checkpointing() && is_training())) {
    // Each block's residual adds and the LayerNorms after them in pairs:
    // {x, ln_1(x)} into a block, {its output, the next LayerNorm of it}
    // out; the last block's next is ln_f.
    at::Tensor normalized = blocks_.front()->ln_1().forward(x);
    for (size_t i = 0; i < blocks_.size(); ++i) {
      detail::GptLayerNormImpl& next =
          i + 1 < blocks_.size() ? blocks_[i + 1]->ln_1() : *ln_f_;
      std::tie(x, normalized) =
          blocks_[i]->forward_fused(x, normalized, next);
    }
    return normalized;
  }
  for (size_t i = 0; i < blocks_.size(); ++i) {
    if (options_.activation_checkpointing() && is_training() &&
        cache == nullptr) {
      const std::shared_ptr<detail::GptBlockImpl> block = blocks_[i];
      x = train::checkpoint(
          [block](const at::Tensor& in) { return block->forward(in); }, x);
    } else {
      x = blocks_[i]->forward(
          x, cache == nullptr ? nullptr : &cache->blocks[i]);
    }
  }
  return ln_f_->forward(x);
}

void GptImpl::replace_linears(const GptLinearMaker& make) {
  for (size_t i = 0; i < blocks_.size(); ++i) {
    blocks_[i]->replace_linears(
        "transformer.h." + std::to_string(i) + ".", make);
  }
  if (lm_head_ == nullptr) {
    lm_head_ = make("lm_head", wte_->weight, at::Tensor());
    if (lm_head_ != nullptr) {
      register_module("lm_head", lm_head_);
    }
  }
}

int64_t GptKvCache::length() const {
  return blocks.empty() || !blocks.front().keys.defined()
             ? 0
             : blocks.front().keys.size(2);
}

const at::Tensor& GptImpl::lm_head_weight() const {
  return wte_->weight;
}

int64_t GptImpl::num_params(bool non_embedding) const {
  int64_t n = 0;
  for (const auto& param : parameters()) {
    n += param.numel();
  }
  return non_embedding ? n - wpe_->weight.numel() : n;
}

double GptImpl::forward_flops_per_token(int64_t block) const {
  return 2.0 * static_cast<double>(num_params()) +
         4.0 * static_cast<double>(options_.n_layer()) *
             static_cast<double>(options_.n_embd()) *
             static_cast<double>(block);
}

at::Tensor gpt_loss(const at::Tensor& logits, const at::Tensor& targets) {
  namespace F = torch::nn::functional;
  return F::cross_entropy(
      logits.reshape({-1, logits.size(-1)}),
      targets.reshape({-1}),
      F::CrossEntropyFuncOptions().ignore_index(-1));
}

} // namespace hotloop::models
