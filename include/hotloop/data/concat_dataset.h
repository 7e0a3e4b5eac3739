#pragma once

#include "hotloop/data/dataset.h"
#include "hotloop/data/iterable_dataset.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace hotloop::data {

/// Several datasets one after another (PyTorch's
/// torch.utils.data.ConcatDataset): sample i is the first dataset's i while
/// i is below its size, then the second's i - that size, and so on. Each
/// dataset gets its own indices (and so its own augmentation streams).
/// Safe to read from any number of threads when the datasets are.
class ConcatDataset final : public Dataset {
 public:
  /// Throws DataError for no datasets, an empty one, or one whose samples'
  /// shapes or dtypes differ from the first's (naming it by position).
  explicit ConcatDataset(std::vector<std::shared_ptr<const Dataset>> datasets);

  int64_t size() const override;
  SampleSpec spec() const override;
  Example get(int64_t index, const SampleContext& context) const override;
  /// Reads each run of consecutive rows that fall in one dataset with that
  /// dataset's get_batch, into those rows of `out`.
  void get_batch(
      c10::ArrayRef<int64_t> indices,
      const SampleContext& context,
      Batch& out) const override;

  /// Where sample `index` lives: (dataset position, its index there).
  std::pair<size_t, int64_t> locate(int64_t index) const;

 private:
  std::vector<std::shared_ptr<const Dataset>> datasets_;
  // ends_[k]: the number of samples in datasets 0..k (PyTorch's
  // cumulative_sizes).
  std::vector<int64_t> ends_;
};

/// Iterable datasets one after another (PyTorch's
/// torch.utils.data.ChainDataset): a stream reads the first dataset's
/// stream for the same StreamContext to its end, then the second's, and so
/// on; each is opened when the one before ends. So each dataset splits its
/// samples among the loader's workers as it would alone.
class ChainDataset final : public IterableDataset {
 public:
  /// Throws DataError for no datasets, a null one, or one whose samples'
  /// shapes or dtypes differ from the first's (naming it by position).
  explicit ChainDataset(
      std::vector<std::shared_ptr<const IterableDataset>> datasets);

  SampleSpec spec() const override;
  std::unique_ptr<SampleStream> stream(
      const StreamContext& context) const override;
  /// The sum of the datasets' sizes; nullopt when any is unknown.
  std::optional<int64_t> size() const override;
  /// Whether every dataset splits by process.
  bool splits_by_process() const override;

 private:
  std::vector<std::shared_ptr<const IterableDataset>> datasets_;
};

} // namespace hotloop::data
