#pragma once

#include "hotloop/data/batch.h"
#include "hotloop/data/dataset.h"

#include <torch/arg.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace hotloop::data {

/// Options of a DataLoader, named as in `torch.utils.data.DataLoader`.
/// Validated when the DataLoader is built.
struct DataLoaderOptions {
  DataLoaderOptions() = default;
  /* implicit */ DataLoaderOptions(int64_t batch_size)
      : batch_size_(batch_size) {}

  /// Samples per batch; > 0.
  TORCH_ARG(int64_t, batch_size) = 1;
  /// Reshuffle the sample order every epoch.
  TORCH_ARG(bool, shuffle) = false;
  /// Drop the last batch when it is smaller than batch_size.
  TORCH_ARG(bool, drop_last) = false;
  /// Background threads that build batches; 0 builds them in the caller's
  /// thread when it asks for the next batch.
  TORCH_ARG(int64_t, num_workers) = 0;
  /// Batches each worker may have ready ahead of the consumer.
  TORCH_ARG(int64_t, prefetch_factor) = 2;
  /// Seed of the shuffle and of every sample's augmentation.
  TORCH_ARG(uint64_t, seed) = 0;
  /// Seconds to wait for a batch before failing; 0 waits forever.
  TORCH_ARG(double, timeout) = 0;
};

/// Loads batches from a Dataset in sampler order, on threads.
///
/// The epoch's order and each sample's augmentation are pure functions of
/// (seed, epoch, index), so an epoch is bitwise identical for any
/// num_workers and prefetch_factor. Iterating starts the next epoch: the
/// first `begin()` runs epoch 0, the next epoch 1, unless `set_epoch` says
/// otherwise. Breaking out of an epoch early is fine.
///
/// Not thread-safe: one consumer thread iterates. Owns its threads, so it
/// cannot be copied; the destructor stops and joins them.
class DataLoader {
 public:
  class Iterator;

  /// Throws ConfigError naming the option when an option is invalid.
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Starts the next epoch and returns an iterator to its first batch.
  /// Any batches left from an unfinished epoch are discarded.
  Iterator begin();
  Iterator end();

  /// Batches in one epoch.
  int64_t num_batches() const;
  /// The epoch the next `begin()` starts.
  int64_t epoch() const {
    return next_epoch_;
  }
  /// Makes the next `begin()` start `epoch`.
  void set_epoch(int64_t epoch) {
    next_epoch_ = epoch;
  }

  const DataLoaderOptions& options() const {
    return options_;
  }
  const Dataset& dataset() const {
    return *dataset_;
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
  struct Ready {
    Batch batch;
    std::exception_ptr error;
  };

  void start_epoch();
  // Next batch of the epoch in order; false at the end.
  bool next(Batch& out);
  Batch make_batch(
      const std::vector<int64_t>& order,
      int64_t epoch,
      int64_t batch_index) const;
  void worker_loop();

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  SampleSpec spec_;
  int64_t next_epoch_ = 0;

  // Epoch state, guarded by mutex_ while workers run.
  std::mutex mutex_;
  std::condition_variable work_cv_;
  std::condition_variable ready_cv_;
  uint64_t generation_ = 0;
  int64_t epoch_ = 0;
  // Shared so a worker still building a batch of an abandoned epoch keeps
  // reading the order it started with.
  std::shared_ptr<const std::vector<int64_t>> order_;
  int64_t batches_ = 0;
  int64_t next_to_schedule_ = 0;
  int64_t next_to_consume_ = 0;
  std::map<int64_t, Ready> ready_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

} // namespace hotloop::data
