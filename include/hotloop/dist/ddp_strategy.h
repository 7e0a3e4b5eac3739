#pragma once

#include "hotloop/dist/distributed_data_parallel.h"
#include "hotloop/dist/process_group.h"
#include "hotloop/train/strategy.h"

#include <atomic>
#include <memory>
#include <optional>

namespace hotloop::dist {

/// The Trainer's data-parallel Strategy: one process per device (or per
/// share of a CPU's cores), each with a replica of the model and its share
/// of every batch, gradients averaged by DistributedDataParallel while
/// backward runs, metrics and stop decisions reduced over the group's
/// processes, files written by rank 0 only.
class DDPStrategy final : public train::Strategy {
 public:
  DDPStrategy(
      std::shared_ptr<ProcessGroup> group,
      DistributedDataParallelOptions options = {});
  ~DDPStrategy() override;

  void setup(train::Module& module) override;
  void before_backward(const at::Tensor& loss, bool sync) override;
  double gradient_wait() override;
  void wait_for_gradients() override;
  void all_reduce(at::Tensor& values, train::Reduction op) override;
  bool any(bool flag) override;
  void barrier() override;
  std::exception_ptr abort(const std::exception& error) override;
  void teardown() override;
  bool is_global_zero() const override;
  int64_t rank() const override;
  int64_t world_size() const override;
  int64_t local_world_size() const override;

  ProcessGroup& group() {
    return *group_;
  }
  /// The fit's DistributedDataParallel; null outside a fit.
  DistributedDataParallel* ddp() {
    return ddp_.get();
  }

 private:
  std::shared_ptr<ProcessGroup> group_;
  DistributedDataParallelOptions options_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  bool synced_ = false;
  // When the last synced backward finished computing this process's
  // gradients (set by an autograd callback, maybe on another thread), in
  // steady_clock nanoseconds; 0: not known.
  std::shared_ptr<std::atomic<int64_t>> computed_ =
      std::make_shared<std::atomic<int64_t>>(0);
};

} // namespace hotloop::dist
