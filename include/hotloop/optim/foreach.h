#pragma once

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
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
  std::optional<bool> foreach () const {
    return foreach_;
  }
  /// Whether a step over `groups` uses the multi-tensor ops.
  bool uses_foreach(
      const std::vector<torch::optim::OptimizerParamGroup>& groups) const;

 private:
  std::optional<bool> foreach_;
};

/// PyTorch's `fused` argument of Adam and AdamW (`optimizer.fused` of the
/// config): ATen's fused update, one kernel per device and dtype for a
/// whole param group (`_fused_adam_`, `_fused_adamw_`; compat::fused_adam).
/// Unset, it is used where every parameter is a float32, float16 or
/// bfloat16 tensor on a CUDA device, ATen has the kernels (LibTorch 2.1 and
/// later) and the multi-tensor ops are not turned off (set_foreach(false)
/// keeps LibTorch's own loop); true, on any device whose kernels ATen has
/// (CUDA from 2.1, the CPU from 2.4), an error elsewhere; false, never.
/// The step counts it reads live in float32 device tensors beside
/// LibTorch's state, whose integer step stays the truth: a checkpoint
/// loads either way.
class FusedChoice {
 public:
  void set_fused(std::optional<bool> fused) {
    fused_ = fused;
  }
  std::optional<bool> fused() const {
    return fused_;
  }
  /// Whether a step over `groups` uses the fused kernels, the multi-tensor
  /// choice being `foreach`. Throws ConfigError when fused is set true and
  /// a parameter's device has no kernels in this LibTorch.
  bool uses_fused(
      const std::vector<torch::optim::OptimizerParamGroup>& groups,
      std::optional<bool> foreach) const;

 protected:
  /// The float32 step count of `p` for the fused kernels, on p's device,
  /// made equal to `previous` (the steps LibTorch's state counted before
  /// this one) where it is not; the caller advances it by one on the
  /// device. Its storage stays the same for as long as `p` lives on its
  /// device, which a captured graph relies on.
  at::Tensor& fused_step_count(const at::Tensor& p, int64_t previous);
  /// The count fused_step_count last made for `p`.
  const at::Tensor& fused_step_count(const at::Tensor& p) const;

 private:
  struct Count {
    at::Tensor tensor;
    int64_t value = 0; // what `tensor` holds once its advance has run
  };
  std::optional<bool> fused_;
  std::unordered_map<const void*, Count> counts_;
};

/// A step that a CUDA graph can capture and replay (PyTorch's
/// `capturable=True`). What changes from step to step on the host - the
/// rate a schedule sets, the momentum or beta1 it may cycle, the bias
/// corrections of each parameter's step count - reaches the update through
/// one device tensor of float32 scalars,
/// which `prepare_graph_step` refills before every step; the captured
/// kernels read the current values at each replay. `graph_step` launches
/// device work only and never reads a value back. Instead of step(): once
/// per optimizer step, prepare_graph_step (host, after the backward that
/// made the gradients), then graph_step (eager, or replayed). The same
/// parameters must have gradients in both, and a capture needs every
/// stepped parameter's state to exist (one eager step makes them). The
/// result is step()'s up to float32 rounding of those scalars (for
/// bfloat16 or float16 parameters the ops round them to that dtype: beta1
/// 0.9 acts as 0.8984 in bfloat16, and ATen's multi-tensor kernels, which
/// want the scalar's dtype to be the list's, run one kernel per parameter);
/// the other options (dampening, nesterov, beta2, eps, and the weight
/// decay SGD and Adam add to the gradient) are read when a step is
/// captured: graph_step_stale() names one that changed since. Options,
/// state and checkpoints are step()'s own.
class GraphStep {
 public:
  virtual ~GraphStep() = default;
  /// Advances each stepped parameter's step count (creating its state on
  /// its first step, as step() does) and uploads the scalars of the coming
  /// update: non_blocking from pinned memory to a CUDA device.
  virtual void prepare_graph_step() = 0;
  /// The update prepare_graph_step set up.
  virtual void graph_step() = 0;
  /// The device tensor the update reads its scalars from: it keeps its
  /// storage while the stepped parameters stay the same, which a captured
  /// graph relies on.
  const at::Tensor& graph_scalars() const {
    return scalars_;
  }
  /// Empty, or why a captured graph_step no longer does what step() would
  /// (an option the capture fixed has changed since): checked by the
  /// Trainer after prepare_graph_step, before each replay.
  virtual std::string graph_step_stale() const {
    return "";
  }

 protected:
  /// Copies `values` into graph_scalars() on `device`, which keeps its
  /// storage when the count is unchanged; nothing without a device (no
  /// parameter has a gradient).
  void upload(
      const std::vector<float>& values,
      const std::optional<c10::Device>& device);
  /// The `index`-th scalar, as a 0-dim view of graph_scalars().
  at::Tensor scalar(int64_t index) const;

 private:
  at::Tensor scalars_;
};

class ForeachSGD : public torch::optim::SGD,
                   public ForeachChoice,
                   public GraphStep {
 public:
  using torch::optim::SGD::SGD;
  torch::Tensor step(LossClosure closure = nullptr) override;
  void prepare_graph_step() override;
  void graph_step() override;
  std::string graph_step_stale() const override {
    return stale_;
  }

 private:
  // Momentum buffers made by the last prepare_graph_step (their first
  // step's direction): graph_step leaves them as they are.
  std::vector<bool> fresh_;
  // What the last graph_step took as numbers, per param group: dampening,
  // nesterov (0 or 1) and the weight decay; and which changed since.
  std::vector<std::vector<double>> fixed_;
  std::string stale_;
};

/// What tells Adam from AdamW in ForeachAdamFamily: their options and
/// state types, the weight decay (added to the gradient, or decoupled:
/// the parameter shrunk) and the name errors give.
template <typename Base>
struct AdamKind;
template <>
struct AdamKind<torch::optim::Adam> {
  using Options = torch::optim::AdamOptions;
  using State = torch::optim::AdamParamState;
  static constexpr bool kDecoupled = false;
  static constexpr const char* kName = "Adam";
};
template <>
struct AdamKind<torch::optim::AdamW> {
  using Options = torch::optim::AdamWOptions;
  using State = torch::optim::AdamWParamState;
  static constexpr bool kDecoupled = true;
  static constexpr const char* kName = "AdamW";
};

/// LibTorch's Adam or AdamW (`Base`) with the multi-tensor, fused and
/// graph steps above; ForeachAdam and ForeachAdamW below.
template <typename Base>
class ForeachAdamFamily : public Base,
                          public ForeachChoice,
                          public FusedChoice,
                          public GraphStep {
 public:
  using Base::Base;
  torch::Tensor step(
      torch::optim::Optimizer::LossClosure closure = nullptr) override;
  void prepare_graph_step() override;
  void graph_step() override;
  std::string graph_step_stale() const override {
    return graph_.stale;
  }

 private:
  // Whether the graph step fuses, and what the last one fixed (the fused
  // kernels take beta1, beta2, eps and the weight decay as numbers).
  struct FusedGraph {
    bool fused = false;
    // A fixed option changed between two graph steps (a schedule cycles
    // beta1): the automatic choice then keeps the multi-tensor update.
    bool varies = false;
    std::vector<std::vector<double>> fixed;
    std::string stale;
  };
  FusedGraph graph_;
};

extern template class ForeachAdamFamily<torch::optim::Adam>;
extern template class ForeachAdamFamily<torch::optim::AdamW>;

class ForeachAdam : public ForeachAdamFamily<torch::optim::Adam> {
 public:
  using ForeachAdamFamily::ForeachAdamFamily;
};

class ForeachAdamW : public ForeachAdamFamily<torch::optim::AdamW> {
 public:
  using ForeachAdamFamily::ForeachAdamFamily;
};

} // namespace hotloop::optim
