#pragma once

#include "hotloop/data/dataset.h"

#include <cstdint>
#include <memory>
#include <optional>

namespace hotloop::data {

/// Who reads a stream and when: PyTorch's `get_worker_info()` (`id`,
/// `num_workers`, the loader's `seed`) and the epoch.
struct StreamContext {
  /// The reading worker thread, in [0, num_workers).
  int64_t worker_id = 0;
  /// Streams read at once for this epoch: the loader's num_workers, or 1
  /// when it has none (PyTorch's get_worker_info() is then None).
  int64_t num_workers = 1;
  /// The loader's seed.
  uint64_t seed = 0;
  /// The epoch being read (0 first).
  int64_t epoch = 0;
};

/// One reader's samples in order, read by one thread at a time.
///
/// A `next()` that blocks holds up the loader: a new epoch and the loader's
/// destructor wait for the reads in progress, and the loader's `timeout`
/// only ends the consumer's wait. A stream over a socket or a device should
/// give up (throw) after a bounded time of its own.
class SampleStream {
 public:
  virtual ~SampleStream() = default;
  /// The next sample, or nullopt at the end of the stream. Each sample has
  /// the shapes and dtypes of the dataset's `spec()`, its fields included
  /// (its target may be left undefined, in every sample of the stream, for
  /// data without labels); the loader's own batching checks them and names
  /// a mismatch.
  /// A stream that throws is not read again that epoch.
  virtual std::optional<Example> next() = 0;
};

/// An iterable-style dataset (PyTorch's `torch.utils.data.IterableDataset`):
/// samples come in the order a stream gives them - a socket, a simulator, a
/// file read once from start to end - rather than by index.
///
/// Every epoch the DataLoader asks for one stream per worker thread (one
/// when it has no workers), each with its `StreamContext`, and batches each
/// stream on its own; as in PyTorch, a dataset read by several workers must
/// split its samples among them by `worker_id` and `num_workers`, or every
/// worker yields them all. `stream` is called concurrently from the
/// workers; a stream is read by one thread.
class IterableDataset {
 public:
  virtual ~IterableDataset() = default;

  /// Shape and dtype of every sample.
  virtual SampleSpec spec() const = 0;

  /// A new stream of the samples `context` reads this epoch.
  virtual std::unique_ptr<SampleStream> stream(
      const StreamContext& context) const = 0;

  /// Samples per epoch over all streams, when known (PyTorch's `__len__`):
  /// the loader reports its number of batches from it, as `len(loader)`
  /// does. nullopt (the default): unknown.
  virtual std::optional<int64_t> size() const {
    return std::nullopt;
  }
};

} // namespace hotloop::data
