#pragma once

#include "hotloop/train/strategy.h"

#include <ATen/core/Tensor.h>

#include <c10/core/Device.h>

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hotloop::data {
class DataLoader;
} // namespace hotloop::data

namespace hotloop::train::detail {

/// FNV-1a over whole 64-bit values and names: a digest of an order or of
/// metric names, for processes to compare (not for security).
class Digest {
 public:
  void add(int64_t value) {
    state_ = (state_ ^ static_cast<uint64_t>(value)) * kPrime;
  }
  /// The name's bytes, then a separator, so that "ab", "c" and "a", "bc"
  /// differ.
  void add(std::string_view name) {
    for (const char c : name) {
      state_ = (state_ ^ static_cast<unsigned char>(c)) * kPrime;
    }
    state_ = (state_ ^ 0xffU) * kPrime;
  }
  /// Non-negative, so that it and its negative fit an int64.
  int64_t value() const {
    return static_cast<int64_t>(state_ >> 2);
  }

 private:
  static constexpr uint64_t kPrime = 1099511628211ULL;
  uint64_t state_ = 1469598103934665603ULL;
};

/// The least and the most of each of `values` over every process of
/// `strategy` (each within +-2^62): one max-collective over them and their
/// negatives. Every process learns the same extremes.
struct Extremes {
  int64_t least;
  int64_t most;
};
std::vector<Extremes> extremes_everywhere(
    Strategy& strategy, const std::vector<int64_t>& values);

/// Whether every process of `strategy` holds the same `values`
/// (extremes_everywhere's least and most agree for each).
bool same_everywhere(Strategy& strategy, const std::vector<int64_t>& values);

/// Every process's `tensors` on every process of `strategy`: element r
/// holds process r's, in order, bit for bit, with their dtypes and shapes
/// (an undefined tensor stays undefined). A tensor that was on the CPU
/// comes back on the CPU, one on an accelerator on `device`. Sum-
/// collectives: the counts, the shapes, then the bytes in slices of
/// 64 MiB. ConfigError, on every process alike, naming a sparse or
/// quantized tensor (predict's outputs are the users' own).
std::vector<std::vector<at::Tensor>> gather_everywhere(
    Strategy& strategy,
    const std::vector<at::Tensor>& tensors,
    c10::Device device);

/// `text`'s bytes as a uint8 tensor, for gather_everywhere, and back.
at::Tensor text_tensor(const std::string& text);
std::string text_of(const at::Tensor& bytes);

/// After work that makes no collective (`failed`: what it threw on this
/// process, or null): one collective tells every process whether it threw
/// anywhere. Where it did, its error goes on; every other process throws
/// DistError naming the lowest such rank, `what` it was doing and its
/// message (gathered), so that none waits in a later collective for a
/// process that failed. Should that collective fail where the work had
/// failed, the work's error goes on.
void agree_on_failure(
    Strategy& strategy, const char* what, const std::exception_ptr& failed);

/// resolve_limit for a process's share of `length` batches (nullopt: a
/// stream of unknown length) of a loader split among the processes of
/// `strategy`: a fraction is taken of the largest share, so that every
/// process resolves it alike (a share with too few batches for the
/// fraction is not refused on its own), then this share is cut to it.
int64_t resolve_limit_everywhere(
    Strategy& strategy,
    double limit,
    std::optional<int64_t> length,
    const char* name);

/// A digest of the order a loader draws its epochs in beyond its seed and
/// shuffle: the first epoch of a sampler or batch sampler of its own (of
/// the whole data's, for a process's share), drawn once more here, or a
/// shuffling DistributedSampler's seed. Equal on every process that loads
/// alike; non-negative.
int64_t order_digest(const data::DataLoader& loader);

} // namespace hotloop::train::detail
