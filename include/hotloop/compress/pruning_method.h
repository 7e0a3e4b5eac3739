#pragma once

#include "hotloop/compress/pruning_amount.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>

namespace hotloop::compress {

/// What a pruning method's new mask acts on when a tensor is pruned again
/// (torch.nn.utils.prune's PRUNING_TYPE): the entries still alive, the
/// channels not yet wholly removed, or every entry.
enum class PruningType { kUnstructured, kStructured, kGlobal };

/// One pruning recipe (torch.nn.utils.prune.BasePruningMethod): given the
/// importance of every unit and the mask so far, the new mask. Masks are
/// 0/1 tensors of the importance's dtype.
class PruningMethod {
 public:
  virtual ~PruningMethod() = default;
  /// PyTorch's class name, such as "L1Unstructured".
  virtual std::string name() const = 0;
  virtual PruningType type() const = 0;
  /// The channel dimension of a structured method.
  virtual int64_t dim() const {
    return 0;
  }
  /// compute_mask: a new mask that keeps `default_mask`'s zeros and prunes
  /// this method's amount of `t`'s units (PyTorch's exact rules, including
  /// which of equal scores goes: at::topk's order). `t` is the importance
  /// (the tensor itself, or given scores), `default_mask` of its shape.
  /// Throws ConfigError when the amount or dimension does not fit `t`.
  virtual at::Tensor compute_mask(
      const at::Tensor& t, const at::Tensor& default_mask) const = 0;
};

/// Prunes the `amount` entries of smallest magnitude.
class L1Unstructured : public PruningMethod {
 public:
  explicit L1Unstructured(PruningAmount amount) : amount_(amount) {}
  std::string name() const override {
    return "L1Unstructured";
  }
  PruningType type() const override {
    return PruningType::kUnstructured;
  }
  at::Tensor compute_mask(
      const at::Tensor& t, const at::Tensor& default_mask) const override;

 private:
  PruningAmount amount_;
};

/// Prunes `amount` entries drawn at random (the default generator of
/// `t`'s device: torch.rand_like).
class RandomUnstructured : public PruningMethod {
 public:
  explicit RandomUnstructured(PruningAmount amount) : amount_(amount) {}
  std::string name() const override {
    return "RandomUnstructured";
  }
  PruningType type() const override {
    return PruningType::kUnstructured;
  }
  at::Tensor compute_mask(
      const at::Tensor& t, const at::Tensor& default_mask) const override;

 private:
  PruningAmount amount_;
};

/// Prunes the `amount` channels along `dim` of smallest L`n` norm (`n` as
/// torch.norm's p: 1, 2, any number, infinity or -infinity).
class LnStructured : public PruningMethod {
 public:
  LnStructured(PruningAmount amount, double n, int64_t dim = -1)
      : amount_(amount), n_(n), dim_(dim) {}
  std::string name() const override {
    return "LnStructured";
  }
  PruningType type() const override {
    return PruningType::kStructured;
  }
  int64_t dim() const override {
    return dim_;
  }
  at::Tensor compute_mask(
      const at::Tensor& t, const at::Tensor& default_mask) const override;

 private:
  PruningAmount amount_;
  double n_;
  int64_t dim_;
};

/// Prunes `amount` channels along `dim` drawn at random (torch.rand on
/// the CPU's default generator, one number per channel).
class RandomStructured : public PruningMethod {
 public:
  explicit RandomStructured(PruningAmount amount, int64_t dim = -1)
      : amount_(amount), dim_(dim) {}
  std::string name() const override {
    return "RandomStructured";
  }
  PruningType type() const override {
    return PruningType::kStructured;
  }
  int64_t dim() const override {
    return dim_;
  }
  at::Tensor compute_mask(
      const at::Tensor& t, const at::Tensor& default_mask) const override;

 private:
  PruningAmount amount_;
  int64_t dim_;
};

/// The given mask, over what was pruned before.
class CustomFromMask : public PruningMethod {
 public:
  explicit CustomFromMask(at::Tensor mask) : mask_(std::move(mask)) {}
  std::string name() const override {
    return "CustomFromMask";
  }
  PruningType type() const override {
    return PruningType::kGlobal;
  }
  at::Tensor compute_mask(
      const at::Tensor& t, const at::Tensor& default_mask) const override;

 private:
  at::Tensor mask_;
};

/// Prunes nothing: the reparametrisation with the mask so far (ones).
class Identity : public PruningMethod {
 public:
  std::string name() const override {
    return "Identity";
  }
  PruningType type() const override {
    return PruningType::kUnstructured;
  }
  at::Tensor compute_mask(
      const at::Tensor& t, const at::Tensor& default_mask) const override {
    return default_mask;
  }
};

/// PruningContainer.compute_mask: `method` applied to the part of `t` that
/// `mask` still keeps (the entries where it is 1, the channels along
/// method.dim() that are not all 0, or all of `t` for kGlobal), its mask
/// written back into a copy of `mask`. On a tensor not pruned before, this
/// equals method.compute_mask(t, ones).
at::Tensor combine_masks(
    const PruningMethod& method, const at::Tensor& t, const at::Tensor& mask);

} // namespace hotloop::compress
