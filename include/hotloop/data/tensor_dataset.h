#pragma once

#include "hotloop/data/dataset.h"

#include <ATen/core/Tensor.h>

namespace hotloop::data {

/// Samples held in memory as tensors that share their first dimension
/// (PyTorch's `TensorDataset`): one input, one target, and any number of
/// named fields (masks, lengths, sample weights, a second input).
///
/// `get_batch` gathers rows with one memcpy each, straight into the batch.
/// Immutable after construction, so safe to read from any number of threads.
class TensorDataset : public Dataset {
 public:
  /// inputs: [N, ...] any dtype; targets: [N, ...] any dtype; fields:
  /// [N, ...] each, any dtype; all on the CPU. Stored contiguous (copied
  /// only when they are not). Throws DataError when one is a scalar or on
  /// another device, or when their first dimensions differ.
  TensorDataset(at::Tensor inputs, at::Tensor targets, Fields fields = {});

  int64_t size() const override;
  /// input: inputs' shape without N and dtype; target and fields: likewise.
  SampleSpec spec() const override;
  /// input: inputs[index] (a copy); target and fields: likewise.
  Example get(int64_t index, const SampleContext& context) const override;
  void get_batch(
      c10::ArrayRef<int64_t> indices,
      const SampleContext& context,
      Batch& out) const override;

  /// inputs: [N, ...], contiguous
  const at::Tensor& inputs() const {
    return inputs_;
  }
  /// targets: [N, ...], contiguous
  const at::Tensor& targets() const {
    return targets_;
  }
  /// fields: [N, ...] each, contiguous
  const Fields& fields() const {
    return fields_;
  }

 private:
  at::Tensor inputs_;
  at::Tensor targets_;
  Fields fields_;
};

} // namespace hotloop::data
