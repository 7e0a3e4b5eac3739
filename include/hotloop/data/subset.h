#pragma once

#include "hotloop/data/dataset.h"

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace hotloop::data {

/// The samples of `dataset` at `indices`, in that order (PyTorch's
/// torch.utils.data.Subset): sample k is dataset's indices[k], with the
/// same augmentation stream as there. Safe to read from any number of
/// threads when the dataset is.
class Subset final : public Dataset {
 public:
  /// Throws DataError when an index is outside the dataset.
  Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices);

  int64_t size() const override;
  SampleSpec spec() const override;
  Example get(int64_t index, const SampleContext& context) const override;
  void get_batch(
      c10::ArrayRef<int64_t> indices,
      const SampleContext& context,
      Batch& out) const override;

  const Dataset& dataset() const {
    return *dataset_;
  }
  const std::vector<int64_t>& indices() const {
    return indices_;
  }

 private:
  std::shared_ptr<const Dataset> dataset_;
  std::vector<int64_t> indices_;
};

/// A seeded split of `n` indices into (first, second), `second_fraction`
/// of them (rounded down) in the second, each part in ascending order: the
/// same for the same seed on every machine. Throws DataError unless both
/// parts get at least one index.
std::pair<std::vector<int64_t>, std::vector<int64_t>> random_split(
    int64_t n, double second_fraction, uint64_t seed);

} // namespace hotloop::data
