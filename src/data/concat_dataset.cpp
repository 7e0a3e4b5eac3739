#include "hotloop/data/concat_dataset.h"

#include "hotloop/core/error.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <utility>

namespace hotloop::data {
namespace {

// "input [1, 28, 28] Float, target [] Long"
std::string describe(const SampleSpec& spec) {
  return hotloop::detail::str_cat(
      "input ",
      c10::IntArrayRef(spec.input_shape),
      " ",
      spec.input_dtype,
      ", target ",
      c10::IntArrayRef(spec.target_shape),
      " ",
      spec.target_dtype);
}

} // namespace

ConcatDataset::ConcatDataset(
    std::vector<std::shared_ptr<const Dataset>> datasets)
    : datasets_(std::move(datasets)) {
  HOTLOOP_CHECK_AS(
      DataError, !datasets_.empty(), "ConcatDataset: no datasets given");
  int64_t end = 0;
  std::string first;
  for (size_t k = 0; k < datasets_.size(); ++k) {
    HOTLOOP_CHECK_AS(
        DataError,
        datasets_[k] != nullptr,
        "ConcatDataset: dataset ",
        k,
        " is null");
    const int64_t size = datasets_[k]->size();
    HOTLOOP_CHECK_AS(
        DataError, size > 0, "ConcatDataset: dataset ", k, " is empty");
    const std::string spec = describe(datasets_[k]->spec());
    if (k == 0) {
      first = spec;
    }
    HOTLOOP_CHECK_AS(
        DataError,
        spec == first,
        "ConcatDataset: dataset ",
        k,
        "'s samples are ",
        spec,
        ", dataset 0's ",
        first);
    end += size;
    ends_.push_back(end);
  }
}

int64_t ConcatDataset::size() const {
  return ends_.back();
}

SampleSpec ConcatDataset::spec() const {
  return datasets_.front()->spec();
}

std::pair<size_t, int64_t> ConcatDataset::locate(int64_t index) const {
  check_index(index);
  const auto k = static_cast<size_t>(
      std::upper_bound(ends_.begin(), ends_.end(), index) - ends_.begin());
  return {k, k == 0 ? index : index - ends_[k - 1]};
}

Example ConcatDataset::get(int64_t index, const SampleContext& context) const {
  const auto [k, local] = locate(index);
  return datasets_[k]->get(local, context);
}

void ConcatDataset::get_batch(
    c10::ArrayRef<int64_t> indices,
    const SampleContext& context,
    Batch& out) const {
  // Each run of rows in one dataset goes to that dataset's get_batch.
  std::vector<int64_t> run;
  size_t dataset = 0;
  int64_t start = 0;
  const auto read_run = [&](int64_t end) {
    Batch part;
    part.input = out.input.narrow(0, start, end - start);
    part.target = out.target.narrow(0, start, end - start);
    datasets_[dataset]->get_batch(run, context, part);
  };
  const auto rows = static_cast<int64_t>(indices.size());
  for (int64_t row = 0; row < rows; ++row) {
    const auto [k, local] = locate(indices[row]);
    if (!run.empty() && k != dataset) {
      read_run(row);
      run.clear();
      start = row;
    }
    dataset = k;
    run.push_back(local);
  }
  if (!run.empty()) {
    read_run(rows);
  }
}

} // namespace hotloop::data
