#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace hotloop::train {

class Module;

/// How values combine across processes in Strategy::all_reduce.
enum class Reduction { kSum, kMax };

/// The one seam between the Trainer and data parallelism (Lightning's
/// Strategy, without its layers). This class is the single process: there
/// is nothing to synchronise, every reduction is the value itself and the
/// process writes everything. A data-parallel strategy overrides all of it:
/// gradients are all-reduced by autograd hooks while backward still runs
/// (buckets overlapping the backward pass, as PyTorch's DDP does), so the
/// Trainer never touches gradients itself; it only says before each
/// backward whether that one syncs, and waits once after the last.
///
/// The Trainer calls, in a fit:
///   setup(module)                       once, before the optimizers exist
///   before_backward(sync)               before every micro-batch's backward
///   wait_for_gradients()                after the last micro-batch's backward
///   all_reduce(...), any(...)           metric sums, stop decisions
///   barrier()                           at the end of the fit
///   teardown()                          when the fit ends, however it ends
/// Every process must make the same calls in the same order. Not
/// thread-safe: the training thread calls it.
class Strategy {
 public:
  virtual ~Strategy() = default;

  /// Connects to `module`, already on its device: a data-parallel strategy
  /// makes every process start from the same parameters and buffers and
  /// registers its gradient hooks.
  virtual void setup(Module& module) {}

  /// Before the backward of a micro-batch. `sync` is false on every
  /// micro-batch of an accumulated step but the last: their gradients only
  /// add up locally (PyTorch's `no_sync`), one all-reduce per step.
  virtual void before_backward(bool sync) {}

  /// After the last micro-batch's backward of an optimizer step: returns
  /// once every gradient holds the mean over processes. The Trainer calls
  /// it before unscaling and clipping, which must see the mean.
  virtual void wait_for_gradients() {}

  /// Combines `values` (say, the sums and counts of a validation metric,
  /// or an fp16 step's found-inf flag) over every process, in place.
  virtual void all_reduce(at::Tensor& values, Reduction op = Reduction::kSum) {}

  /// Whether any process says `flag` (a stop signal, EarlyStopping's
  /// decision, a non-finite loss): every process then takes the same
  /// branch, and none waits in a collective the others left.
  virtual bool any(bool flag) {
    return flag;
  }

  /// Returns once every process has called it.
  virtual void barrier() {}

  /// Undoes setup: removes hooks from the module.
  virtual void teardown() {}

  /// Whether this process writes checkpoints, logs and the run folder.
  virtual bool is_global_zero() const {
    return true;
  }

  /// Number of processes training together.
  virtual int64_t world_size() const {
    return 1;
  }
};

} // namespace hotloop::train
