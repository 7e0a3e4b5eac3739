#include "hotloop/train/detail/shared_prediction.h"

#include "hotloop/core/error.h"
#include "hotloop/data/sampler.h"
#include "hotloop/train/detail/agreement.h"
#include "hotloop/train/trainer_options.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <memory>
#include <sstream>

namespace hotloop::train::detail {
namespace {

// Of the items 0, 1, ..., total - 1, how many process `rank` of `world`
// holds when each takes every world-th, from its rank on.
int64_t share_of(int64_t total, int64_t world, int64_t rank) {
  return total > rank ? (total - rank + world - 1) / world : 0;
}

std::string shape_of(const at::Tensor& tensor) {
  std::ostringstream out;
  out << tensor.sizes() << " " << tensor.scalar_type();
  return out.str();
}

// Every process's outputs, one process's after another's.
std::vector<at::Tensor> process_after_process(
    std::vector<std::vector<at::Tensor>> gathered) {
  std::vector<at::Tensor> out;
  for (auto& outputs : gathered) {
    out.insert(out.end(), outputs.begin(), outputs.end());
  }
  return out;
}

// Output u of one process is output u / W of process u % W.
std::vector<at::Tensor> output_by_output(
    const std::vector<std::vector<at::Tensor>>& gathered, int64_t outputs) {
  const auto world = static_cast<int64_t>(gathered.size());
  std::vector<at::Tensor> out;
  for (int64_t u = 0; u < outputs; ++u) {
    out.push_back(gathered.at(u % world).at(u / world));
  }
  return out;
}

// Sample p of one process's order is row p / W of process p % W's
// outputs; `shares[r]`: how many samples process r was given, of which
// the first `kept[r]` are one process's.
std::vector<at::Tensor> sample_by_sample(
    const std::vector<std::vector<at::Tensor>>& gathered,
    const std::vector<int64_t>& shares,
    const std::vector<int64_t>& kept,
    int64_t batch_size) {
  const auto world = static_cast<int64_t>(gathered.size());
  const at::Tensor* first = nullptr;
  for (int64_t r = 0; r < world; ++r) {
    for (size_t k = 0; k < gathered[r].size(); ++k) {
      const at::Tensor& output = gathered[r][k];
      const int64_t samples = std::min(
          batch_size, shares[r] - static_cast<int64_t>(k) * batch_size);
      HOTLOOP_CHECK_AS(
          ConfigError,
          output.defined() && output.dim() >= 1 && output.size(0) == samples,
          "predict under a data-parallel strategy puts the processes' "
          "outputs back in order sample by sample, so predict_step must "
          "return a tensor whose first dimension counts the batch's samples: "
          "rank ",
          r,
          "'s batch ",
          k,
          " has ",
          samples,
          " samples, its output is ",
          output.defined() ? shape_of(output) : std::string("undefined"),
          " (give the loader a batch_sampler, or batch_size=None, to gather "
          "whole outputs, or predict in one process)");
      if (first == nullptr) {
        first = &output;
      }
      HOTLOOP_CHECK_AS(
          ConfigError,
          output.scalar_type() == first->scalar_type() &&
              output.sizes().slice(1) == first->sizes().slice(1),
          "predict under a data-parallel strategy joins the processes' "
          "outputs into one process's batches, so all must have one dtype "
          "and the same sizes after the first: rank ",
          r,
          "'s batch ",
          k,
          " is ",
          shape_of(output),
          ", another ",
          shape_of(*first));
    }
  }
  if (first == nullptr) {
    return {};
  }
  std::vector<at::Tensor> rows;
  std::vector<int64_t> offsets;
  int64_t offset = 0;
  for (int64_t r = 0; r < world; ++r) {
    offsets.push_back(offset);
    if (kept[r] > 0) {
      rows.push_back(at::cat(gathered[r]).narrow(0, 0, kept[r]));
      offset += kept[r];
    }
  }
  std::vector<int64_t> order(static_cast<size_t>(offset));
  for (int64_t p = 0; p < offset; ++p) {
    order[static_cast<size_t>(p)] = offsets[p % world] + p / world;
  }
  const at::Tensor all = at::cat(rows);
  const at::Tensor sorted = all.index_select(
      0, at::tensor(order, at::TensorOptions(at::kLong).device(all.device())));
  std::vector<at::Tensor> out;
  for (int64_t start = 0; start < offset; start += batch_size) {
    out.push_back(
        sorted.narrow(0, start, std::min(batch_size, offset - start)));
  }
  return out;
}

// The loader one process reads, its order named: a shuffling loader's
// RandomSampler given as its sampler (data::shard would otherwise split
// the dataset's order), a sampler for one that has none, and the last
// batch kept (shares cut to whole batches would miss samples).
std::unique_ptr<data::DataLoader> in_order(const data::DataLoader& loader) {
  data::DataLoaderOptions options = loader.options();
  if (!options.batch_sampler()) {
    const int64_t n = loader.dataset().size();
    if (!options.sampler()) {
      options.sampler(
          options.shuffle()
              ? std::shared_ptr<const data::Sampler>(
                    std::make_shared<data::RandomSampler>(
                        n, /*replacement=*/false, std::nullopt, options.seed()))
              : std::make_shared<data::SequentialSampler>(n));
      options.shuffle(false);
    }
    options.drop_last(false);
  }
  return std::make_unique<data::DataLoader>(loader.dataset_ptr(), options);
}

} // namespace

std::vector<at::Tensor> predict_in_shares(
    Strategy& strategy,
    data::DataLoader& loader,
    double limit,
    c10::Device device,
    const PredictBatches& predict) {
  const int64_t world = strategy.world_size();
  const int64_t rank = strategy.rank();
  const data::DataLoaderOptions& options = loader.options();
  const char* name = "limit_predict_batches";
  if (world == 1 || (loader.iterable() && !data::is_share(loader) &&
                     !loader.iterable_dataset_ptr()->splits_by_process())) {
    // One process, or streams that cannot be split (every process
    // predicts them all): the loader as it is.
    return predict(loader, resolve_limit(limit, loader.length(), name));
  }
  // Each process's share of the work, which makes no collective: a failure
  // in one is told to all before the outputs are gathered.
  std::vector<at::Tensor> outputs;
  std::exception_ptr failed;
  enum class Order { kProcesses, kOutputs, kSamples } order = Order::kSamples;
  int64_t batches = 0; // one process's
  int64_t samples = 0;
  int64_t predicted = 0;
  int64_t digest = 0;
  int64_t batch = 0;
  try {
    if (loader.iterable() || data::is_share(loader)) {
      order = Order::kProcesses;
      const std::unique_ptr<data::DataLoader> share =
          data::shard(loader, world, rank, /*training=*/false);
      outputs = predict(*share, resolve_limit(limit, share->length(), name));
    } else {
      batches = resolve_limit(limit, *loader.length(), name);
      const std::unique_ptr<data::DataLoader> whole = in_order(loader);
      digest = order_digest(*whole);
      batch = options.batch_size().value_or(0);
      const std::unique_ptr<data::DataLoader> share =
          data::shard(*whole, world, rank, /*training=*/false);
      if (options.batch_sampler() || !options.batch_size()) {
        order = Order::kOutputs;
        outputs = predict(*share, share_of(batches, world, rank));
      } else {
        const int64_t batch_size = *options.batch_size();
        samples = whole->options().sampler()->size();
        // The samples one process predicts: all but a dropped last batch.
        predicted = std::min(batches * batch_size, samples);
        const int64_t mine = share_of(predicted, world, rank);
        outputs = predict(*share, (mine + batch_size - 1) / batch_size);
      }
    }
  } catch (...) {
    failed = std::current_exception();
  }
  agree_on_failure(strategy, "predict", failed);
  HOTLOOP_CHECK_AS(
      ConfigError,
      same_everywhere(strategy, {digest, batch}),
      "predict's loader draws its samples in another order, or batches them "
      "otherwise, on another process (its seed, batch size, or its sampler "
      "or batch sampler differs): "
      "every process must build the loader alike, or their shares overlap "
      "and miss samples");
  auto gathered = gather_everywhere(strategy, outputs, device);
  switch (order) {
    case Order::kProcesses:
      return process_after_process(std::move(gathered));
    case Order::kOutputs:
      return output_by_output(gathered, batches);
    case Order::kSamples:
      break;
  }
  const int64_t batch_size = *options.batch_size();
  std::vector<int64_t> shares;
  std::vector<int64_t> kept;
  for (int64_t r = 0; r < world; ++r) {
    shares.push_back(share_of(samples, world, r));
    kept.push_back(share_of(predicted, world, r));
  }
  return sample_by_sample(gathered, shares, kept, batch_size);
}

} // namespace hotloop::train::detail
