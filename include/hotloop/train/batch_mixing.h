#pragma once

#include "hotloop/data/batch.h"

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include <string>

namespace hotloop::train {

/// torchvision.transforms.v2's MixUp and CutMix on training batches (its
/// classification recipe's --mixup-alpha and --cutmix-alpha).
struct BatchMixingOptions {
  /// Whether either is on.
  bool enabled() const {
    return mixup_alpha_ > 0 || cutmix_alpha_ > 0;
  }
  /// Throws ConfigError naming an alpha < 0.
  void check() const;
  /// Why a training step that mixes cannot be captured as a CUDA graph;
  /// empty when neither is on.
  std::string cuda_graph_obstacle() const;

  /// MixUp's Beta(alpha, alpha) for the mixing weight; 0: no MixUp.
  TORCH_ARG(double, mixup_alpha) = 0;
  /// CutMix's; 0: no CutMix. With both, each batch draws one of the two
  /// with equal odds (the recipe's RandomChoice).
  TORCH_ARG(double, cutmix_alpha) = 0;
};

/// A batch mixed with itself rolled by one sample: its label weights are
/// `lam` for `target` and 1 - lam for `rolled_target` (one-hot labels
/// mixed so; a cross-entropy, linear in its target, is the same mix of the
/// two losses). The batch's fields are not mixed (as torchvision's MixUp
/// and CutMix mix images and labels only).
struct MixedBatch {
  at::Tensor input;
  at::Tensor target;
  at::Tensor rolled_target;
  double lam = 1.0;
};

/// Mixes `batch` as torchvision's transforms do, draw for draw on the
/// default CPU generator (so a seed gives Python's batch; checkpoints keep
/// that generator): MixUp: lam ~ Beta(alpha, alpha), input = lam x +
/// (1 - lam) roll(x); CutMix: lam ~ Beta, a box of side sqrt(1 - lam)
/// around a uniform centre, clipped, cut from roll(x) into x, lam = the
/// share of x left. The input stays on its device. Needs options.enabled();
/// throws ConfigError for CutMix on an input that is not [B, C, H, W].
MixedBatch mix_batch(
    const data::Batch& batch, const BatchMixingOptions& options);

} // namespace hotloop::train
