#pragma once

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

namespace hotloop::optim {

// LibTorch's SGD, Adam and AdamW with their step done by ATen's multi-tensor
// (`_foreach_*`) ops over each param group, as PyTorch's optimizers do by
// default on CUDA: a handful of kernel launches per group and step instead
// of several per parameter. Options, state and serialization are LibTorch's
// own (checkpoints load either way); on the CPU every update is bitwise the
// one LibTorch's per-parameter loop makes, on a GPU it matches it to
// rounding. Sparse gradients are refused, as LibTorch's Adam and AdamW do.

class ForeachSGD : public torch::optim::SGD {
 public:
  using torch::optim::SGD::SGD;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

class ForeachAdam : public torch::optim::Adam {
 public:
  using torch::optim::Adam::Adam;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

class ForeachAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

} // namespace hotloop::optim
