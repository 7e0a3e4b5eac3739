#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace hotloop::data {

/// One mini-batch as the loader hands it to the training step.
struct Batch {
  /// input: [B, ...] (images: [B, C, H, W] float32)
  at::Tensor input;
  /// target: [B] int64 class indices
  at::Tensor target;

  /// Number of samples, B.
  int64_t size() const {
    return target.defined() ? target.size(0) : 0;
  }
};

} // namespace hotloop::data
