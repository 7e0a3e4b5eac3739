#pragma once

#include "hotloop/compress/pruning_amount.h"
#include "hotloop/models/fashion_cnn.h"
#include "hotloop/models/mlp.h"

#include <cstdint>
#include <string>
#include <vector>

namespace hotloop::compress {

/// Structural shrinking: PyTorch's pruning only zeroes weights, so a pruned
/// model is as large and as slow as before. shrink() removes what pruning
/// made dead and returns a smaller dense model of the same kind, whose
/// eval-mode outputs equal the pruned model's (to float rounding; tested to
/// 1e-5):
///
/// - a conv block's output channel goes when the next layer reads nothing
///   from it (its input-channel weights are all zero), or when its filter is
///   zero and what follows is zero too: the BatchNorm's eval output for a
///   zero input, after ReLU and pooling, is 0 (prune_channels makes sure by
///   pruning the BatchNorm's weight and bias with the filter). The last
///   block's constant channels are folded into the head's bias instead, as
///   are constant hidden units of a Linear -> Linear chain;
/// - a hidden unit of a Linear -> activation -> Linear chain goes when the
///   next Linear's column for it is zero, or its own row is (its constant
///   activation folds into the next bias).
///
/// The input model may still be pruned (weight_orig + weight_mask: its
/// masked values are read) or made permanent. At least one channel or unit
/// of every layer stays. In training mode BatchNorm normalises with the
/// batch's statistics, under which a folded constant channel is not
/// constant: fine-tune the shrunk model, do not compare it in training
/// mode.

/// What shrink kept.
struct ShrinkReport {
  /// Per conv block (FashionCnn) or hidden layer (Mlp, and the CNN's head
  /// last): units before and after.
  std::vector<int64_t> before;
  std::vector<int64_t> after;
  /// Zero-filter channels kept because their BatchNorm output is not zero
  /// and the next conv pads (not foldable): prune the BatchNorm too.
  int64_t kept_constant = 0;
  int64_t parameters_before = 0;
  int64_t parameters_after = 0;
  /// "channels [32, 64] -> [16, 32], hidden [128] -> [64], parameters
  /// 421642 -> 151082 (35.8%)".
  std::string describe() const;
};

/// ln_structured (`n`) on conv block `block`'s output channels (weight
/// dim 0), and the same channel mask on its BatchNorm's weight and bias, so
/// the pruned channels' output is exactly zero and shrink() removes them.
/// Throws ConfigError for a block the model does not have.
void prune_channels(
    models::FashionCnnImpl& model,
    int64_t block,
    PruningAmount amount,
    double n = 1);

/// ln_structured (`n`) on the hidden units of `layer`: rows of its weight
/// (dim 0) and the same mask on its bias. For a FashionCnn, layer 0 is the
/// head's hidden Linear; for an Mlp, layers.<layer> (not the last).
void prune_units(
    models::FashionCnnImpl& model,
    int64_t layer,
    PruningAmount amount,
    double n = 1);
void prune_units(
    models::MlpImpl& model, int64_t layer, PruningAmount amount, double n = 1);

/// The smaller FashionCnn (options with fewer channels and hidden units),
/// in the input's training mode, on its device.
models::FashionCnn shrink(
    models::FashionCnnImpl& model, ShrinkReport* report = nullptr);
/// The smaller Mlp (narrower hidden layers).
models::Mlp shrink(models::MlpImpl& model, ShrinkReport* report = nullptr);

} // namespace hotloop::compress
