#include "hotloop/data/dataloader.h"

#include "hotloop/core/error.h"
#include "hotloop/data/random.h"

#include <ATen/ATen.h>

#include <numeric>

namespace hotloop::data {

DataLoader::DataLoader(
    std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  HOTLOOP_CHECK_AS(
      ConfigError, dataset_ != nullptr, "DataLoader needs a dataset");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.batch_size() > 0,
      "batch_size must be positive, got ",
      options_.batch_size());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.num_workers() >= 0,
      "num_workers must be >= 0, got ",
      options_.num_workers());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.prefetch_factor() > 0,
      "prefetch_factor must be positive, got ",
      options_.prefetch_factor());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.timeout() >= 0,
      "timeout must be >= 0, got ",
      options_.timeout());
  spec_ = dataset_->spec();
  for (int64_t i = 0; i < options_.num_workers(); ++i) {
    workers_.emplace_back([this] { worker_loop(); });
  }
}

DataLoader::~DataLoader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& worker : workers_) {
    worker.join();
  }
}

int64_t DataLoader::num_batches() const {
  const int64_t n = dataset_->size();
  return options_.drop_last()
             ? n / options_.batch_size()
             : (n + options_.batch_size() - 1) / options_.batch_size();
}

DataLoader::Iterator DataLoader::begin() {
  start_epoch();
  return Iterator(this);
}

DataLoader::Iterator DataLoader::end() {
  return Iterator(nullptr);
}

void DataLoader::start_epoch() {
  const int64_t n = dataset_->size();
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  if (options_.shuffle()) {
    // Fisher-Yates from a stream seeded by (seed, epoch) alone.
    SampleRng rng(SampleRng::mix(options_.seed(), next_epoch_, ~0ull));
    for (int64_t i = n - 1; i > 0; --i) {
      std::swap(order[i], order[rng.below(static_cast<uint64_t>(i) + 1)]);
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++generation_;
    epoch_ = next_epoch_++;
    order_ = std::make_shared<const std::vector<int64_t>>(std::move(order));
    batches_ = num_batches();
    next_to_schedule_ = 0;
    next_to_consume_ = 0;
    ready_.clear();
  }
  work_cv_.notify_all();
}

Batch DataLoader::make_batch(
    const std::vector<int64_t>& order,
    int64_t epoch,
    int64_t batch_index) const {
  const int64_t begin = batch_index * options_.batch_size();
  const int64_t count = std::min<int64_t>(
      options_.batch_size(), static_cast<int64_t>(order.size()) - begin);
  std::vector<int64_t> input_shape{count};
  input_shape.insert(
      input_shape.end(), spec_.input_shape.begin(), spec_.input_shape.end());
  std::vector<int64_t> target_shape{count};
  target_shape.insert(
      target_shape.end(), spec_.target_shape.begin(), spec_.target_shape.end());
  Batch batch{
      at::empty(input_shape, at::TensorOptions().dtype(spec_.input_dtype)),
      at::empty(target_shape, at::TensorOptions().dtype(spec_.target_dtype))};
  dataset_->get_batch(
      c10::ArrayRef<int64_t>(order.data() + begin, count),
      SampleContext{options_.seed(), epoch},
      batch);
  return batch;
}

void DataLoader::worker_loop() {
  const int64_t capacity = options_.num_workers() * options_.prefetch_factor();
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    work_cv_.wait(lock, [&] {
      return stop_ || (next_to_schedule_ < batches_ &&
                       next_to_schedule_ < next_to_consume_ + capacity);
    });
    if (stop_) {
      return;
    }
    const int64_t index = next_to_schedule_++;
    const uint64_t generation = generation_;
    const auto order = order_;
    const int64_t epoch = epoch_;
    lock.unlock();
    Ready ready;
    try {
      ready.batch = make_batch(*order, epoch, index);
    } catch (...) {
      ready.error = std::current_exception();
    }
    lock.lock();
    // A batch of an epoch that start_epoch has since replaced is dropped.
    if (generation == generation_) {
      ready_.emplace(index, std::move(ready));
      ready_cv_.notify_all();
    }
  }
}

bool DataLoader::next(Batch& out) {
  if (workers_.empty()) {
    if (next_to_consume_ >= batches_) {
      return false;
    }
    out = make_batch(*order_, epoch_, next_to_consume_++);
    return true;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (next_to_consume_ >= batches_) {
    return false;
  }
  const int64_t index = next_to_consume_;
  auto is_ready = [&] { return ready_.count(index) > 0; };
  if (options_.timeout() > 0) {
    const auto limit = std::chrono::duration<double>(options_.timeout());
    HOTLOOP_CHECK(
        ready_cv_.wait_for(lock, limit, is_ready),
        "DataLoader timed out after ",
        options_.timeout(),
        " s waiting for batch ",
        index,
        " (data.timeout)");
  } else {
    ready_cv_.wait(lock, is_ready);
  }
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
