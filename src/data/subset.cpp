#include "hotloop/data/subset.h"

#include "hotloop/core/error.h"
#include "hotloop/data/random.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace hotloop::data {

Subset::Subset(
    std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices)
    : dataset_(std::move(dataset)), indices_(std::move(indices)) {
  HOTLOOP_CHECK(dataset_ != nullptr, "Subset: no dataset");
  const int64_t n = dataset_->size();
  for (const int64_t index : indices_) {
    HOTLOOP_CHECK_AS(
        DataError,
        index >= 0 && index < n,
        "Subset: index ",
        index,
        " is outside the dataset's ",
        n,
        " samples");
  }
}

int64_t Subset::size() const {
  return static_cast<int64_t>(indices_.size());
}

SampleSpec Subset::spec() const {
  return dataset_->spec();
}

Example Subset::get(int64_t index, const SampleContext& context) const {
  check_index(index);
  return dataset_->get(indices_[index], context);
}

void Subset::get_batch(
    c10::ArrayRef<int64_t> indices,
    const SampleContext& context,
    Batch& out) const {
  std::vector<int64_t> mapped;
  mapped.reserve(indices.size());
  for (const int64_t index : indices) {
    check_index(index);
    mapped.push_back(indices_[index]);
  }
  dataset_->get_batch(mapped, context, out);
}

std::pair<std::vector<int64_t>, std::vector<int64_t>> random_split(
    int64_t n, double second_fraction, uint64_t seed) {
  const auto second = static_cast<int64_t>(
      std::floor(second_fraction * static_cast<double>(n)));
  HOTLOOP_CHECK_AS(
      DataError,
      second >= 1 && second < n,
      "a split of ",
      n,
      " samples at fraction ",
      second_fraction,
      " leaves none for ",
      second < 1 ? "the second part" : "the first part");
  // Fisher-Yates on the sample generator: the same on every machine and
  // LibTorch version.
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  SampleRng rng(SampleRng::mix(seed, 0, 0x5ee11));
  for (int64_t i = n - 1; i > 0; --i) {
    std::swap(order[i], order[static_cast<int64_t>(rng.below(i + 1))]);
  }
  std::vector<int64_t> first(order.begin(), order.end() - second);
  std::vector<int64_t> last(order.end() - second, order.end());
  std::sort(first.begin(), first.end());
  std::sort(last.begin(), last.end());
  return {std::move(first), std::move(last)};
}

} // namespace hotloop::data
