#pragma once

// Found only when LibTorch's own header is missing: Debian's libtorch-dev
// 1.13 ships c10d's reducer.hpp, which includes this header, but not the
// distributed-autograd headers it belongs to. c10d::Reducer keeps a pointer
// to a distributed-autograd context (RPC training, unused by
// DistributedDataParallel); this declares the names reducer.hpp uses, and
// nothing of the context itself is used by hotloop.

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>

namespace torch::distributed::autograd {

class DistAutogradContext {
 public:
  using GradCallback = std::function<bool(at::Tensor&)>;
};

using ContextPtr = std::shared_ptr<DistAutogradContext>;

} // namespace torch::distributed::autograd
