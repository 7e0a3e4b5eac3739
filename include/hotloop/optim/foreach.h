#pragma once

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <optional>
#include <vector>

namespace hotloop::optim {

// LibTorch's SGD, Adam and AdamW with their step done by ATen's multi-tensor
// (`_foreach_*`) ops over each param group where every parameter is on a
// CUDA device, as PyTorch's optimizers do by default: a handful of kernel
// launches per group and step instead of several per parameter. Elsewhere
// they step as LibTorch's loop does, one parameter at a time, which is
// faster on a CPU for all but small models (bench/optimizer_bench on 2
// cores, 5 runs: ResNet-18's 62 tensors step 3-14% slower with SGD and
// 14-22% slower with AdamW with the multi-tensor ops). Options, state and
// serialization are LibTorch's own (checkpoints load either way); the
// multi-tensor updates are bitwise LibTorch's on a CPU and match them to
// rounding on a GPU. Sparse gradients are refused, as LibTorch's Adam and
// AdamW do.

/// PyTorch's `foreach` argument (`optimizer.foreach` of the config): unset,
/// the multi-tensor ops where every parameter is on a CUDA device; true or
/// false, always or never.
class ForeachChoice {
 public:
  void set_foreach(std::optional<bool> foreach) {
    foreach_ = foreach;
  }
  std::optional<bool> foreach() const {
    return foreach_;
  }
  /// Whether a step over `groups` uses the multi-tensor ops.
  bool uses_foreach(
      const std::vector<torch::optim::OptimizerParamGroup>& groups) const;

 private:
  std::optional<bool> foreach_;
};

class ForeachSGD : public torch::optim::SGD, public ForeachChoice {
 public:
  using torch::optim::SGD::SGD;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

class ForeachAdam : public torch::optim::Adam, public ForeachChoice {
 public:
  using torch::optim::Adam::Adam;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

class ForeachAdamW : public torch::optim::AdamW, public ForeachChoice {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

} // namespace hotloop::optim
