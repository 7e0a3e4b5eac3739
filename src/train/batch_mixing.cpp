#include "hotloop/train/batch_mixing.h"

#include "hotloop/core/error.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace hotloop::train {

namespace {

/// torch.distributions.Beta([alpha], [alpha]).sample(()): the first of a
/// Dirichlet([alpha, alpha]) draw, in float32.
double sample_beta(double alpha) {
  const at::Tensor concentration = at::full({1, 2}, alpha, at::kFloat);
  return at::_sample_dirichlet(concentration).select(-1, 0).item<double>();
}

/// torch.randint(high, size=(1,)).
int64_t randint(int64_t high) {
  return at::randint(high, {1}, at::kLong).item<int64_t>();
}

MixedBatch mixup(const data::Batch& batch, double alpha) {
  const double lam = sample_beta(alpha);
  const at::Tensor& x = batch.input;
  MixedBatch mixed;
  mixed.input = x.roll(1, 0).mul_(1.0 - lam).add_(x.mul(lam));
  mixed.lam = lam;
  return mixed;
}

MixedBatch cutmix(const data::Batch& batch, double alpha) {
  const at::Tensor& x = batch.input;
  HOTLOOP_CHECK_AS(
      ConfigError,
      x.dim() == 4,
      "model.cutmix_alpha cuts boxes out of image batches [B, C, H, W]; "
      "this batch's input is ",
      x.sizes());
  const double lam = sample_beta(alpha);
  const int64_t height = x.size(2);
  const int64_t width = x.size(3);
  const int64_t r_x = randint(width);
  const int64_t r_y = randint(height);
  const double r = 0.5 * std::sqrt(1.0 - lam);
  const auto r_w_half = static_cast<int64_t>(r * static_cast<double>(width));
  const auto r_h_half = static_cast<int64_t>(r * static_cast<double>(height));
  const int64_t x1 = std::max<int64_t>(r_x - r_w_half, 0);
  const int64_t y1 = std::max<int64_t>(r_y - r_h_half, 0);
  const int64_t x2 = std::min(r_x + r_w_half, width);
  const int64_t y2 = std::min(r_y + r_h_half, height);
  MixedBatch mixed;
  mixed.input = x.clone();
  const at::Tensor rolled = x.roll(1, 0);
  using at::indexing::Ellipsis;
  using at::indexing::Slice;
  mixed.input.index_put_(
      {Ellipsis, Slice(y1, y2), Slice(x1, x2)},
      rolled.index({Ellipsis, Slice(y1, y2), Slice(x1, x2)}));
  mixed.lam = 1.0 - static_cast<double>((x2 - x1) * (y2 - y1)) /
                        static_cast<double>(width * height);
  return mixed;
}

} // namespace

void BatchMixingOptions::check() const {
  HOTLOOP_CHECK_AS(
      ConfigError,
      mixup_alpha_ >= 0,
      "model.mixup_alpha must be >= 0, got ",
      mixup_alpha_);
  HOTLOOP_CHECK_AS(
      ConfigError,
      cutmix_alpha_ >= 0,
      "model.cutmix_alpha must be >= 0, got ",
      cutmix_alpha_);
}

std::string BatchMixingOptions::cuda_graph_obstacle() const {
  return enabled() ? "model.mixup_alpha and model.cutmix_alpha draw a new mix "
                     "for every batch on the host, which a captured step "
                     "would replay as one"
                   : "";
}

MixedBatch mix_batch(
    const data::Batch& batch, const BatchMixingOptions& options) {
  options.check();
  const bool mix = options.mixup_alpha() > 0;
  const bool cut = options.cutmix_alpha() > 0;
  HOTLOOP_CHECK(mix || cut, "mix_batch: neither MixUp nor CutMix is on");
  bool use_mixup = mix;
  if (mix && cut) {
    // RandomChoice([MixUp, CutMix]): torch.multinomial over equal odds.
    const at::Tensor odds = at::full({2}, 0.5, at::kFloat);
    use_mixup = at::multinomial(odds, 1).item<int64_t>() == 0;
  }
  MixedBatch mixed = use_mixup ? mixup(batch, options.mixup_alpha())
                               : cutmix(batch, options.cutmix_alpha());
  mixed.target = batch.target;
  mixed.rolled_target = batch.target.roll(1, 0);
  return mixed;
}

} // namespace hotloop::train
