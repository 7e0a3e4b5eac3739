#pragma once

#include "hotloop/train/strategy.h"

#include <cstdint>
#include <exception>
#include <string_view>
#include <vector>

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

/// After work that makes no collective (`failed`: what it threw on this
/// process, or null): one collective tells every process whether it threw
/// anywhere. Where it did, its error goes on; every other process throws
/// DistError naming the lowest such rank and `what` it was doing, so that
/// none waits in a later collective for a process that failed.
void agree_on_failure(
    Strategy& strategy, const char* what, const std::exception_ptr& failed);

} // namespace hotloop::train::detail
