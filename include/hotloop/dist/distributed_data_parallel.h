#pragma once

#include "hotloop/dist/process_group.h"

#include <ATen/core/Tensor.h>
#include <torch/arg.h>
#include <torch/nn/module.h>

#include <memory>

namespace hotloop::dist {

/// PyTorch's DistributedDataParallel arguments.
struct DistributedDataParallelOptions {
  /// Gradients are all-reduced in buckets of about this many MiB, the
  /// first bucket (the last layers' gradients, ready first) 1 MiB, as
  /// PyTorch does; > 0.
  TORCH_ARG(double, bucket_cap_mb) = 25;
  /// The first bucket's size, MiB (PyTorch's
  /// torch.distributed._DEFAULT_FIRST_BUCKET_BYTES); > 0.
  TORCH_ARG(double, first_bucket_cap_mb) = 1;
  /// Walk each loss's graph for parameters it does not use and mark them
  /// ready (slower; for models whose forward skips parameters).
  TORCH_ARG(bool, find_unused_parameters) = false;
  /// Gradients are views into the all-reduce buckets: no copy back, less
  /// memory.
  TORCH_ARG(bool, gradient_as_bucket_view) = false;
  /// The set of parameters used, and their order, never changes: lets
  /// the reducer skip the per-iteration bookkeeping.
  TORCH_ARG(bool, static_graph) = false;
  /// Rank 0's buffers (BatchNorm statistics) to every process after each
  /// synced step (PyTorch's broadcast_buffers=True).
  TORCH_ARG(bool, broadcast_buffers) = true;
  /// Every dist::SyncBatchNorm of the module takes its training statistics
  /// over all processes (PyTorch's convert_sync_batchnorm, Lightning's
  /// sync_batchnorm); a torch::nn::BatchNorm in the module is then an
  /// error, as C++ cannot swap it.
  TORCH_ARG(bool, sync_batchnorm) = false;
};

/// Data parallelism for any torch::nn::Module on PyTorch's own c10d
/// (PyTorch's DistributedDataParallel; LibTorch's C++ API has none). On
/// construction every process gets rank 0's parameters and buffers (after
/// checking that the models have the same parameter names and shapes);
/// then, for each backward whose gradients should be averaged, call
/// prepare_for_backward(loss) before `loss.backward()`: c10d::Reducer's
/// autograd hooks all-reduce the gradients in buckets while backward still
/// runs, and backward returns with every gradient holding the mean over
/// processes. A backward without prepare_for_backward only accumulates
/// locally (PyTorch's no_sync), as gradient accumulation wants. Parameters
/// may live on several devices (the module places them); no whole-module
/// move is made. Load a checkpoint into the module before constructing
/// this: LibTorch's load replaces the parameters' storage, which detaches
/// the reducer's hooks. Not thread-safe.
class DistributedDataParallel {
 public:
  /// Throws DistError naming the first parameter whose name or shape
  /// differs from rank 0's.
  DistributedDataParallel(
      torch::nn::Module& module,
      std::shared_ptr<ProcessGroup> group,
      DistributedDataParallelOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  /// Arms the reducer for the backward of `loss`, which must follow.
  void prepare_for_backward(const at::Tensor& loss);

  /// Copies rank 0's buffers to every process.
  void broadcast_buffers();

  torch::nn::Module& module() {
    return module_;
  }
  ProcessGroup& group() {
    return *group_;
  }
  const DistributedDataParallelOptions& options() const {
    return options_;
  }
  /// Gradient buckets of the reducer's current assignment: one in the
  /// first iteration; afterwards in the order gradients became ready, 1 MiB
  /// first and bucket_cap_mb each.
  int64_t bucket_count() const;

 private:
  struct Impl;
  torch::nn::Module& module_;
  std::shared_ptr<ProcessGroup> group_;
  DistributedDataParallelOptions options_;
  std::unique_ptr<Impl> impl_;
};

} // namespace hotloop::dist
