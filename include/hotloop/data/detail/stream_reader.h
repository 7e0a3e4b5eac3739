#pragma once

#include "hotloop/core/error.h"
#include "hotloop/data/batch.h"
#include "hotloop/data/detail/batch_buffers.h"
#include "hotloop/data/iterable_dataset.h"

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace hotloop::data {
struct DataLoaderOptions;
} // namespace hotloop::data

namespace hotloop::data::detail {

/// Runs `options`' worker_init_fn, if any, in worker `worker_id`'s thread;
/// a failure as the DataError each batch of that worker then reports.
std::exception_ptr run_worker_init(
    const DataLoaderOptions& options, int64_t worker_id);

/// `samples` as one batch without the loader's own batching: through the
/// options' collate, or (batch_size=None) the one sample itself; in
/// page-locked memory with `pin`, as torch's pin_memory does every batch.
Batch collated(
    std::vector<Example> samples, const DataLoaderOptions& options, bool pin);

/// Waits on `ready_cv` (with `lock` held) until `ready()`; with a positive
/// `timeout` (the loader's option, in seconds) at most that long, then
/// throws Error "DataLoader timed out after <timeout> s waiting for
/// <what()> (timeout option)".
template <typename Ready, typename What>
void wait_for_batch(
    std::condition_variable& ready_cv,
    std::unique_lock<std::mutex>& lock,
    double timeout,
    Ready&& ready,
    What&& what) {
  if (timeout <= 0) {
    ready_cv.wait(lock, ready);
    return;
  }
  if (!ready_cv.wait_for(lock, std::chrono::duration<double>(timeout), ready)) {
    throw Error(hotloop::detail::str_cat(
        "DataLoader timed out after ",
        timeout,
        " s waiting for ",
        what(),
        " (timeout option)"));
  }
}

/// The batches of an IterableDataset in PyTorch's order: one stream per
/// worker thread (one, read in the caller's thread, without workers), each
/// batched on its own - a stream's last batch is short, or dropped with
/// drop_last - and handed out round-robin over the workers whose streams
/// have not ended. So the batches depend on num_workers, as in PyTorch, but
/// not on prefetch_factor or timing.
///
/// The DataLoader's part for iterable datasets: it is driven by one
/// consumer thread, which the loader's options and guarantees (timeout,
/// worker_init_fn, persistent_workers, errors as DataError) describe.
class StreamReader {
 public:
  /// `options` must outlive the reader (the loader's own);
  /// `prefetch_factor` is the loader's, resolved.
  StreamReader(
      std::shared_ptr<const IterableDataset> dataset,
      const DataLoaderOptions& options,
      int64_t prefetch_factor,
      BufferFn buffer,
      bool pin);
  ~StreamReader();
  StreamReader(const StreamReader&) = delete;
  StreamReader& operator=(const StreamReader&) = delete;

  /// Starts `epoch` with new streams, whose first `skip` batches are read
  /// and dropped; what is left of the previous epoch is dropped.
  void start(int64_t epoch, int64_t skip);

  /// The epoch's next batch; false at its end.
  bool next(Batch& out);

  /// Stops and joins the worker threads.
  void stop();

 private:
  struct Item {
    Batch batch;
    std::exception_ptr error;
  };
  // One worker's batches ready for the consumer, in stream order.
  struct Lane {
    std::deque<Item> ready;
    bool ended = false; // the stream gave its last batch (or failed)
    bool active = true; // the consumer still takes turns from it
  };

  std::unique_ptr<SampleStream> open(int64_t worker_id, int64_t epoch) const;
  // The stream's next batch; nullopt at its end.
  std::optional<Batch> read_batch(
      SampleStream& stream,
      int64_t worker_id,
      int64_t batch,
      int64_t epoch) const;
  Batch stack(std::vector<Example>& samples) const;
  bool next_in_thread(Batch& out);
  void start_threads();
  void end_epoch(std::unique_lock<std::mutex>& lock);
  void worker_loop(int64_t worker_id);

  std::shared_ptr<const IterableDataset> dataset_;
  const DataLoaderOptions& options_;
  BufferFn buffer_;
  bool pin_;
  SampleSpec spec_;
  int64_t num_workers_;
  int64_t prefetch_factor_;

  // Without workers: the one stream, read in the consumer's thread.
  std::unique_ptr<SampleStream> own_stream_;
  int64_t own_batches_ = 0;

  // Guarded by mutex_ while workers run.
  std::mutex mutex_;
  std::condition_variable work_cv_;
  std::condition_variable ready_cv_;
  uint64_t generation_ = 0;
  int64_t epoch_ = 0;
  bool epoch_active_ = false;
  bool stop_ = false;
  std::vector<Lane> lanes_;
  int64_t cursor_ = 0; // the lane whose turn it is
  int64_t skip_ = 0;   // batches still to drop (a resumed epoch)
  int64_t handed_out_ = 0;
  std::vector<std::thread> threads_;
  int64_t threads_started_ = 0; // that have run worker_init_fn
};

} // namespace hotloop::data::detail
