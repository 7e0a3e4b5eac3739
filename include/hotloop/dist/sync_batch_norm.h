#pragma once

#include "hotloop/dist/process_group.h"

#include <ATen/core/Tensor.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/options/batchnorm.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <ostream>

namespace hotloop::dist {

/// BatchNorm whose training statistics are taken over the whole batch of
/// every process in a group (PyTorch's torch.nn.SyncBatchNorm): each
/// process's forward all-reduces its per-channel sums, its backward the
/// sums of the output gradient, so N processes with batch B normalize as
/// one process with batch N x B. Without a group, in eval mode, or in a
/// group of one, it is BatchNorm: the same kernel, the same parameters and
/// buffers (weight, bias, running_mean, running_var, num_batches_tracked),
/// so checkpoints move between the two. Inputs are [N, C, ...] of any rank
/// >= 2.
///
/// LibTorch's modules call their children directly, so a BatchNorm cannot
/// be swapped for this after construction (Python's
/// convert_sync_batchnorm): build the model with it, and hand the group
/// over with set_group (DistributedDataParallel does so for every
/// SyncBatchNorm when its sync_batchnorm option is on).
class SyncBatchNormImpl
    : public torch::nn::NormImplBase<
          2,
          SyncBatchNormImpl,
          torch::nn::BatchNormOptions> {
 public:
  explicit SyncBatchNormImpl(int64_t num_features)
      : SyncBatchNormImpl(torch::nn::BatchNormOptions(num_features)) {}
  explicit SyncBatchNormImpl(const torch::nn::BatchNormOptions& options);

  at::Tensor forward(const at::Tensor& input);

  /// The processes whose batches the statistics cover; null: this one.
  void set_group(std::shared_ptr<ProcessGroup> group) {
    group_ = std::move(group);
  }
  const std::shared_ptr<ProcessGroup>& group() const {
    return group_;
  }

  void pretty_print(std::ostream& stream) const override;

 protected:
  void _check_input_dim(const at::Tensor& input) override;

 private:
  std::shared_ptr<ProcessGroup> group_;
};
TORCH_MODULE(SyncBatchNorm);

/// Hands `group` to every SyncBatchNorm in `module`. Throws ConfigError
/// naming the first torch::nn::BatchNorm1d/2d/3d found, whose statistics
/// would silently stay per process.
void attach_sync_batchnorm(
    torch::nn::Module& module, const std::shared_ptr<ProcessGroup>& group);

} // namespace hotloop::dist
