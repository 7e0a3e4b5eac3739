#include "hotloop/train/detail/agreement.h"

#include "hotloop/core/error.h"
#include "hotloop/data/dataloader.h"
#include "hotloop/data/sampler.h"
#include "hotloop/train/trainer_options.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace hotloop::train::detail {

std::vector<Extremes> extremes_everywhere(
    Strategy& strategy, const std::vector<int64_t>& values) {
  std::vector<int64_t> both;
  for (const int64_t value : values) {
    both.push_back(value);
    both.push_back(-value);
  }
  at::Tensor maxima = at::tensor(both);
  if (strategy.world_size() > 1) {
    strategy.all_reduce(maxima, Reduction::kMax);
  }
  const int64_t* most = maxima.data_ptr<int64_t>();
  std::vector<Extremes> out;
  for (size_t i = 0; i < values.size(); ++i) {
    out.push_back({-most[2 * i + 1], most[2 * i]});
  }
  return out;
}

bool same_everywhere(Strategy& strategy, const std::vector<int64_t>& values) {
  if (strategy.world_size() == 1) {
    return true;
  }
  for (const Extremes& e : extremes_everywhere(strategy, values)) {
    if (e.least != e.most) {
      return false;
    }
  }
  return true;
}

namespace {

// How a tensor is described in the gathered shapes.
enum Kind : int64_t { kUndefined = 0, kDense = 1, kUnsupported = 2 };

} // namespace

at::Tensor text_tensor(const std::string& text) {
  at::Tensor out = at::empty({static_cast<int64_t>(text.size())}, at::kByte);
  std::copy(text.begin(), text.end(), out.data_ptr<uint8_t>());
  return out;
}

std::string text_of(const at::Tensor& bytes) {
  const auto* text = bytes.data_ptr<uint8_t>();
  return std::string(text, text + bytes.numel());
}

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
          "the tensors gathered from the processes (predict's outputs under "
          "a data-parallel strategy) must be dense: rank ",
          r,
          "'s tensor ",
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

void agree_on_failure(
    Strategy& strategy, const char* what, const std::exception_ptr& failed) {
  if (strategy.world_size() == 1) {
    if (failed) {
      std::rethrow_exception(failed);
    }
    return;
  }
  const int64_t world = strategy.world_size();
  std::string message;
  if (failed) {
    try {
      std::rethrow_exception(failed);
    } catch (const std::exception& error) {
      message = error.what();
    } catch (...) {
      message = "an exception that is not a std::exception";
    }
  }
  int64_t first = 0;
  std::vector<std::vector<at::Tensor>> messages;
  try {
    // The lowest failed rank r as world - r, the highest value.
    first =
        extremes_everywhere(strategy, {failed ? world - strategy.rank() : 0})[0]
            .most;
    if (first > 0) {
      messages = gather_everywhere(
          strategy, {text_tensor(message)}, c10::Device(c10::kCPU));
    }
  } catch (...) {
    if (failed) {
      std::rethrow_exception(failed);
    }
    throw;
  }
  if (failed) {
    std::rethrow_exception(failed);
  }
  if (first == 0) {
    return;
  }
  throw DistError(hotloop::detail::str_cat(
      "rank ",
      world - first,
      " failed in ",
      what,
      ": ",
      text_of(messages.at(world - first).at(0)),
      " (this process, rank ",
      strategy.rank(),
      ", stops with it)"));
}

int64_t resolve_limit_everywhere(
    Strategy& strategy,
    double limit,
    std::optional<int64_t> length,
    const char* name) {
  if (strategy.world_size() == 1 || !length) {
    return resolve_limit(limit, length, name);
  }
  const int64_t largest = extremes_everywhere(strategy, {*length})[0].most;
  return limited(*length, resolve_limit(limit, largest, name));
}

int64_t order_digest(const data::DataLoader& loader) {
  Digest digest;
  const auto mix = [&digest](int64_t value) { digest.add(value); };
  const data::DataLoaderOptions& options = loader.options();
  const data::Sampler* sampler = options.sampler().get();
  if (const data::BatchSamplerBase* batches = options.batch_sampler().get()) {
    if (const auto* share =
            dynamic_cast<const data::DistributedBatchSampler*>(batches)) {
      batches = &share->batch_sampler();
    }
    if (const auto* plain = dynamic_cast<const data::BatchSampler*>(batches)) {
      sampler = &plain->sampler();
      mix(plain->batch_size());
      mix(plain->drop_last() ? 1 : 0);
    } else {
      for (const std::vector<int64_t>& batch : batches->batches(0)) {
        mix(static_cast<int64_t>(batch.size()));
        std::for_each(batch.begin(), batch.end(), mix);
      }
    }
  }
  if (const auto* wrapper =
          dynamic_cast<const data::DistributedSamplerWrapper*>(sampler)) {
    sampler = &wrapper->sampler();
  }
  if (const auto* distributed =
          dynamic_cast<const data::DistributedSampler*>(sampler)) {
    // Unshuffled, the seed sets augmentation only, which may differ.
    mix(distributed->shuffle() ? 1 : 0);
    if (distributed->shuffle()) {
      mix(static_cast<int64_t>(distributed->seed()));
    }
  } else if (
      sampler != nullptr &&
      dynamic_cast<const data::ShardSampler*>(sampler) == nullptr) {
    const std::vector<int64_t> indices = sampler->indices(0);
    std::for_each(indices.begin(), indices.end(), mix);
  }
  return digest.value();
}

} // namespace hotloop::train::detail
