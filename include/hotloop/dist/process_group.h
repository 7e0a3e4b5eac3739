#pragma once

#include "hotloop/dist/environment.h"

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/arg.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace c10d {
class ProcessGroup;
} // namespace c10d

namespace hotloop::dist {

/// How a process group is formed.
struct ProcessGroupOptions {
  /// "gloo" (CPU tensors) or "nccl" (CUDA tensors; CUDA builds only); ""
  /// picks by device: nccl for CUDA, else gloo.
  TORCH_ARG(std::string, backend) = "";
  /// Seconds the rendezvous and every collective may take before the
  /// process gives up with DistError (PyTorch's default: 30 minutes).
  TORCH_ARG(double, timeout) = 1800;
  /// Whether the processes train on CUDA devices (picks nccl for "").
  TORCH_ARG(bool, cuda) = false;
};

/// How Strategy-style reductions combine values.
enum class ReduceOp { kSum, kMax };

/// The processes of one distributed run, joined through PyTorch's own c10d:
/// a TCPStore rendezvous at MASTER_ADDR:MASTER_PORT (served by rank 0, or
/// by torchrun's agent when it says so) and a ProcessGroupGloo (or NCCL).
/// Collectives wait at most the group's timeout and turn c10d's errors into
/// DistError; a process that fails can say so first (report_failure), and
/// the others' errors then name it. Not thread-safe.
class ProcessGroup {
 public:
  /// Joins the group `env` describes; returns once every process has.
  /// Throws DistError naming host:port when the master cannot be reached
  /// or its port is taken, when not every process arrives within the
  /// timeout, or when the processes disagree on the world size.
  static std::shared_ptr<ProcessGroup> join(
      const ProcessEnvironment& env, ProcessGroupOptions options = {});
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int64_t rank() const;
  int64_t world_size() const;
  const ProcessEnvironment& environment() const;
  const std::string& backend_name() const;
  /// c10d's group, for c10d::Reducer and friends.
  const c10::intrusive_ptr<c10d::ProcessGroup>& c10d() const;

  /// Combines `tensor` over every process, in place.
  void all_reduce(at::Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  /// Rank `root`'s `tensor` to every process, in place.
  void broadcast(at::Tensor& tensor, int64_t root = 0);
  /// Returns once every process has called it.
  void barrier();

  /// Records in the rendezvous store that this process failed with
  /// `what`, so that the others' errors name it. Never throws.
  void report_failure(const std::string& what) noexcept;
  /// What a process reported, as "rank R: what"; empty when none did (or
  /// the store is gone). Never throws.
  std::string reported_failure() noexcept;

  /// Turns a c10d error of a collective into DistError that names the
  /// process that reported a failure, if one did. Never returns.
  [[noreturn]] void rethrow(const std::exception& error, const char* what);

 private:
  struct Impl;
  explicit ProcessGroup(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace hotloop::dist
