#include "hotloop/data/sampler.h"

#include "hotloop/core/error.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

namespace hotloop::data {
namespace {

// A fresh generator for one epoch, as PyTorch's
// `torch.Generator().manual_seed(seed + epoch)`: Python wraps a negative
// seed modulo 2^64 too.
at::Generator epoch_generator(uint64_t seed, int64_t epoch) {
  return at::make_generator<at::CPUGeneratorImpl>(
      seed + static_cast<uint64_t>(epoch));
}

void append(std::vector<int64_t>& out, const at::Tensor& values) {
  const at::Tensor contiguous = values.to(at::kLong).contiguous();
  const int64_t* data = contiguous.data_ptr<int64_t>();
  out.insert(out.end(), data, data + contiguous.numel());
}

// ceil(a / b) for a >= 0, b > 0, without overflow.
int64_t ceil_div(int64_t a, int64_t b) {
  return a / b + (a % b != 0 ? 1 : 0);
}

void check_size(int64_t n) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      n >= 0,
      "n should be a non-negative integer value, but got n=",
      n);
}

void check_num_samples(int64_t num_samples) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      num_samples > 0,
      "num_samples should be a positive integer value, but got num_samples=",
      num_samples);
}

void check_rank(const char* what, int64_t num_replicas, int64_t rank) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      num_replicas > 0 && rank >= 0 && rank < num_replicas,
      what,
      ": expected 0 <= rank < num_replicas, got rank ",
      rank,
      " of ",
      num_replicas);
}

// How many of `total` items rank `rank` of `num_replicas` takes: positions
// rank, rank + num_replicas, ... of the list, padded (continued from its
// start) to a multiple of num_replicas when `pad`.
int64_t share_size(
    int64_t total, int64_t num_replicas, int64_t rank, bool pad) {
  if (pad) {
    return ceil_div(total, num_replicas);
  }
  return total > rank ? ceil_div(total - rank, num_replicas) : 0;
}

// Rank `rank`'s share of `items` (share_size of them); position p of the
// padded list is items[p % size], so an item may be taken twice.
template <typename T>
std::vector<T> take_share(
    const std::vector<T>& items, int64_t num_replicas, int64_t rank, bool pad) {
  const int64_t total = static_cast<int64_t>(items.size());
  const int64_t count = share_size(total, num_replicas, rank, pad);
  std::vector<T> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k) {
    out.push_back(
        items[static_cast<size_t>((rank + k * num_replicas) % total)]);
  }
  return out;
}

} // namespace

namespace detail {

void check_batches(
    const std::vector<std::vector<int64_t>>& batches,
    int64_t size,
    int64_t epoch) {
  HOTLOOP_CHECK_AS(
      DataError,
      static_cast<int64_t>(batches.size()) == size,
      "the batch sampler gave ",
      batches.size(),
      " batches for epoch ",
      epoch,
      " but its size() is ",
      size,
      "; the loader's length comes from size()");
  for (size_t k = 0; k < batches.size(); ++k) {
    HOTLOOP_CHECK_AS(
        DataError,
        !batches[k].empty(),
        "the batch sampler's batch ",
        k,
        " of epoch ",
        epoch,
        " is empty; every batch needs at least one sample index");
  }
}

} // namespace detail

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  check_size(n);
}

std::vector<int64_t> SequentialSampler::indices(int64_t /*epoch*/) const {
  std::vector<int64_t> out(static_cast<size_t>(n_));
  std::iota(out.begin(), out.end(), int64_t{0});
  return out;
}

int64_t SequentialSampler::size() const {
  return n_;
}

RandomSampler::RandomSampler(
    int64_t n,
    bool replacement,
    std::optional<int64_t> num_samples,
    uint64_t seed)
    : n_(n),
      replacement_(replacement),
      num_samples_(num_samples.value_or(n)),
      seed_(seed) {
  check_size(n);
  check_num_samples(num_samples_);
  HOTLOOP_CHECK_AS(
      ConfigError,
      n > 0,
      "cannot draw num_samples=",
      num_samples_,
      " samples from an empty data source (n=0)");
}

std::vector<int64_t> RandomSampler::indices(int64_t epoch) const {
  at::Generator generator = epoch_generator(seed_, epoch);
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(num_samples_));
  // The chunking decides how the generator's stream is consumed: keep it as
  // in PyTorch's `RandomSampler.__iter__`.
  if (replacement_) {
    constexpr int64_t kChunk = 32;
    for (int64_t i = 0; i < num_samples_ / kChunk; ++i) {
      append(out, at::randint(n_, {kChunk}, generator, at::kLong));
    }
    append(out, at::randint(n_, {num_samples_ % kChunk}, generator, at::kLong));
  } else {
    for (int64_t i = 0; i < num_samples_ / n_; ++i) {
      append(out, at::randperm(n_, generator, at::kLong));
    }
    append(
        out,
        at::randperm(n_, generator, at::kLong).slice(0, 0, num_samples_ % n_));
  }
  return out;
}

int64_t RandomSampler::size() const {
  return num_samples_;
}

SubsetRandomSampler::SubsetRandomSampler(
    std::vector<int64_t> indices, uint64_t seed)
    : subset_(std::move(indices)), seed_(seed) {}

std::vector<int64_t> SubsetRandomSampler::indices(int64_t epoch) const {
  at::Generator generator = epoch_generator(seed_, epoch);
  const at::Tensor order =
      at::randperm(static_cast<int64_t>(subset_.size()), generator, at::kLong);
  const int64_t* positions = order.data_ptr<int64_t>();
  std::vector<int64_t> out(subset_.size());
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = subset_[static_cast<size_t>(positions[i])];
  }
  return out;
}

int64_t SubsetRandomSampler::size() const {
  return static_cast<int64_t>(subset_.size());
}

WeightedRandomSampler::WeightedRandomSampler(
    std::vector<double> weights,
    int64_t num_samples,
    bool replacement,
    uint64_t seed)
    : weights_(std::move(weights)),
      num_samples_(num_samples),
      replacement_(replacement),
      seed_(seed) {
  check_num_samples(num_samples);
  double sum = 0;
  for (size_t i = 0; i < weights_.size(); ++i) {
    HOTLOOP_CHECK_AS(
        ConfigError,
        std::isfinite(weights_[i]) && weights_[i] >= 0,
        "weights should be non-negative and finite, but got weights[",
        i,
        "]=",
        weights_[i]);
    sum += weights_[i];
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      sum > 0 && std::isfinite(sum),
      "weights should have a positive, finite sum, but got sum=",
      sum);
  HOTLOOP_CHECK_AS(
      ConfigError,
      replacement || num_samples <= static_cast<int64_t>(weights_.size()),
      "cannot draw num_samples=",
      num_samples,
      " samples without replacement from ",
      weights_.size(),
      " weights");
}

std::vector<int64_t> WeightedRandomSampler::indices(int64_t epoch) const {
  at::Generator generator = epoch_generator(seed_, epoch);
  // from_blob does not copy; multinomial only reads the weights.
  const at::Tensor weights = at::from_blob(
      const_cast<double*>(weights_.data()),
      {static_cast<int64_t>(weights_.size())},
      at::kDouble);
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(num_samples_));
  append(out, at::multinomial(weights, num_samples_, replacement_, generator));
  return out;
}

int64_t WeightedRandomSampler::size() const {
  return num_samples_;
}

ShardSampler::ShardSampler(int64_t n, int64_t num_replicas, int64_t rank)
    : n_(n), num_replicas_(num_replicas), rank_(rank) {
  check_size(n);
  HOTLOOP_CHECK_AS(
      ConfigError,
      num_replicas > 0 && rank >= 0 && rank < num_replicas,
      "ShardSampler: expected 0 <= rank < num_replicas, got rank ",
      rank,
      " of ",
      num_replicas);
}

std::vector<int64_t> ShardSampler::indices(int64_t /*epoch*/) const {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(size()));
  for (int64_t i = rank_; i < n_; i += num_replicas_) {
    out.push_back(i);
  }
  return out;
}

int64_t ShardSampler::size() const {
  return n_ > rank_ ? (n_ - rank_ + num_replicas_ - 1) / num_replicas_ : 0;
}

DistributedSampler::DistributedSampler(
    int64_t n,
    int64_t num_replicas,
    int64_t rank,
    bool shuffle,
    uint64_t seed,
    bool drop_last)
    : n_(n),
      num_replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed) {
  check_size(n);
  HOTLOOP_CHECK_AS(
      ConfigError,
      num_replicas > 0,
      "num_replicas should be a positive integer value, but got "
      "num_replicas=",
      num_replicas);
  HOTLOOP_CHECK_AS(
      ConfigError,
      rank >= 0 && rank < num_replicas,
      "Invalid rank ",
      rank,
      ", rank should be in the interval [0, ",
      num_replicas - 1,
      "]");
  // PyTorch: ceil((n - num_replicas) / num_replicas) when dropping an uneven
  // tail, else ceil(n / num_replicas); the first is floor(n / num_replicas)
  // for n >= 0.
  num_samples_ = drop_last && n % num_replicas != 0 ? n / num_replicas
                                                    : ceil_div(n, num_replicas);
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(n_));
  if (shuffle_) {
    append(order, at::randperm(n_, epoch_generator(seed_, epoch), at::kLong));
  } else {
    order.resize(static_cast<size_t>(n_));
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  // Position p of the padded list is order[p % n]; with drop_last every
  // position taken is below n. n == 0 implies num_samples_ == 0.
  std::vector<int64_t> out(static_cast<size_t>(num_samples_));
  for (int64_t k = 0; k < num_samples_; ++k) {
    out[static_cast<size_t>(k)] =
        order[static_cast<size_t>((rank_ + k * num_replicas_) % n_)];
  }
  return out;
}

int64_t DistributedSampler::size() const {
  return num_samples_;
}

int64_t DistributedSampler::total_size() const {
  return num_samples_ * num_replicas_;
}

DistributedSamplerWrapper::DistributedSamplerWrapper(
    std::shared_ptr<const Sampler> sampler,
    int64_t num_replicas,
    int64_t rank,
    bool pad)
    : sampler_(std::move(sampler)),
      num_replicas_(num_replicas),
      rank_(rank),
      pad_(pad) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      sampler_ != nullptr,
      "DistributedSamplerWrapper: expected a sampler, got a null pointer");
  check_rank("DistributedSamplerWrapper", num_replicas, rank);
}

std::vector<int64_t> DistributedSamplerWrapper::indices(int64_t epoch) const {
  return take_share(sampler_->indices(epoch), num_replicas_, rank_, pad_);
}

int64_t DistributedSamplerWrapper::size() const {
  return share_size(sampler_->size(), num_replicas_, rank_, pad_);
}

LengthGroupedSampler::LengthGroupedSampler(
    std::vector<int64_t> lengths,
    int64_t batch_size,
    uint64_t seed,
    std::optional<int64_t> mega_batch_mult)
    : lengths_(std::move(lengths)), megabatch_size_(0), seed_(seed) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      batch_size > 0,
      "LengthGroupedSampler: batch_size should be a positive integer value, "
      "but got batch_size=",
      batch_size);
  HOTLOOP_CHECK_AS(
      ConfigError,
      !mega_batch_mult || *mega_batch_mult > 0,
      "LengthGroupedSampler: mega_batch_mult should be positive, got ",
      mega_batch_mult.value_or(0));
  for (size_t i = 0; i < lengths_.size(); ++i) {
    HOTLOOP_CHECK_AS(
        ConfigError,
        lengths_[i] >= 0,
        "LengthGroupedSampler: lengths[",
        i,
        "] is ",
        lengths_[i],
        ", expected a length >= 0");
  }
  const auto n = static_cast<int64_t>(lengths_.size());
  const int64_t mult = mega_batch_mult.value_or(
      std::max<int64_t>(std::min<int64_t>(n / batch_size / 4, 50), 1));
  HOTLOOP_CHECK_AS(
      ConfigError,
      mult <= std::numeric_limits<int64_t>::max() / batch_size,
      "LengthGroupedSampler: mega_batch_mult=",
      mult,
      " times batch_size=",
      batch_size,
      " overflows");
  megabatch_size_ = mult * batch_size;
}

std::vector<int64_t> LengthGroupedSampler::indices(int64_t epoch) const {
  const auto n = static_cast<int64_t>(lengths_.size());
  std::vector<int64_t> out;
  out.reserve(lengths_.size());
  append(out, at::randperm(n, epoch_generator(seed_, epoch), at::kLong));
  if (n == 0) {
    return out;
  }
  auto longer = [&](int64_t a, int64_t b) {
    return lengths_[static_cast<size_t>(a)] > lengths_[static_cast<size_t>(b)];
  };
  int64_t longest = 0; // the start of the megabatch with the longest sample
  for (int64_t start = 0; start < n; start += megabatch_size_) {
    const auto first = out.begin() + start;
    std::stable_sort(
        first, out.begin() + std::min(n, start + megabatch_size_), longer);
    if (longer(*first, out[static_cast<size_t>(longest)])) {
      longest = start;
    }
  }
  std::swap(out.front(), out[static_cast<size_t>(longest)]);
  return out;
}

int64_t LengthGroupedSampler::size() const {
  return static_cast<int64_t>(lengths_.size());
}

BatchSampler::BatchSampler(
    std::shared_ptr<const Sampler> sampler, int64_t batch_size, bool drop_last)
    : sampler_(std::move(sampler)),
      batch_size_(batch_size),
      drop_last_(drop_last) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      sampler_ != nullptr,
      "sampler should be a Sampler, but got a null pointer");
  HOTLOOP_CHECK_AS(
      ConfigError,
      batch_size > 0,
      "batch_size should be a positive integer value, but got batch_size=",
      batch_size);
}

std::vector<std::vector<int64_t>> BatchSampler::batches(int64_t epoch) const {
  const std::vector<int64_t> indices = sampler_->indices(epoch);
  const int64_t total = static_cast<int64_t>(indices.size());
  const int64_t count =
      drop_last_ ? total / batch_size_ : ceil_div(total, batch_size_);
  std::vector<std::vector<int64_t>> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t b = 0; b < count; ++b) {
    const auto first = indices.begin() + b * batch_size_;
    const auto last = indices.begin() + std::min(total, (b + 1) * batch_size_);
    out.emplace_back(first, last);
  }
  return out;
}

int64_t BatchSampler::size() const {
  const int64_t total = sampler_->size();
  return drop_last_ ? total / batch_size_ : ceil_div(total, batch_size_);
}

DistributedBatchSampler::DistributedBatchSampler(
    std::shared_ptr<const BatchSamplerBase> batch_sampler,
    int64_t num_replicas,
    int64_t rank,
    bool pad)
    : batch_sampler_(std::move(batch_sampler)),
      num_replicas_(num_replicas),
      rank_(rank),
      pad_(pad) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      batch_sampler_ != nullptr,
      "DistributedBatchSampler: expected a batch sampler, got a null pointer");
  check_rank("DistributedBatchSampler", num_replicas, rank);
}

std::vector<std::vector<int64_t>> DistributedBatchSampler::batches(
    int64_t epoch) const {
  const std::vector<std::vector<int64_t>> all = batch_sampler_->batches(epoch);
  // Checked before the split, which would hide a miscount or an empty batch.
  detail::check_batches(all, batch_sampler_->size(), epoch);
  return take_share(all, num_replicas_, rank_, pad_);
}

int64_t DistributedBatchSampler::size() const {
  return share_size(batch_sampler_->size(), num_replicas_, rank_, pad_);
}

} // namespace hotloop::data
