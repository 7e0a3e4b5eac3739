#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <exception>

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
///   before_backward(loss, sync)         before every micro-batch's backward
///   wait_for_gradients()                after the last micro-batch's backward
///   all_reduce(...), any(...)           metric sums, stop decisions
///   barrier()                           at the end of the fit
///   abort(error)                        when the fit fails here
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

  /// Before the backward of a micro-batch's `loss`. `sync` is false on
  /// every micro-batch of an accumulated step but the last: their
  /// gradients only add up locally (PyTorch's `no_sync`), one all-reduce
  /// per step. (DDP with find_unused_parameters walks the loss's graph.)
  virtual void before_backward(const at::Tensor& loss, bool sync) {}

  /// Seconds the last synced backward waited, after this process's
  /// gradients were computed, for the all-reduce with the others (what
  /// the backward could not hide): the step profile's comm phase.
  virtual double gradient_wait() {
    return 0;
  }

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

  /// The fit failed in this process with `error`: a data-parallel
  /// strategy tells the others, so that their errors name this process
  /// instead of a lost connection, and returns what to throw here instead
  /// of `error` (when `error` is only the echo of another process's
  /// failure); null keeps `error`. Must not throw.
  virtual std::exception_ptr abort(const std::exception& error) {
    return nullptr;
  }

  /// Undoes setup: removes hooks from the module.
  virtual void teardown() {}

  /// Whether this process writes checkpoints, logs and the run folder.
  virtual bool is_global_zero() const {
    return true;
  }

  /// This process's place among them, from 0 (each takes its share of
  /// the training data by it).
  virtual int64_t rank() const {
    return 0;
  }

  /// Number of processes training together.
  virtual int64_t world_size() const {
    return 1;
  }

  /// Those of them on this machine, which share its cores.
  virtual int64_t local_world_size() const {
    return 1;
  }
};

} // namespace hotloop::train
