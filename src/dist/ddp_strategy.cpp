#include "hotloop/dist/ddp_strategy.h"

#include "hotloop/core/error.h"
#include "hotloop/train/module.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/engine.h>

#include <algorithm>
#include <chrono>

namespace hotloop::dist {

DDPStrategy::DDPStrategy(
    std::shared_ptr<ProcessGroup> group, DistributedDataParallelOptions options)
    : group_(std::move(group)), options_(options) {
  HOTLOOP_CHECK(group_ != nullptr, "DDPStrategy: no process group");
}

DDPStrategy::~DDPStrategy() = default;

void DDPStrategy::setup(train::Module& module) {
  ddp_ = std::make_unique<DistributedDataParallel>(module, group_, options_);
}

void DDPStrategy::before_backward(const at::Tensor& loss, bool sync) {
  synced_ = sync;
  if (!sync) {
    return;
  }
  ddp_->prepare_for_backward(loss);
  // The loss's gradient is the backward's first node: a callback queued
  // there runs first when the graph is done, before the reducer's own,
  // which then waits for the buckets still in flight.
  computed_->store(0);
  at::Tensor root = loss;
  root.register_hook([computed = computed_](const at::Tensor& grad) {
    torch::autograd::Engine::get_default_engine().queue_callback([computed] {
      computed->store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count());
    });
    return grad;
  });
}

double DDPStrategy::gradient_wait() {
  const int64_t computed = computed_->exchange(0);
  if (computed == 0) {
    return 0;
  }
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  return std::max<int64_t>(0, now - computed) * 1e-9;
}

void DDPStrategy::wait_for_gradients() {
  // The reducer's last callback of the backward already waited for every
  // bucket. What remains is PyTorch's broadcast_buffers: the next forward
  // sees rank 0's running statistics.
  if (synced_ && options_.broadcast_buffers()) {
    ddp_->broadcast_buffers();
  }
}

void DDPStrategy::all_reduce(at::Tensor& values, train::Reduction op) {
  group_->all_reduce(
      values, op == train::Reduction::kSum ? ReduceOp::kSum : ReduceOp::kMax);
}

bool DDPStrategy::any(bool flag) {
  at::Tensor value = at::tensor({static_cast<int64_t>(flag)});
  group_->all_reduce(value, ReduceOp::kMax);
  return value.item<int64_t>() != 0;
}

void DDPStrategy::barrier() {
  group_->barrier();
}

std::exception_ptr DDPStrategy::abort(const std::exception& error) {
  if (dynamic_cast<const DistError*>(&error) != nullptr) {
    // Another process's failure, already named.
    return nullptr;
  }
  // The first report wins: when this error is only a lost connection to a
  // process that failed first, that process's report names the cause.
  group_->report_failure(error.what());
  const std::string first = group_->reported_failure();
  const std::string mine = "rank " + std::to_string(rank()) + ": ";
  if (first.empty() || first.rfind(mine, 0) == 0) {
    return nullptr;
  }
  return std::make_exception_ptr(DistError(hotloop::detail::str_cat(
      mine,
      "stopped because ",
      first,
      " (here: ",
      std::string(error.what()).substr(0, std::string(error.what()).find('\n')),
      ")")));
}

void DDPStrategy::teardown() {
  ddp_.reset();
}

bool DDPStrategy::is_global_zero() const {
  return group_->rank() == 0;
}

int64_t DDPStrategy::rank() const {
  return group_->rank();
}

int64_t DDPStrategy::world_size() const {
  return group_->world_size();
}

int64_t DDPStrategy::local_world_size() const {
  return group_->environment().local_world_size;
}

} // namespace hotloop::dist
