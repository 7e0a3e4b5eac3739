#pragma once

#include "hotloop/data/batch.h"
#include "hotloop/data/dataset.h"
#include "hotloop/data/detail/batch_buffers.h"
#include "hotloop/data/iterable_dataset.h"
#include "hotloop/data/sampler.h"

#include <c10/core/Device.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <torch/arg.h>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace hotloop::data {
namespace detail {
class StreamReader;
} // namespace detail

/// Builds a batch from samples (PyTorch's `collate_fn`).
using CollateFn = std::function<Batch(std::vector<Example> samples)>;
/// Called once in each worker thread as it starts, with its id in
/// [0, num_workers) (PyTorch's `worker_init_fn`).
using WorkerInitFn = std::function<void(int64_t worker_id)>;

/// Options of a DataLoader, with `torch.utils.data.DataLoader`'s names and
/// meaning. Validated when the DataLoader is built, with PyTorch's rules:
/// batch_sampler excludes batch_size, shuffle, sampler and drop_last;
/// sampler excludes shuffle; prefetch_factor and persistent_workers need
/// num_workers > 0; an IterableDataset takes none of shuffle, sampler and
/// batch_sampler.
///
/// Differences from PyTorch: workers are threads, not processes (no pickling,
/// no copies); `seed` replaces `generator` (the shuffle of epoch e is
/// `torch.randperm(n, generator=torch.Generator().manual_seed(seed + e))`,
/// and augmentation draws from (seed, epoch, sample index)); `device` is an
/// addition: batches are moved there by the loader, non_blocking from pinned
/// memory.
struct DataLoaderOptions {
  DataLoaderOptions() = default;
  /* implicit */ DataLoaderOptions(int64_t batch_size)
      : batch_size_(batch_size) {}

  /// Samples per batch; nullopt yields single samples with no batch
  /// dimension (PyTorch's batch_size=None).
  TORCH_ARG(std::optional<int64_t>, batch_size) = 1;
  /// Reshuffle the sample order every epoch.
  TORCH_ARG(bool, shuffle) = false;
  /// Where sample indices come from; null: sequential, or random with
  /// shuffle.
  TORCH_ARG(std::shared_ptr<const Sampler>, sampler);
  /// Where whole batches of indices come from: a BatchSampler, or one of
  /// your own (a BatchSamplerBase) whose batches may differ in size.
  TORCH_ARG(std::shared_ptr<const BatchSamplerBase>, batch_sampler);
  /// Threads that build batches; 0 builds them in the caller's thread.
  TORCH_ARG(int64_t, num_workers) = 0;
  /// Builds batches from `Dataset::get` samples instead of the dataset's
  /// batched fast path.
  TORCH_ARG(CollateFn, collate);
  /// Put batches in page-locked memory (needs a CUDA build; ignored with a
  /// warning otherwise) so device copies can be asynchronous.
  TORCH_ARG(bool, pin_memory) = false;
  /// Drop the last batch when it is smaller than batch_size.
  TORCH_ARG(bool, drop_last) = false;
  /// Seconds to wait for a batch before failing; 0 waits forever.
  TORCH_ARG(double, timeout) = 0;
  TORCH_ARG(WorkerInitFn, worker_init_fn);
  /// Seed of the shuffle and of every sample's augmentation.
  TORCH_ARG(uint64_t, seed) = 0;
  /// Batches each worker may have ready ahead of the consumer; default 2
  /// with workers.
  TORCH_ARG(std::optional<int64_t>, prefetch_factor);
  /// Keep worker threads between epochs instead of starting them anew.
  TORCH_ARG(bool, persistent_workers) = false;
  /// Move every batch to this device before handing it out. For an
  /// accelerator the next batch is copied on a side stream while the current
  /// one is used, and the consumer's stream waits on an event before use.
  TORCH_ARG(std::optional<c10::Device>, device);
};

/// Where a loader stands in its epochs, for checkpoints: resuming from it
/// yields exactly the batches the interrupted run would have seen next.
struct DataLoaderState {
  /// The epoch in progress (or the next one when none is).
  int64_t epoch = 0;
  /// Batches of that epoch already handed out.
  int64_t batches_consumed = 0;
};

/// Loads batches from a Dataset in sampler order, or from an
/// IterableDataset's streams, on threads.
///
/// The epoch's order and each sample's augmentation are pure functions of
/// (seed, epoch, index), so an epoch is bitwise identical for any
/// num_workers and prefetch_factor. Iterating starts the next epoch: the
/// first `begin()` runs epoch 0, the next epoch 1, unless `set_epoch` or
/// `load_state_dict` says otherwise. Leaving an epoch early is fine.
///
/// Unless a collate function is given or batch_size is None, batches are
/// written in place by `Dataset::get_batch` into buffers the loader reuses
/// once the caller has dropped every reference to them.
///
/// An exception in a worker reaches the consumer as `DataError` naming the
/// sample index and the original message.
///
/// An IterableDataset is read as PyTorch reads one: every epoch each worker
/// thread (or the caller's thread, without workers) opens a stream of its
/// own and batches it - a stream's last batch may be short, or is dropped
/// with drop_last - and the batches are handed out round-robin over the
/// workers whose streams have not ended. Its batches depend on num_workers
/// (the dataset splits its samples by worker) but not on prefetch_factor or
/// timing. A resumed epoch (`load_state_dict`) reads its streams again from
/// the start and drops the batches already consumed. The epoch ends when
/// every stream has; `num_batches()` is the dataset's `size()` in batches,
/// as `len(loader)` is, which the streams may give more or fewer of.
///
/// Not thread-safe: one consumer thread iterates. Owns its threads, so it
/// cannot be copied; the destructor stops and joins them, mid-epoch too.
class DataLoader {
 public:
  class Iterator;

  /// Throws ConfigError naming the options when they are invalid or
  /// incompatible.
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options);
  /// A loader of an iterable-style dataset; also throws ConfigError when
  /// the options name shuffle, a sampler or a batch_sampler.
  DataLoader(
      std::shared_ptr<const IterableDataset> dataset,
      DataLoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Starts the next epoch and returns an iterator to its first batch.
  /// Batches left from an unfinished epoch are discarded.
  Iterator begin();
  Iterator end();

  /// Batches in one epoch (`len(dataloader)`); for an IterableDataset,
  /// `size()` samples in batches. Throws ConfigError when that is unknown.
  int64_t num_batches() const;
  /// `num_batches()`, or nullopt for an IterableDataset of unknown size.
  std::optional<int64_t> length() const;
  /// Samples in the dataset, or nullopt for an IterableDataset of unknown
  /// size.
  std::optional<int64_t> dataset_size() const;
  /// Shape and dtype of every sample.
  const SampleSpec& spec() const {
    return spec_;
  }
  /// Whether the loader reads an IterableDataset.
  bool iterable() const {
    return iterable_ != nullptr;
  }
  /// The epoch the next `begin()` starts.
  int64_t epoch() const {
    return next_epoch_;
  }
  /// Makes the next `begin()` start `epoch` from its first batch.
  void set_epoch(int64_t epoch);

  /// The position to save in a checkpoint.
  DataLoaderState state_dict() const;
  /// Makes the next `begin()` continue `state.epoch` after
  /// `state.batches_consumed` batches (no sample of those is loaded).
  /// Throws ConfigError when the position is past the epoch's end.
  void load_state_dict(const DataLoaderState& state);

  const DataLoaderOptions& options() const {
    return options_;
  }
  /// The map-style dataset; throws ConfigError for an IterableDataset.
  const Dataset& dataset() const;
  /// The map-style dataset, shared: another loader over it (one process's
  /// share, say) can be made from it and options(). Null for an
  /// IterableDataset.
  const std::shared_ptr<const Dataset>& dataset_ptr() const {
    return dataset_;
  }
  /// The iterable-style dataset, or null for a map-style one.
  const std::shared_ptr<const IterableDataset>& iterable_dataset_ptr() const {
    return iterable_;
  }

  /// An input iterator over the batches of the current epoch. The Batch it
  /// points to belongs to the caller until the next increment.
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = Batch*;
    using reference = Batch&;

    Batch& operator*() {
      return batch_;
    }
    Batch* operator->() {
      return &batch_;
    }
    Iterator& operator++();
    bool operator==(const Iterator& other) const {
      return done() == other.done();
    }
    bool operator!=(const Iterator& other) const {
      return !(*this == other);
    }

   private:
    friend class DataLoader;
    explicit Iterator(DataLoader* loader);
    bool done() const {
      return loader_ == nullptr;
    }

    DataLoader* loader_ = nullptr;
    Batch batch_;
  };

 private:
  using IndexBatches = std::vector<std::vector<int64_t>>;
  struct Ready {
    Batch batch;
    std::exception_ptr error;
  };

  void set_up_memory();
  void start_epoch();
  void start_workers();
  void stop_workers();
  // Next batch of the epoch in order; false at the end.
  bool next(Batch& out);
  Batch make_batch(
      const std::vector<int64_t>& indices, int64_t epoch, int64_t batch_index);
  Batch collate(const std::vector<int64_t>& indices, int64_t epoch) const;
  at::Tensor take_buffer(
      int64_t rows, const std::vector<int64_t>& shape, c10::ScalarType dtype);
  // Next host batch in order; false at the end of the epoch.
  bool next_host(Batch& out);
  // Starts copying `batch` to the accelerator on the side stream.
  void start_copy(Batch batch);
  void worker_loop(int64_t worker_id);

  std::shared_ptr<const Dataset> dataset_;
  std::shared_ptr<const IterableDataset> iterable_;
  DataLoaderOptions options_;
  std::shared_ptr<const BatchSamplerBase> batch_sampler_;
  SampleSpec spec_;
  // take_buffer, for the batching of both kinds of dataset.
  detail::BufferFn buffer_fn_;
  int64_t prefetch_factor_ = 0;
  bool pin_ = false;
  int64_t next_epoch_ = 0;
  int64_t start_position_ = 0;

  // Epoch state, guarded by mutex_ while workers run.
  std::mutex mutex_;
  std::condition_variable work_cv_;
  std::condition_variable ready_cv_;
  uint64_t generation_ = 0;
  int64_t epoch_ = 0;
  // Shared so a worker still building a batch of an abandoned epoch keeps
  // reading the list it started with.
  std::shared_ptr<const IndexBatches> batches_;
  int64_t next_to_schedule_ = 0;
  int64_t next_to_consume_ = 0;
  bool epoch_active_ = false;
  std::map<int64_t, Ready> ready_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
  int64_t workers_started_ = 0; // that have run worker_init_fn

  // Accelerator prefetch: the batch being copied on copy_stream_, and the
  // event that marks the copy's end.
  bool accelerator_ = false;
  c10::Device device_{c10::kCPU};
  std::optional<c10::Stream> copy_stream_;
  struct InFlight {
    Batch batch;
    c10::Event done;
  };
  std::optional<InFlight> in_flight_;

  // Batch buffers the loader hands out and takes back once unreferenced.
  std::mutex pool_mutex_;
  std::vector<at::Tensor> pool_;

  // An IterableDataset's streams and workers (null for a map-style one);
  // last, so it stops its workers before the pool goes.
  std::unique_ptr<detail::StreamReader> streams_;
};

} // namespace hotloop::data

namespace hotloop::data {

/// The loader of process `rank` of `num_replicas` over `loader`'s dataset,
/// with its options, as Lightning re-creates a loader for a data-parallel
/// run. Its share, for training (padded to equal shares, so that the
/// processes step together) or for evaluation (every sample counted
/// once):
/// - with no sampler of its own, a DistributedSampler (shuffled as
///   `loader` is, with its seed) or a ShardSampler;
/// - with its own `sampler`, every num_replicas-th index of that sampler's
///   epoch (DistributedSamplerWrapper);
/// - with its own `batch_sampler`, every num_replicas-th batch of it
///   (DistributedBatchSampler);
/// - of an IterableDataset, the streams the dataset gives when told the
///   process (StreamContext::rank and world_size: the dataset splits its
///   samples, as in PyTorch), and size() / num_replicas samples, rounded
///   up, as the loader's count.
/// A sampler that already is a share (a DistributedSampler, ShardSampler
/// or one of the wrappers, also inside a BatchSampler) is kept when it is
/// this process's share. Throws ConfigError when it is another process's.
std::unique_ptr<DataLoader> shard(
    const DataLoader& loader,
    int64_t num_replicas,
    int64_t rank,
    bool training);

/// Whether `loader` already is one process's share, which shard() keeps:
/// its sampler or batch_sampler is a DistributedSampler, ShardSampler or
/// one of the wrappers (also inside a BatchSampler), or its dataset is a
/// share of an IterableDataset that shard() made.
bool is_share(const DataLoader& loader);

} // namespace hotloop::data
