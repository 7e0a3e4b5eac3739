#include "hotloop/data/concat_dataset.h"

#include "hotloop/core/error.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <utility>

namespace hotloop::data {
namespace {

// "input [1, 28, 28] Float, target [] Long, field mask [28] Bool"
std::string describe(const SampleSpec& spec) {
  std::string text = hotloop::detail::str_cat(
      "input ",
      c10::IntArrayRef(spec.input_shape),
      " ",
      spec.input_dtype,
      ", target ",
      c10::IntArrayRef(spec.target_shape),
      " ",
      spec.target_dtype);
  for (const auto& [name, field] : spec.fields) {
    text += hotloop::detail::str_cat(
        ", field ", name, " ", c10::IntArrayRef(field.shape), " ", field.dtype);
  }
  return text;
}

// Throws DataError for no parts, a null one, or one whose samples differ
// from the first's; `what` names the whole. `check(k)` checks part k more,
// before its samples are compared.
template <typename Part, typename Check>
void check_parts(
    const char* what,
    const std::vector<std::shared_ptr<const Part>>& parts,
    Check&& check) {
  HOTLOOP_CHECK_AS(DataError, !parts.empty(), what, ": no datasets given");
  const std::string first =
      parts.front() != nullptr ? describe(parts.front()->spec()) : "";
  for (size_t k = 0; k < parts.size(); ++k) {
    HOTLOOP_CHECK_AS(
        DataError, parts[k] != nullptr, what, ": dataset ", k, " is null");
    check(k);
    const std::string spec = describe(parts[k]->spec());
    HOTLOOP_CHECK_AS(
        DataError,
        spec == first,
        what,
        ": dataset ",
        k,
        "'s samples are ",
        spec,
        ", dataset 0's ",
        first);
  }
}

// The chained datasets' streams for one context, each opened when the one
// before ends.
class ChainStream final : public SampleStream {
 public:
  ChainStream(
      std::vector<std::shared_ptr<const IterableDataset>> datasets,
      const StreamContext& context)
      : datasets_(std::move(datasets)), context_(context) {}

  std::optional<Example> next() override {
    while (true) {
      if (!current_) {
        if (next_dataset_ == datasets_.size()) {
          return std::nullopt;
        }
        current_ = datasets_[next_dataset_++]->stream(context_);
        HOTLOOP_CHECK(
            current_ != nullptr,
            "ChainDataset: dataset ",
            next_dataset_ - 1,
            "'s stream() gave no stream");
      }
      std::optional<Example> sample = current_->next();
      if (sample) {
        return sample;
      }
      current_.reset();
    }
  }

 private:
  std::vector<std::shared_ptr<const IterableDataset>> datasets_;
  StreamContext context_;
  size_t next_dataset_ = 0;
  std::unique_ptr<SampleStream> current_;
};

} // namespace

ConcatDataset::ConcatDataset(
    std::vector<std::shared_ptr<const Dataset>> datasets)
    : datasets_(std::move(datasets)) {
  int64_t end = 0;
  check_parts("ConcatDataset", datasets_, [&](size_t k) {
    const int64_t size = datasets_[k]->size();
    HOTLOOP_CHECK_AS(
        DataError, size > 0, "ConcatDataset: dataset ", k, " is empty");
    end += size;
    ends_.push_back(end);
  });
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
    Batch part = transformed(out, [&](const at::Tensor& rows) {
      return rows.narrow(0, start, end - start);
    });
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

ChainDataset::ChainDataset(
    std::vector<std::shared_ptr<const IterableDataset>> datasets)
    : datasets_(std::move(datasets)) {
  check_parts("ChainDataset", datasets_, [](size_t) {});
}

SampleSpec ChainDataset::spec() const {
  return datasets_.front()->spec();
}

std::unique_ptr<SampleStream> ChainDataset::stream(
    const StreamContext& context) const {
  return std::make_unique<ChainStream>(datasets_, context);
}

std::optional<int64_t> ChainDataset::size() const {
  int64_t total = 0;
  for (size_t k = 0; k < datasets_.size(); ++k) {
    const std::optional<int64_t> size = datasets_[k]->size();
    if (!size) {
      return std::nullopt;
    }
    HOTLOOP_CHECK_AS(
        DataError,
        *size >= 0,
        "ChainDataset: dataset ",
        k,
        "'s size() is ",
        *size,
        ", expected a count of samples or nullopt");
    total += *size;
  }
  return total;
}

bool ChainDataset::splits_by_process() const {
  return std::all_of(datasets_.begin(), datasets_.end(), [](const auto& d) {
    return d->splits_by_process();
  });
}

} // namespace hotloop::data
