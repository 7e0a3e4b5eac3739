#include "hotloop/data/dataloader.h"

#include "hotloop/core/error.h"
#include "hotloop/data/detail/batch_buffers.h"
#include "hotloop/data/detail/stream_reader.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

#include <limits>
#include <optional>

namespace hotloop::data {
namespace {

std::vector<int64_t> with_rows(
    int64_t rows, const std::vector<int64_t>& shape) {
  std::vector<int64_t> sizes{rows};
  sizes.insert(sizes.end(), shape.begin(), shape.end());
  return sizes;
}

void check_common_options(const DataLoaderOptions& o) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      o.num_workers() >= 0,
      "num_workers option should be non-negative, got ",
      o.num_workers(),
      "; use num_workers=0 to load in the calling thread");
  HOTLOOP_CHECK_AS(
      ConfigError,
      o.timeout() >= 0,
      "timeout option should be non-negative, got ",
      o.timeout());
  HOTLOOP_CHECK_AS(
      ConfigError,
      !o.prefetch_factor() || o.num_workers() > 0,
      "prefetch_factor option needs num_workers > 0 (it counts batches each "
      "worker prepares ahead)");
  HOTLOOP_CHECK_AS(
      ConfigError,
      !o.prefetch_factor() || *o.prefetch_factor() > 0,
      "prefetch_factor option should be positive, got ",
      o.prefetch_factor().value_or(0));
  HOTLOOP_CHECK_AS(
      ConfigError,
      !o.persistent_workers() || o.num_workers() > 0,
      "persistent_workers option needs num_workers > 0");
}

void check_batch_size(const DataLoaderOptions& o) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      o.batch_size() || !o.drop_last(),
      "batch_size=None option disables auto-batching and is mutually "
      "exclusive with drop_last");
  HOTLOOP_CHECK_AS(
      ConfigError,
      o.batch_size().value_or(1) > 0,
      "batch_size should be a positive integer value, but got batch_size=",
      o.batch_size().value_or(0));
}

} // namespace

DataLoader::DataLoader(
    std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  const auto& o = options_;
  HOTLOOP_CHECK_AS(
      ConfigError, dataset_ != nullptr, "DataLoader needs a dataset");
  check_common_options(o);
  HOTLOOP_CHECK_AS(
      ConfigError,
      !(o.sampler() && o.shuffle()),
      "sampler option is mutually exclusive with shuffle");
  if (o.batch_sampler()) {
    HOTLOOP_CHECK_AS(
        ConfigError,
        o.batch_size() == 1 && !o.shuffle() && !o.sampler() && !o.drop_last(),
        "batch_sampler option is mutually exclusive with batch_size, shuffle, "
        "sampler, and drop_last");
    batch_sampler_ = o.batch_sampler();
  } else {
    check_batch_size(o);
    const int64_t n = dataset_->size();
    std::shared_ptr<const Sampler> sampler = o.sampler();
    if (!sampler) {
      sampler =
          o.shuffle()
              ? std::shared_ptr<const Sampler>(std::make_shared<RandomSampler>(
                    n, /*replacement=*/false, std::nullopt, o.seed()))
              : std::make_shared<SequentialSampler>(n);
    }
    batch_sampler_ = std::make_shared<BatchSampler>(
        std::move(sampler), o.batch_size().value_or(1), o.drop_last());
  }
  spec_ = dataset_->spec();
  set_up_memory();
}

DataLoader::DataLoader(
    std::shared_ptr<const IterableDataset> dataset, DataLoaderOptions options)
    : iterable_(std::move(dataset)), options_(std::move(options)) {
  const auto& o = options_;
  HOTLOOP_CHECK_AS(
      ConfigError, iterable_ != nullptr, "DataLoader needs a dataset");
  check_common_options(o);
  // PyTorch's words: an iterable dataset's order is the streams' own.
  HOTLOOP_CHECK_AS(
      ConfigError,
      !o.shuffle(),
      "DataLoader with IterableDataset: expected unspecified shuffle option, "
      "but got shuffle=True (a stream's order is its own: shuffle inside the "
      "dataset)");
  HOTLOOP_CHECK_AS(
      ConfigError,
      o.sampler() == nullptr,
      "DataLoader with IterableDataset: expected unspecified sampler option");
  HOTLOOP_CHECK_AS(
      ConfigError,
      o.batch_sampler() == nullptr,
      "DataLoader with IterableDataset: expected unspecified batch_sampler "
      "option");
  check_batch_size(o);
  HOTLOOP_CHECK_AS(
      ConfigError,
      iterable_->size().value_or(0) >= 0,
      "the IterableDataset's size() is ",
      iterable_->size().value_or(0),
      ", expected a count of samples or nullopt");
  spec_ = iterable_->spec();
  set_up_memory();
  streams_ = std::make_unique<detail::StreamReader>(
      iterable_, options_, prefetch_factor_, buffer_fn_, pin_);
}

void DataLoader::set_up_memory() {
  buffer_fn_ = [this](
                   int64_t rows,
                   const std::vector<int64_t>& shape,
                   c10::ScalarType dtype) {
    return take_buffer(rows, shape, dtype);
  };
  const auto& o = options_;
  prefetch_factor_ = o.prefetch_factor().value_or(2);
  pin_ = o.pin_memory() && at::hasCUDA();
  accelerator_ = o.device() && !o.device()->is_cpu();
  if (accelerator_) {
    // "cuda" means the first device, as torch.device("cuda") does for copies.
    const c10::Device device(
        o.device()->type(), o.device()->has_index() ? o.device()->index() : 0);
    device_ = device;
    int64_t devices = 0;
    try {
      const c10::impl::VirtualGuardImpl guard(device.type());
      devices = guard.deviceCount();
      if (devices > device.index()) {
        copy_stream_ = guard.getStreamFromGlobalPool(device);
      }
    } catch (const c10::Error&) {
      // This LibTorch was built without support for the device type.
    }
    HOTLOOP_CHECK_AS(
        ConfigError,
        copy_stream_.has_value(),
        "device option ",
        device,
        ": not available (this LibTorch sees ",
        devices,
        " ",
        c10::DeviceTypeName(device.type(), /*lower_case=*/true),
        " devices)");
  }
  if (o.pin_memory() && !pin_) {
    TORCH_WARN_ONCE(
        "pin_memory is set but this LibTorch has no CUDA; batches stay in "
        "pageable memory");
  }
}

DataLoader::~DataLoader() {
  streams_.reset();
  stop_workers();
}

void DataLoader::start_workers() {
  std::unique_lock<std::mutex> lock(mutex_);
  stop_ = false;
  workers_started_ = 0;
  for (int64_t id = 0; id < options_.num_workers(); ++id) {
    workers_.emplace_back([this, id] { worker_loop(id); });
  }
  // As PyTorch's workers have run worker_init_fn before they load anything,
  // the epoch starts once every worker has run it.
  ready_cv_.wait(
      lock, [&] { return workers_started_ == options_.num_workers(); });
}

void DataLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    ++generation_; // batches still being built are dropped
  }
  work_cv_.notify_all();
  for (auto& worker : workers_) {
    worker.join();
  }
  workers_.clear();
}

int64_t DataLoader::num_batches() const {
  const std::optional<int64_t> batches = length();
  HOTLOOP_CHECK_AS(
      ConfigError,
      batches.has_value(),
      "the loader's IterableDataset does not know its size, so neither does "
      "the loader its number of batches (give the dataset a size())");
  return *batches;
}

std::optional<int64_t> DataLoader::length() const {
  if (!iterable_) {
    return batch_sampler_->size();
  }
  const std::optional<int64_t> samples = iterable_->size();
  if (!samples || !options_.batch_size()) {
    return samples;
  }
  const int64_t batch_size = *options_.batch_size();
  return options_.drop_last() ? *samples / batch_size
                              : (*samples + batch_size - 1) / batch_size;
}

std::optional<int64_t> DataLoader::dataset_size() const {
  return iterable_ ? iterable_->size() : std::optional(dataset_->size());
}

const Dataset& DataLoader::dataset() const {
  HOTLOOP_CHECK_AS(
      ConfigError,
      dataset_ != nullptr,
      "the loader reads an IterableDataset: it has no samples by index");
  return *dataset_;
}

void DataLoader::set_epoch(int64_t epoch) {
  next_epoch_ = epoch;
  start_position_ = 0;
}

DataLoaderState DataLoader::state_dict() const {
  if (epoch_active_) {
    // A batch copying to the accelerator has not been handed out yet.
    return {epoch_, next_to_consume_ - (in_flight_ ? 1 : 0)};
  }
  return {next_epoch_, start_position_};
}

void DataLoader::load_state_dict(const DataLoaderState& state) {
  // A stream may give more batches than its dataset's size() says.
  const int64_t most =
      iterable_ ? std::numeric_limits<int64_t>::max() : num_batches();
  HOTLOOP_CHECK_AS(
      ConfigError,
      state.batches_consumed >= 0 && state.batches_consumed <= most,
      "loader state says ",
      state.batches_consumed,
      " batches of epoch ",
      state.epoch,
      " were consumed, but an epoch has ",
      iterable_ ? std::string("at least 0") : std::to_string(num_batches()));
  next_epoch_ = state.epoch;
  start_position_ = state.batches_consumed;
}

DataLoader::Iterator DataLoader::begin() {
  start_epoch();
  return Iterator(this);
}

DataLoader::Iterator DataLoader::end() {
  return Iterator(nullptr);
}

void DataLoader::start_epoch() {
  if (streams_) {
    in_flight_.reset();
    epoch_active_ = false;
    streams_->start(next_epoch_, start_position_);
    epoch_ = next_epoch_++;
    next_to_consume_ = start_position_;
    start_position_ = 0;
    epoch_active_ = true;
    return;
  }
  auto batches = std::make_shared<const IndexBatches>(
      batch_sampler_->batches(next_epoch_));
  if (options_.batch_sampler()) { // the built-in one counts right
    detail::check_batches(*batches, batch_sampler_->size(), next_epoch_);
  }
  const bool restart_workers =
      !options_.persistent_workers() || workers_.empty();
  if (restart_workers) {
    stop_workers();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++generation_;
    epoch_ = next_epoch_++;
    batches_ = std::move(batches);
    next_to_schedule_ = start_position_;
    next_to_consume_ = start_position_;
    start_position_ = 0;
    ready_.clear();
    epoch_active_ = true;
  }
  in_flight_.reset(); // a copy of the abandoned epoch's next batch
  if (restart_workers && options_.num_workers() > 0) {
    start_workers();
  }
  work_cv_.notify_all();
}

at::Tensor DataLoader::take_buffer(
    int64_t rows, const std::vector<int64_t>& shape, c10::ScalarType dtype) {
  const std::vector<int64_t> sizes = with_rows(rows, shape);
  if (pin_) {
    // LibTorch's caching host allocator reuses pinned blocks and knows when
    // an asynchronous copy from one has finished; pooling them here would not.
    return at::empty(
        sizes, at::TensorOptions().dtype(dtype).pinned_memory(true));
  }
  // Enough for every batch in flight (input, target and fields each) plus
  // the few the caller typically still holds; buffers the caller keeps
  // longer are forgotten rather than waited for.
  const size_t capacity =
      (2 + spec_.fields.size()) *
      static_cast<size_t>(options_.num_workers() * prefetch_factor_ + 3);
  std::lock_guard<std::mutex> lock(pool_mutex_);
  for (const at::Tensor& buffer : pool_) {
    // Free when the pool holds the only reference to the tensor and its
    // storage (no batch, view or alias left with the caller).
    if (buffer.use_count() == 1 && buffer.storage().use_count() == 1 &&
        buffer.scalar_type() == dtype && buffer.sizes() == sizes) {
      return buffer;
    }
  }
  // A pooled buffer outlives the caller's mode: made under the consumer's
  // InferenceMode (evaluation with 0 workers) it would be an inference
  // tensor, unusable by autograd when training reuses it.
  const c10::InferenceMode normal_tensors(/*enabled=*/false);
  at::Tensor buffer = at::empty(sizes, at::TensorOptions().dtype(dtype));
  if (pool_.size() >= capacity) {
    pool_.erase(pool_.begin()); // the oldest, still held by the caller
  }
  pool_.push_back(buffer);
  return buffer;
}

Batch DataLoader::collate(
    const std::vector<int64_t>& indices, int64_t epoch) const {
  const SampleContext context{options_.seed(), epoch};
  std::vector<Example> samples;
  samples.reserve(indices.size());
  for (int64_t index : indices) {
    samples.push_back(dataset_->get(index, context));
  }
  return detail::collated(std::move(samples), options_, pin_);
}

Batch DataLoader::make_batch(
    const std::vector<int64_t>& indices, int64_t epoch, int64_t batch_index) {
  const int64_t n = dataset_->size();
  for (int64_t index : indices) {
    HOTLOOP_CHECK_AS(
        DataError,
        index >= 0 && index < n,
        "the sampler gave index ",
        index,
        " for a dataset of ",
        n,
        " samples");
  }
  try {
    if (options_.collate() ||
        (!options_.batch_size() && !options_.batch_sampler())) {
      return collate(indices, epoch);
    }
    Batch batch = detail::batch_buffers(
        spec_,
        static_cast<int64_t>(indices.size()),
        /*labelled=*/true,
        buffer_fn_);
    dataset_->get_batch(indices, SampleContext{options_.seed(), epoch}, batch);
    return batch;
  } catch (...) {
    const std::exception_ptr error = std::current_exception();
    // Find the sample at fault: the batched path does not say which it was.
    for (int64_t index : indices) {
      try {
        dataset_->get(index, SampleContext{options_.seed(), epoch});
      } catch (...) {
        throw DataError(hotloop::detail::str_cat(
            "sample ",
            index,
            " (batch ",
            batch_index,
            " of epoch ",
            epoch,
            "): ",
            hotloop::detail::message_of(std::current_exception())));
      }
    }
    throw DataError(hotloop::detail::str_cat(
        "batch ",
        batch_index,
        " of epoch ",
        epoch,
        ": ",
        hotloop::detail::message_of(error)));
  }
}

void DataLoader::start_copy(Batch batch) {
  const c10::Device device = device_;
  const c10::StreamGuard on_copy_stream(*copy_stream_);
  // From pinned memory these copies are asynchronous: they overlap the
  // consumer's work on its own stream.
  Batch copied = transformed(batch, [device](const at::Tensor& tensor) {
    return tensor.to(device, /*non_blocking=*/true);
  });
  c10::Event done(device.type());
  done.record(*copy_stream_);
  in_flight_.emplace(InFlight{std::move(copied), std::move(done)});
}

void DataLoader::worker_loop(int64_t worker_id) {
  const std::exception_ptr init_error =
      detail::run_worker_init(options_, worker_id);
  const int64_t capacity = options_.num_workers() * prefetch_factor_;
  std::unique_lock<std::mutex> lock(mutex_);
  ++workers_started_;
  ready_cv_.notify_all();
  while (true) {
    work_cv_.wait(lock, [&] {
      return stop_ ||
             (next_to_schedule_ < static_cast<int64_t>(batches_->size()) &&
              next_to_schedule_ < next_to_consume_ + capacity);
    });
    if (stop_) {
      return;
    }
    const int64_t index = next_to_schedule_++;
    const uint64_t generation = generation_;
    const auto batches = batches_;
    const int64_t epoch = epoch_;
    lock.unlock();
    Ready ready;
    if (init_error) {
      ready.error = init_error;
    } else {
      try {
        ready.batch = make_batch((*batches)[index], epoch, index);
      } catch (...) {
        ready.error = std::current_exception();
      }
    }
    lock.lock();
    // A batch of an epoch that start_epoch has since replaced is dropped.
    if (generation == generation_) {
      ready_.emplace(index, std::move(ready));
      ready_cv_.notify_all();
    }
  }
}

bool DataLoader::next_host(Batch& out) {
  if (!epoch_active_) {
    return false;
  }
  if (streams_) {
    if (!streams_->next(out)) {
      epoch_active_ = false;
      return false;
    }
    ++next_to_consume_;
    return true;
  }
  if (next_to_consume_ >= static_cast<int64_t>(batches_->size())) {
    epoch_active_ = false;
    if (!options_.persistent_workers()) {
      stop_workers();
    }
    return false;
  }
  if (workers_.empty()) {
    const int64_t index = next_to_consume_++;
    out = make_batch((*batches_)[index], epoch_, index);
    return true;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  const int64_t index = next_to_consume_;
  detail::wait_for_batch(
      ready_cv_,
      lock,
      options_.timeout(),
      [&] { return ready_.count(index) > 0; },
      [&] { return hotloop::detail::str_cat("batch ", index); });
  auto node = ready_.extract(index);
  ++next_to_consume_;
  lock.unlock();
  work_cv_.notify_all();
  if (node.mapped().error) {
    std::rethrow_exception(node.mapped().error);
  }
  out = std::move(node.mapped().batch);
  return true;
}

bool DataLoader::next(Batch& out) {
  if (!options_.device()) {
    return next_host(out);
  }
  if (!accelerator_) {
    if (!next_host(out)) {
      return false;
    }
    const c10::Device device = *options_.device();
    out = transformed(
        out, [device](const at::Tensor& tensor) { return tensor.to(device); });
    return true;
  }
  Batch host;
  if (!in_flight_) {
    if (!next_host(host)) {
      return false;
    }
    start_copy(std::move(host));
  }
  InFlight ready = std::move(*in_flight_);
  in_flight_.reset();
  // The consumer's stream waits for the copy; the caching allocator learns
  // that the tensors are used there, so their memory is not reused early.
  const c10::impl::VirtualGuardImpl guard(device_.type());
  const c10::Stream consumer = guard.getStream(device_);
  ready.done.block(consumer);
  for_each_tensor(ready.batch, [&](const at::Tensor& tensor) {
    at::Tensor(tensor).record_stream(consumer);
  });
  out = std::move(ready.batch);
  // Start the next copy now, so it runs while the caller uses this batch.
  if (next_host(host)) {
    start_copy(std::move(host));
  }
  return true;
}

DataLoader::Iterator::Iterator(DataLoader* loader) : loader_(loader) {
  if (loader_ != nullptr) {
    ++*this;
  }
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  if (!loader_->next(batch_)) {
    loader_ = nullptr;
    batch_ = Batch{};
  }
  return *this;
}

} // namespace hotloop::data

namespace hotloop::data {

namespace {

// The (rank, num_replicas) of a sampler that already is one rank's share,
// as a user who split the data by hand passes it.
std::optional<std::pair<int64_t, int64_t>> share_taken(const Sampler* sampler) {
  if (const auto* s = dynamic_cast<const DistributedSampler*>(sampler)) {
    return std::make_pair(s->rank(), s->num_replicas());
  }
  if (const auto* s = dynamic_cast<const ShardSampler*>(sampler)) {
    return std::make_pair(s->rank(), s->num_replicas());
  }
  if (const auto* s = dynamic_cast<const DistributedSamplerWrapper*>(sampler)) {
    return std::make_pair(s->rank(), s->num_replicas());
  }
  return std::nullopt;
}

std::optional<std::pair<int64_t, int64_t>> share_taken(
    const BatchSamplerBase* batch_sampler) {
  if (const auto* s =
          dynamic_cast<const DistributedBatchSampler*>(batch_sampler)) {
    return std::make_pair(s->rank(), s->num_replicas());
  }
  if (const auto* s = dynamic_cast<const BatchSampler*>(batch_sampler)) {
    return share_taken(&s->sampler());
  }
  return std::nullopt;
}

// An IterableDataset as process `rank` of `num_replicas` reads it: its
// streams are told the process (StreamContext::rank, world_size), which
// splits the samples as the dataset does; it counts its share of them.
class ProcessStreams final : public IterableDataset {
 public:
  ProcessStreams(
      std::shared_ptr<const IterableDataset> dataset,
      int64_t num_replicas,
      int64_t rank)
      : dataset_(std::move(dataset)), num_replicas_(num_replicas), rank_(rank) {
    HOTLOOP_CHECK_AS(
        ConfigError,
        num_replicas > 0 && rank >= 0 && rank < num_replicas,
        "a data-parallel share needs 0 <= rank < num_replicas, got rank ",
        rank,
        " of ",
        num_replicas);
  }

  SampleSpec spec() const override {
    return dataset_->spec();
  }

  std::unique_ptr<SampleStream> stream(
      const StreamContext& context) const override {
    StreamContext ours = context;
    ours.rank = rank_;
    ours.world_size = num_replicas_;
    return dataset_->stream(ours);
  }

  std::optional<int64_t> size() const override {
    const std::optional<int64_t> all = dataset_->size();
    if (!all) {
      return std::nullopt;
    }
    return (*all + num_replicas_ - 1) / num_replicas_;
  }

  bool splits_by_process() const override {
    return true;
  }

  /// (rank, num_replicas), as share_taken gives a sampler's.
  std::pair<int64_t, int64_t> taken() const {
    return {rank_, num_replicas_};
  }

 private:
  std::shared_ptr<const IterableDataset> dataset_;
  int64_t num_replicas_;
  int64_t rank_;
};

// Whether the loader's own sampler is this process's share already; throws
// when it is another process's share.
bool is_share_of(
    const std::optional<std::pair<int64_t, int64_t>>& taken,
    const char* what,
    int64_t num_replicas,
    int64_t rank) {
  if (!taken) {
    return false;
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      *taken == std::make_pair(rank, num_replicas),
      "the loader's ",
      what,
      " is the share of rank ",
      taken->first,
      " of ",
      taken->second,
      ", but this process is rank ",
      rank,
      " of ",
      num_replicas,
      ": give the loader the whole data's sampler (each process takes its "
      "share of it), or build its share with this process's rank and "
      "world size");
  return true;
}

} // namespace

bool is_share(const DataLoader& loader) {
  const DataLoaderOptions& options = loader.options();
  if (loader.iterable()) {
    return dynamic_cast<const ProcessStreams*>(
               loader.iterable_dataset_ptr().get()) != nullptr;
  }
  if (options.batch_sampler()) {
    return share_taken(options.batch_sampler().get()).has_value();
  }
  return options.sampler() && share_taken(options.sampler().get());
}

std::unique_ptr<DataLoader> shard(
    const DataLoader& loader,
    int64_t num_replicas,
    int64_t rank,
    bool training) {
  DataLoaderOptions options = loader.options();
  if (loader.iterable()) {
    const std::shared_ptr<const IterableDataset>& dataset =
        loader.iterable_dataset_ptr();
    if (const auto* share = dynamic_cast<const ProcessStreams*>(dataset.get());
        share != nullptr &&
        is_share_of(share->taken(), "dataset", num_replicas, rank)) {
      return std::make_unique<DataLoader>(dataset, std::move(options));
    }
    HOTLOOP_CHECK_AS(
        ConfigError,
        dataset->splits_by_process(),
        "the loader's IterableDataset does not split its samples among the ",
        num_replicas,
        " processes of a data-parallel run, so each would read them all: "
        "make its streams read only their share (StreamContext::reader() of "
        "readers(), which counts every process's workers) and say so with "
        "splits_by_process() { return true; }, or run one process");
    return std::make_unique<DataLoader>(
        std::make_shared<ProcessStreams>(dataset, num_replicas, rank),
        std::move(options));
  }
  if (const auto& batch_sampler = options.batch_sampler()) {
    if (!is_share_of(
            share_taken(batch_sampler.get()),
            "batch_sampler",
            num_replicas,
            rank)) {
      options.batch_sampler(std::make_shared<DistributedBatchSampler>(
          batch_sampler, num_replicas, rank, /*pad=*/training));
    }
  } else if (const auto& sampler = options.sampler()) {
    if (!is_share_of(
            share_taken(sampler.get()), "sampler", num_replicas, rank)) {
      options.sampler(std::make_shared<DistributedSamplerWrapper>(
          sampler, num_replicas, rank, /*pad=*/training));
    }
  } else {
    const int64_t n = loader.dataset().size();
    std::shared_ptr<const Sampler> share;
    if (training) {
      share = std::make_shared<DistributedSampler>(
          n, num_replicas, rank, options.shuffle(), options.seed());
    } else {
      share = std::make_shared<ShardSampler>(n, num_replicas, rank);
    }
    options.shuffle(false).sampler(std::move(share));
  }
  return std::make_unique<DataLoader>(loader.dataset_ptr(), std::move(options));
}

} // namespace hotloop::data
