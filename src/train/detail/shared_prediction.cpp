#include "hotloop/train/detail/shared_prediction.h"

#include "hotloop/core/error.h"
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
  if (byte_offsets[world] > 0) {
    strategy.all_reduce(all_bytes, Reduction::kSum);
    all_bytes = all_bytes.cpu();
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
  if (loader.iterable() || data::is_share(loader)) {
    const std::unique_ptr<data::DataLoader> share =
        data::shard(loader, world, rank, /*training=*/false);
    const int64_t batches = resolve_limit(limit, share->length(), name);
    return process_after_process(
        gather_everywhere(strategy, predict(*share, batches), device));
  }
  // One process's batches.
  const int64_t batches = resolve_limit(limit, *loader.length(), name);
  if (options.batch_sampler() || !options.batch_size()) {
    const std::unique_ptr<data::DataLoader> share =
        data::shard(loader, world, rank, /*training=*/false);
    return output_by_output(
        gather_everywhere(
            strategy, predict(*share, share_of(batches, world, rank)), device),
        batches);
  }
  const int64_t batch_size = *options.batch_size();
  const int64_t samples =
      options.sampler() ? options.sampler()->size() : loader.dataset().size();
  // The samples one process predicts: all but a dropped last batch.
  const int64_t predicted = std::min(batches * batch_size, samples);
  std::unique_ptr<data::DataLoader> whole;
  if (options.drop_last()) {
    whole = std::make_unique<data::DataLoader>(
        loader.dataset_ptr(),
        data::DataLoaderOptions(options).drop_last(false));
  }
  const std::unique_ptr<data::DataLoader> share =
      data::shard(whole ? *whole : loader, world, rank, /*training=*/false);
  const int64_t mine = share_of(predicted, world, rank);
  const auto gathered = gather_everywhere(
      strategy, predict(*share, (mine + batch_size - 1) / batch_size), device);
  std::vector<int64_t> shares;
  std::vector<int64_t> kept;
  for (int64_t r = 0; r < world; ++r) {
    shares.push_back(share_of(samples, world, r));
    kept.push_back(share_of(predicted, world, r));
  }
  return sample_by_sample(gathered, shares, kept, batch_size);
}

} // namespace hotloop::train::detail
