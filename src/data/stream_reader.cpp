#include "hotloop/data/detail/stream_reader.h"

#include "hotloop/core/error.h"
#include "hotloop/data/dataloader.h"

#include <ATen/ATen.h>

#include <utility>

namespace hotloop::data::detail {
namespace {

// A batch part in page-locked memory, so its copy to the GPU is
// asynchronous.
at::Tensor pinned(const at::Tensor& tensor) {
  return tensor.defined() && !tensor.is_pinned() ? tensor.pin_memory() : tensor;
}

std::string reader_name(int64_t worker_id, int64_t num_workers) {
  return num_workers == 0
             ? std::string("the stream")
             : hotloop::detail::str_cat("worker ", worker_id, "'s stream");
}

} // namespace

Batch collated(
    std::vector<Example> samples, const DataLoaderOptions& options, bool pin) {
  Batch batch;
  if (options.collate()) {
    batch = options.collate()(std::move(samples));
  } else {
    // batch_size=None: the sample itself, without a batch dimension.
    TORCH_INTERNAL_ASSERT(samples.size() == 1);
    batch = Batch{
        std::move(samples[0].input),
        std::move(samples[0].target),
        std::move(samples[0].fields)};
  }
  if (pin) {
    batch = transformed(batch, pinned);
  }
  return batch;
}

std::exception_ptr run_worker_init(
    const DataLoaderOptions& options, int64_t worker_id) {
  if (!options.worker_init_fn()) {
    return nullptr;
  }
  try {
    options.worker_init_fn()(worker_id);
    return nullptr;
  } catch (...) {
    return std::make_exception_ptr(DataError(hotloop::detail::str_cat(
        "worker_init_fn failed in worker ",
        worker_id,
        ": ",
        hotloop::detail::message_of(std::current_exception()))));
  }
}

StreamReader::StreamReader(
    std::shared_ptr<const IterableDataset> dataset,
    const DataLoaderOptions& options,
    int64_t prefetch_factor,
    BufferFn buffer,
    bool pin)
    : dataset_(std::move(dataset)),
      options_(options),
      buffer_(std::move(buffer)),
      pin_(pin),
      spec_(dataset_->spec()),
      num_workers_(options.num_workers()),
      prefetch_factor_(prefetch_factor) {}

StreamReader::~StreamReader() {
  stop();
}

std::unique_ptr<SampleStream> StreamReader::open(
    int64_t worker_id, int64_t epoch) const {
  StreamContext context;
  context.worker_id = worker_id;
  context.num_workers = std::max<int64_t>(num_workers_, 1);
  context.seed = options_.seed();
  context.epoch = epoch;
  try {
    std::unique_ptr<SampleStream> stream = dataset_->stream(context);
    HOTLOOP_CHECK(stream != nullptr, "the dataset's stream() gave no stream");
    return stream;
  } catch (...) {
    throw DataError(hotloop::detail::str_cat(
        reader_name(worker_id, num_workers_),
        " of epoch ",
        epoch,
        " could not start: ",
        hotloop::detail::message_of(std::current_exception())));
  }
}

Batch StreamReader::stack(std::vector<Example>& samples) const {
  const auto rows = static_cast<int64_t>(samples.size());
  const bool labelled = samples.front().target.defined();
  Batch batch = batch_buffers(spec_, rows, labelled, buffer_);
  for (int64_t k = 0; k < rows; ++k) {
    const Example& sample = samples[k];
    HOTLOOP_CHECK(
        sample.input.defined() && sample.target.defined() == labelled,
        "sample ",
        k,
        " of the batch has ",
        sample.input.defined() ? "" : "no input and ",
        sample.target.defined() ? "a target" : "no target",
        " but sample 0 has ",
        labelled ? "one" : "none",
        ": a stream's samples must all have targets or none");
    HOTLOOP_CHECK(
        sample.input.scalar_type() == spec_.input_dtype &&
            (!labelled || sample.target.scalar_type() == spec_.target_dtype),
        "sample ",
        k,
        " of the batch has input of ",
        sample.input.scalar_type(),
        labelled ? hotloop::detail::str_cat(
                       " and target of ", sample.target.scalar_type())
                 : std::string(),
        " but the dataset's spec says ",
        spec_.input_dtype,
        labelled ? hotloop::detail::str_cat(" and ", spec_.target_dtype)
                 : std::string());
    const c10::IntArrayRef input_shape(spec_.input_shape);
    const c10::IntArrayRef target_shape(spec_.target_shape);
    HOTLOOP_CHECK(
        sample.input.sizes() == input_shape &&
            (!labelled || sample.target.sizes() == target_shape),
        "sample ",
        k,
        " of the batch has input ",
        sample.input.sizes(),
        labelled
            ? hotloop::detail::str_cat(" and target ", sample.target.sizes())
            : std::string(),
        " but the dataset's spec says ",
        input_shape,
        labelled ? hotloop::detail::str_cat(" and ", target_shape)
                 : std::string());
    batch.input[k].copy_(sample.input);
    if (labelled) {
      batch.target[k].copy_(sample.target);
    }
    write_fields(
        sample,
        batch,
        k,
        /*exact_dtype=*/true,
        hotloop::detail::str_cat("sample ", k, " of the batch"));
  }
  return batch;
}

std::optional<Batch> StreamReader::read_batch(
    SampleStream& stream,
    int64_t worker_id,
    int64_t batch,
    int64_t epoch) const {
  try {
    const int64_t want = options_.batch_size().value_or(1);
    std::vector<Example> samples;
    while (static_cast<int64_t>(samples.size()) < want) {
      std::optional<Example> sample = stream.next();
      if (!sample) {
        break;
      }
      samples.push_back(std::move(*sample));
    }
    if (samples.empty() ||
        (options_.drop_last() && static_cast<int64_t>(samples.size()) < want)) {
      return std::nullopt;
    }
    if (!options_.collate() && options_.batch_size()) {
      return stack(samples);
    }
    return collated(std::move(samples), options_, pin_);
  } catch (...) {
    throw DataError(hotloop::detail::str_cat(
        "batch ",
        batch,
        " of ",
        reader_name(worker_id, num_workers_),
        " (epoch ",
        epoch,
        "): ",
        hotloop::detail::message_of(std::current_exception())));
  }
}

void StreamReader::start(int64_t epoch, int64_t skip) {
  if (num_workers_ == 0) {
    own_stream_.reset();
    epoch_active_ = false;
    own_stream_ = open(0, epoch);
    epoch_ = epoch;
    own_batches_ = 0;
    skip_ = skip;
    epoch_active_ = true;
    return;
  }
  const bool restart = !options_.persistent_workers() || threads_.empty();
  if (restart) {
    stop();
  }
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    ++generation_;
    epoch_ = epoch;
    lanes_.assign(static_cast<size_t>(num_workers_), Lane{});
    cursor_ = 0;
    skip_ = skip;
    handed_out_ = 0;
    epoch_active_ = true;
  }
  if (restart) {
    start_threads();
  }
  work_cv_.notify_all();
}

void StreamReader::start_threads() {
  std::unique_lock<std::mutex> lock(mutex_);
  stop_ = false;
  threads_started_ = 0;
  for (int64_t id = 0; id < num_workers_; ++id) {
    threads_.emplace_back([this, id] { worker_loop(id); });
  }
  // As with map-style data, the epoch starts once every worker has run
  // worker_init_fn.
  ready_cv_.wait(lock, [&] { return threads_started_ == num_workers_; });
}

void StreamReader::stop() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    ++generation_;
  }
  work_cv_.notify_all();
  for (std::thread& thread : threads_) {
    thread.join();
  }
  threads_.clear();
}

void StreamReader::worker_loop(int64_t worker_id) {
  const std::exception_ptr init_error = run_worker_init(options_, worker_id);
  std::unique_lock<std::mutex> lock(mutex_);
  ++threads_started_;
  ready_cv_.notify_all();
  uint64_t served = 0; // the generation whose stream this worker read
  while (true) {
    work_cv_.wait(lock, [&] {
      return stop_ || (epoch_active_ && generation_ != served);
    });
    if (stop_) {
      return;
    }
    served = generation_;
    const int64_t epoch = epoch_;
    lock.unlock();
    std::unique_ptr<SampleStream> stream;
    Item failure;
    if (init_error) {
      failure.error = init_error;
    } else {
      try {
        stream = open(worker_id, epoch);
      } catch (...) {
        failure.error = std::current_exception();
      }
    }
    lock.lock();
    for (int64_t batch = 0; generation_ == served; ++batch) {
      Lane& lane = lanes_[worker_id];
      if (failure.error) {
        lane.ready.push_back(std::move(failure));
        lane.ended = true;
        ready_cv_.notify_all();
        break;
      }
      work_cv_.wait(lock, [&] {
        return stop_ || generation_ != served ||
               static_cast<int64_t>(lanes_[worker_id].ready.size()) <
                   prefetch_factor_;
      });
      if (stop_ || generation_ != served) {
        break;
      }
      lock.unlock();
      Item item;
      bool ended = false;
      try {
        std::optional<Batch> read =
            read_batch(*stream, worker_id, batch, epoch);
        ended = !read;
        if (read) {
          item.batch = std::move(*read);
        }
      } catch (...) {
        item.error = std::current_exception();
        ended = true; // a failed stream is not read again
      }
      lock.lock();
      // A batch of an epoch that start() has since replaced is dropped.
      if (generation_ != served) {
        break;
      }
      Lane& now = lanes_[worker_id];
      if (!ended || item.error) {
        now.ready.push_back(std::move(item));
      }
      now.ended = ended;
      ready_cv_.notify_all();
      if (ended) {
        break;
      }
    }
    // Closing a stream may take time (a file, a socket): not under the lock.
    lock.unlock();
    stream.reset();
    lock.lock();
  }
}

bool StreamReader::next_in_thread(Batch& out) {
  while (epoch_active_) {
    std::optional<Batch> batch;
    try {
      batch = read_batch(*own_stream_, 0, own_batches_++, epoch_);
    } catch (...) {
      // A failed stream is not read again: the epoch ends with the error.
      epoch_active_ = false;
      own_stream_.reset();
      throw;
    }
    if (!batch) {
      epoch_active_ = false;
      own_stream_.reset();
      return false;
    }
    if (skip_ > 0) {
      --skip_;
      continue;
    }
    out = std::move(*batch);
    return true;
  }
  return false;
}

void StreamReader::end_epoch(std::unique_lock<std::mutex>& lock) {
  epoch_active_ = false;
  lock.unlock();
  if (!options_.persistent_workers()) {
    stop();
  }
}

bool StreamReader::next(Batch& out) {
  if (num_workers_ == 0) {
    return next_in_thread(out);
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (!epoch_active_) {
    return false;
  }
  const auto lanes = static_cast<int64_t>(lanes_.size());
  while (true) {
    // The next lane in turn whose stream has not run dry, as PyTorch sends
    // each next index to the next worker still active.
    int64_t turn = cursor_;
    while (!lanes_[turn].active) {
      turn = (turn + 1) % lanes;
      if (turn == cursor_) {
        end_epoch(lock);
        return false;
      }
    }
    Lane& lane = lanes_[turn];
    wait_for_batch(
        ready_cv_,
        lock,
        options_.timeout(),
        [&] { return !lane.ready.empty() || lane.ended; },
        [&] {
          return hotloop::detail::str_cat(
              "batch ", handed_out_, " from ", reader_name(turn, num_workers_));
        });
    cursor_ = (turn + 1) % lanes;
    if (lane.ready.empty()) {
      lane.active = false; // its stream ended
      continue;
    }
    Item item = std::move(lane.ready.front());
    lane.ready.pop_front();
    work_cv_.notify_all();
    if (item.error) {
      std::rethrow_exception(item.error);
    }
    if (skip_ > 0) {
      --skip_;
      continue;
    }
    ++handed_out_;
    out = std::move(item.batch);
    return true;
  }
}

} // namespace hotloop::data::detail
