#pragma once

#include "hotloop/data/dataset.h"

#include <cstdint>
#include <memory>
#include <optional>

namespace hotloop::data {

/// Who reads a stream and when: PyTorch's `get_worker_info()` (`id`,
/// `num_workers`, the loader's `seed`), the epoch, and the data-parallel
/// process (`torch.distributed.get_rank()` and `get_world_size()`).
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
  /// The reading process, in [0, world_size): its rank in a data-parallel
  /// fit, validation or test (data::shard), else 0.
  int64_t rank = 0;
  /// Processes reading the dataset at once: 1 outside a data-parallel run.
  int64_t world_size = 1;

  /// This stream's place among every stream read at once, all processes'
  /// workers counted: rank * num_workers + worker_id, in [0, readers()).
  /// A dataset that gives stream k every readers()-th sample from the
  /// k-th reads each sample once in all.
  int64_t reader() const {
    return rank * num_workers + worker_id;
  }
  /// Streams read at once, all processes' workers counted.
  int64_t readers() const {
    return world_size * num_workers;
  }
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
///
/// In a data-parallel fit every process reads the dataset through its own
/// loader (data::shard), and the dataset splits the samples among all the
/// readers, by `context.reader()` of `context.readers()` (as PyTorch leaves
/// the split to the dataset too). A dataset says it does so by
/// `splits_by_process()`; the fit refuses one that does not, whose every
/// process would read the same samples. The processes' streams may end
/// apart: a training epoch ends for every process at the batch where the
/// first runs out (the rest of the others' batches are not trained on;
/// Trainer).
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
  /// does. nullopt (the default): unknown. In a data-parallel run, all the
  /// processes' samples: each process's loader counts size() / world_size,
  /// rounded up.
  virtual std::optional<int64_t> size() const {
    return std::nullopt;
  }

  /// Whether the streams read only their share of the samples when several
  /// processes read at once, split by StreamContext::rank and world_size
  /// (or reader() of readers()). A data-parallel run refuses a dataset
  /// that does not say so. false (the default).
  virtual bool splits_by_process() const {
    return false;
  }
};

} // namespace hotloop::data
