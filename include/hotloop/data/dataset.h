#pragma once

#include "hotloop/data/batch.h"

#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <vector>

namespace hotloop::data {

/// Shapes and dtypes of one sample, so the loader can allocate a whole batch
/// before any sample is read.
struct SampleSpec {
  /// input shape without the batch dimension, e.g. {1, 28, 28}
  std::vector<int64_t> input_shape;
  c10::ScalarType input_dtype = c10::kFloat;
  /// target shape without the batch dimension ({} for a class index)
  std::vector<int64_t> target_shape;
  c10::ScalarType target_dtype = c10::kLong;
};

/// Where a batch is read in the run: augmentation seeds derive from these
/// and the sample index only.
struct SampleContext {
  uint64_t seed = 0;
  int64_t epoch = 0;
};

/// A map-style dataset with a batched fast path.
///
/// `get_batch` writes samples straight into rows of a preallocated batch, so
/// no per-sample tensors are made and no stacking copy follows. It must be
/// safe to call concurrently for different output batches.
class Dataset {
 public:
  virtual ~Dataset() = default;

  /// Number of samples.
  virtual int64_t size() const = 0;

  /// Shape and dtype of one sample.
  virtual SampleSpec spec() const = 0;

  /// Writes sample `indices[k]` into row k of `out.input` and `out.target`,
  /// which have leading dimension `indices.size()` and the shapes of
  /// `spec()`. Indices are in [0, size()).
  virtual void get_batch(
      c10::ArrayRef<int64_t> indices,
      const SampleContext& context,
      Batch& out) const = 0;
};

} // namespace hotloop::data
