#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace hotloop::train {

/// The one place that decides how gradients are synchronised across
/// processes and which process writes files (Flashlight's Reducer). This
/// base class is the single-process case: there is nothing to synchronise
/// and the process writes everything. A data-parallel implementation
/// all-reduces in add/finalize and answers is_global_zero for rank 0 only.
class Reducer {
 public:
  virtual ~Reducer() = default;

  /// Hands over one parameter's summed gradient of an optimizer step,
  /// after the last micro-batch's backward; may start its all-reduce.
  virtual void add(at::Tensor& grad) {}

  /// Returns once every added gradient holds the average over processes;
  /// the Trainer calls it before unscaling and clipping.
  virtual void finalize() {}

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
