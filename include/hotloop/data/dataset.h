#pragma once

#include "hotloop/data/batch.h"

#include <ATen/core/Tensor.h>

#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace hotloop::data {

/// Shape and dtype of one named field of a sample.
struct FieldSpec {
  /// shape without the batch dimension ({} for one number per sample)
  std::vector<int64_t> shape;
  c10::ScalarType dtype = c10::kFloat;
};

/// Shapes and dtypes of one sample, so the loader can allocate a whole batch
/// before any sample is read.
struct SampleSpec {
  /// input shape without the batch dimension, e.g. {1, 28, 28}
  std::vector<int64_t> input_shape;
  c10::ScalarType input_dtype = c10::kFloat;
  /// target shape without the batch dimension ({} for a class index)
  std::vector<int64_t> target_shape;
  c10::ScalarType target_dtype = c10::kLong;
  /// The sample's named fields beside input and target (masks, lengths, a
  /// second input); every sample has each of them. A batch stacks each
  /// field as it does the input: [B, shape...].
  std::map<std::string, FieldSpec> fields = {};
};

/// Where a batch is read in the run: augmentation seeds derive from these
/// and the sample index only.
struct SampleContext {
  uint64_t seed = 0;
  int64_t epoch = 0;
};

/// One sample, as `Dataset::get` returns it.
struct Example {
  /// input: the shape and dtype of `SampleSpec::input_shape/input_dtype`
  at::Tensor input;
  /// target: the shape and dtype of `SampleSpec::target_shape/target_dtype`
  at::Tensor target;
  /// fields: one per entry of `SampleSpec::fields`, of its shape and dtype
  Fields fields = {};
};

/// A map-style dataset (PyTorch's `__getitem__` + `__len__`) with a batched
/// fast path.
///
/// `get` returns one sample; `get_batch` writes samples straight into rows
/// of a preallocated batch, so no per-sample tensors are made and no
/// stacking copy follows. Both must be safe to call concurrently from loader
/// threads (for different output batches), and both must give the same
/// values for the same index and context.
class Dataset {
 public:
  virtual ~Dataset() = default;

  /// Number of samples.
  virtual int64_t size() const = 0;

  /// Shape and dtype of one sample; every sample has them.
  virtual SampleSpec spec() const = 0;

  /// Sample `index` in [0, size()). Randomness (augmentation) must derive
  /// from `context` and `index` only.
  virtual Example get(int64_t index, const SampleContext& context) const = 0;

  /// Writes sample `indices[k]` into row k of `out.input`, `out.target` and
  /// each of `out.fields`, which are contiguous, have leading dimension
  /// `indices.size()` and the shapes and dtypes of `spec()`. The default copies
  /// `get()` of each index; datasets override it to write in place.
  virtual void get_batch(
      c10::ArrayRef<int64_t> indices,
      const SampleContext& context,
      Batch& out) const;

 protected:
  /// Throws Error unless `index` is in [0, size()).
  void check_index(int64_t index) const;
};

} // namespace hotloop::data
