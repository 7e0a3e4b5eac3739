#include "hotloop/train/detail/shared_prediction.h"

#include "hotloop/core/error.h"
#include "hotloop/data/sampler.h"
#include "hotloop/train/detail/agreement.h"
#include "hotloop/train/trainer_options.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <sstream>

namespace hotloop::train::detail {
namespace {

// How a tensor is described in the gathered shapes.
enum Kind : int64_t { kUndefined = 0, kDense = 1, kUnsupported = 2 };

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

// A digest of the order `loader` (of in_order) reads in: its batches, or
// its sampler's indices, at epoch 0.
int64_t order_digest(const data::DataLoader& loader) {
  Digest digest;
  const data::DataLoaderOptions& options = loader.options();
  digest.add(options.batch_size().value_or(0));
  if (const auto& batch_sampler = options.batch_sampler()) {
    for (const std::vector<int64_t>& batch : batch_sampler->batches(0)) {
      digest.add(static_cast<int64_t>(batch.size()));
      for (const int64_t index : batch) {
        digest.add(index);
      }
    }
  } else {
    for (const int64_t index : options.sampler()->indices(0)) {
      digest.add(index);
    }
  }
  return digest.value();
}

} // namespace

std::vector<std::vector<at::Tensor>> gather_everywhere(
    Strategy& strategy,
    const std::vector<at::Tensor>& tensors,
    c10::Device device) {
  const int64_t world = strategy.world_size();
  const int64_t rank = strategy.rank();
  // This process's shapes: per tensor its kind, then for a dense one its
  // dtype, whether it was on the CPU, its dimensions and sizes.
  std::vector<int64_t> shapes;
  std::vector<at::Tensor> host;
  int64_t bytes = 0;
  for (const at::Tensor& tensor : tensors) {
    if (!tensor.defined()) {
      shapes.push_back(kUndefined);
    } else if (tensor.layout() != at::kStrided || tensor.is_quantized()) {
      shapes.push_back(kUnsupported);
    } else {
      shapes.insert(
          shapes.end(),
          {kDense,
           static_cast<int64_t>(tensor.scalar_type()),
           tensor.is_cpu() ? 1 : 0,
           tensor.dim()});
      shapes.insert(shapes.end(), tensor.sizes().begin(), tensor.sizes().end());
      host.push_back(
          tensor.detach().cpu().resolve_conj().resolve_neg().contiguous());
      bytes += static_cast<int64_t>(host.back().nbytes());
    }
  }
  // Each process writes its own part of a zeroed buffer; the sum is every
  // part, exactly (one process's bytes beside zeros).
  at::Tensor counts = at::zeros({world, 3}, at::kLong);
  counts[rank][0] = static_cast<int64_t>(tensors.size());
  counts[rank][1] = static_cast<int64_t>(shapes.size());
  counts[rank][2] = bytes;
  strategy.all_reduce(counts, Reduction::kSum);
  counts = counts.cpu();
  const auto* count = counts.data_ptr<int64_t>();
  std::vector<int64_t> shape_offsets(world + 1, 0);
  std::vector<int64_t> byte_offsets(world + 1, 0);
  for (int64_t r = 0; r < world; ++r) {
    shape_offsets[r + 1] = shape_offsets[r] + count[3 * r + 1];
    byte_offsets[r + 1] = byte_offsets[r] + count[3 * r + 2];
  }
  at::Tensor all_shapes = at::zeros({shape_offsets[world]}, at::kLong);
  if (!shapes.empty()) {
    std::memcpy(
        all_shapes.data_ptr<int64_t>() + shape_offsets[rank],
        shapes.data(),
        shapes.size() * sizeof(int64_t));
  }
  strategy.all_reduce(all_shapes, Reduction::kSum);
  all_shapes = all_shapes.cpu();
  at::Tensor all_bytes = at::zeros({byte_offsets[world]}, at::kByte);
  auto* write = all_bytes.data_ptr<uint8_t>() + byte_offsets[rank];
  for (const at::Tensor& tensor : host) {
    if (tensor.nbytes() > 0) {
      std::memcpy(write, tensor.data_ptr(), tensor.nbytes());
      write += tensor.nbytes();
    }
  }
  // In slices, so that a process group on a GPU holds one at a time there.
  constexpr int64_t kSlice = int64_t{64} << 20;
  for (int64_t start = 0; start < byte_offsets[world]; start += kSlice) {
    at::Tensor slice = all_bytes.narrow(
        0, start, std::min(kSlice, byte_offsets[world] - start));
    strategy.all_reduce(slice, Reduction::kSum);
  }
  std::vector<std::vector<at::Tensor>> out(static_cast<size_t>(world));
  const auto* shape = all_shapes.data_ptr<int64_t>();
  const auto* read = all_bytes.data_ptr<uint8_t>();
  for (int64_t r = 0; r < world; ++r) {
    for (int64_t k = 0; k < count[3 * r]; ++k) {
      const int64_t kind = *shape++;
      HOTLOOP_CHECK_AS(
          ConfigError,
          kind != kUnsupported,
          "predict under a data-parallel strategy gathers the processes' "
          "outputs, which must be dense tensors: rank ",
          r,
          "'s output ",
          k,
          " is sparse or quantized");
      if (kind == kUndefined) {
        out[r].emplace_back();
        continue;
      }
      const auto dtype = static_cast<at::ScalarType>(shape[0]);
      const bool on_cpu = shape[1] != 0;
      const int64_t dims = shape[2];
      const std::vector<int64_t> sizes(shape + 3, shape + 3 + dims);
      shape += 3 + dims;
      at::Tensor tensor = at::empty(sizes, at::TensorOptions(dtype));
      if (tensor.nbytes() > 0) {
        std::memcpy(tensor.data_ptr(), read, tensor.nbytes());
        read += tensor.nbytes();
      }
      out[r].push_back(on_cpu ? tensor : tensor.to(device));
    }
  }
  return out;
}

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
  if (loader.iterable() && !data::is_share(loader) &&
      !loader.iterable_dataset_ptr()->splits_by_process()) {
    // Streams that cannot be split: every process predicts them all.
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
      same_everywhere(strategy, {digest}),
      "predict's loader draws its samples in another order on another "
      "process (its seed, or its sampler's or batch sampler's, differs): "
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
