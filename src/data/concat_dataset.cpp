#include "hotloop/data/concat_dataset.h"

#include "hotloop/core/error.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <utility>

namespace hotloop::data {
namespace {

std::string describe(const SampleSpec& spec) {
  std::string text = "input [";
  for (size_t i = 0; i < spec.input_shape.size(); ++i) {
    text += (i > 0 ? ", " : "") + std::to_string(spec.input_shape[i]);
  }
  text += std::string("] ") + c10::toString(spec.input_dtype) + ", target [";
  for (size_t i = 0; i < spec.target_shape.size(); ++i) {
    text += (i > 0 ? ", " : "") + std::to_string(spec.target_shape[i]);
  }
  return text + "] " + c10::toString(spec.target_dtype);
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
  const auto rows = static_cast<int64_t>(indices.size());
  std::vector<int64_t> run;
  for (int64_t start = 0; start < rows;) {
    const size_t k = locate(indices[start]).first;
    run.clear();
    int64_t row = start;
    for (; row < rows; ++row) {
      const auto [where, local] = locate(indices[row]);
      if (where != k) {
        break;
      }
      run.push_back(local);
    }
    Batch part;
    part.input = out.input.narrow(0, start, row - start);
    part.target = out.target.narrow(0, start, row - start);
    datasets_[k]->get_batch(run, context, part);
    start = row;
  }
}

} // namespace hotloop::data
