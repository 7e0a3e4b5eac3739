#pragma once

#include "hotloop/data/batch.h"
#include "hotloop/optim/foreach.h"
#include "hotloop/train/metrics.h"
#include "hotloop/train/module.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace hotloop::train {
class Precision;
} // namespace hotloop::train

namespace hotloop::train::detail {

/// trainer.cuda_graphs: the whole training step - forward under autocast,
/// backward, clipping, every optimizer's update - captured once as a CUDA graph
/// and replayed for each batch of the same shape, as PyTorch's whole-network
/// capture does. A replay launches the step's hundreds of kernels with one
/// call, so a small model is no longer bound by the host launching them.
///
/// The first kWarmupSteps steps run eagerly on a side stream (cuDNN's
/// algorithm search, the optimizers' states, autograd's device threads),
/// then the step is captured with the batch in static input buffers. After
/// that each batch is copied into those buffers and the graph replayed;
/// what changes on the host between steps (the rates a schedule sets, the
/// bias corrections) reaches the captured update through the optimizers'
/// GraphStep scalars. The gradients are set to None before the capture
/// (after the allocator's cache is emptied, as torch.cuda.graph does), so
/// the captured backward makes them in the graph's memory and each replay
/// writes them afresh; the same parameters must get one as in the steps
/// before it. A batch of another shape (an epoch's last, smaller one) runs
/// the same step eagerly, adding into those gradients after zeroing them in
/// place.
/// The metrics the step logs are logged again after each replay, from the
/// graph's outputs.
///
/// Off CUDA (or in a build whose LibTorch has no CUDA) every step runs
/// eagerly: the same arithmetic, which is how the CPU tests check it.
/// OptimizationStep refuses what the graph cannot hold: data parallelism,
/// gradient accumulation, fp16 loss scaling (its step skipping is decided
/// on the host), skipped steps, optimizers without a GraphStep.
class GraphedStep {
 public:
  static constexpr int64_t kWarmupSteps = 3;

  /// Whether this build captures CUDA graphs: its LibTorch has CUDA and
  /// ATen's CUDAGraph header compiled.
  static bool available();

  /// `clip` clips every optimizer's gradients without reading back.
  /// Throws ConfigError naming an optimizer that has no GraphStep.
  GraphedStep(
      Module& module,
      const OptimizerSetup& setup,
      const Precision& precision,
      std::function<void()> clip);
  ~GraphedStep();

  /// One optimizer step on `batch` (already on the device): replayed,
  /// captured and replayed, or eager. Returns the loss, detached.
  at::Tensor run(
      const data::Batch& batch, int64_t batch_idx, MetricCollection& metrics);

  /// Whether the step has been captured (on CUDA, after the warm-up).
  bool captured() const;

 private:
  struct Graph;
  // Zeroes the gradients, runs forward and backward on `batch` logging
  // into `metrics`, clips; returns the loss.
  at::Tensor forward_backward(
      const data::Batch& batch, int64_t batch_idx, MetricCollection& metrics);
  // The step without a graph: forward_backward, then the optimizers.
  at::Tensor eager(
      const data::Batch& batch, int64_t batch_idx, MetricCollection& metrics);
  void prepare_optimizers();
  void step_optimizers();
  // Throws when an optimizer's options changed since the capture in a way
  // its captured update cannot follow (GraphStep::graph_step_stale), after
  // prepare_optimizers: before each replay, and before each eager step
  // after the capture, whose graph_step would otherwise take the new values
  // as the ones fixed and hide the change from the next replay.
  void check_not_stale() const;
  // Captures the step on a copy of `batch` (the static buffers) and runs it
  // once; returns the loss.
  at::Tensor capture(const data::Batch& batch, int64_t batch_idx);
  at::Tensor replay(const data::Batch& batch, MetricCollection& metrics);

  Module& module_;
  const Precision& precision_;
  std::function<void()> clip_;
  std::vector<optim::GraphStep*> optimizers_;
  std::vector<at::Tensor> parameters_;
  // The captured step's inputs, loss and logged metrics.
  data::Batch static_batch_;
  at::Tensor static_loss_;
  MetricCollection static_metrics_;
  // The storage of each optimizer's scalars the graph reads.
  std::vector<const void*> scalars_;
  int64_t eager_steps_ = 0;
  std::unique_ptr<Graph> graph_; // CUDA only
};

} // namespace hotloop::train::detail
