#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>

namespace hotloop::data {

/// Named tensors a sample or batch carries beside its input and target
/// (PyTorch's dict samples): masks, sequence lengths, sample weights, a
/// second input. Kept in name order.
using Fields = std::map<std::string, at::Tensor>;

/// One mini-batch as the loader hands it to the training step.
struct Batch {
  /// input: [B, ...] (images: [B, C, H, W] float32)
  at::Tensor input;
  /// target: [B] int64 class indices
  at::Tensor target;
  /// fields: [B, ...] each, those of the dataset's `SampleSpec::fields`
  /// (a collate may give others; batch_size=None gives the sample's own)
  Fields fields = {};

  /// Number of samples, B.
  int64_t size() const {
    return target.defined() ? target.size(0) : 0;
  }

  /// The field called `name`. Throws hotloop::Error naming it and the
  /// fields the batch has when there is no such field.
  at::Tensor field(const std::string& name) const;
};

/// Calls `fn(tensor)` on each defined tensor of `batch`: input, target, then
/// the fields in name order.
template <class Fn>
void for_each_tensor(const Batch& batch, Fn&& fn) {
  for (const at::Tensor* tensor : {&batch.input, &batch.target}) {
    if (tensor->defined()) {
      fn(*tensor);
    }
  }
  for (const auto& [name, tensor] : batch.fields) {
    if (tensor.defined()) {
      fn(tensor);
    }
  }
}

/// `batch` with each defined tensor replaced by `fn(tensor)` (moved to a
/// device, pinned, cloned); undefined ones stay undefined.
template <class Fn>
Batch transformed(const Batch& batch, Fn&& fn) {
  auto apply = [&](const at::Tensor& tensor) {
    return tensor.defined() ? at::Tensor(fn(tensor)) : tensor;
  };
  Batch out{apply(batch.input), apply(batch.target)};
  for (const auto& [name, tensor] : batch.fields) {
    out.fields.emplace(name, apply(tensor));
  }
  return out;
}

} // namespace hotloop::data
