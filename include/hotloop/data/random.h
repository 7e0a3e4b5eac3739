#pragma once

#include <cstdint>

namespace hotloop::data {

/// A small, fast generator (splitmix64) whose stream is a pure function of
/// its seed. The loader derives each sample's seed from (seed, epoch, sample
/// index) so augmentation never depends on which thread ran it or when.
class SampleRng {
 public:
  explicit SampleRng(uint64_t seed) : state_(seed) {}

  /// Seed for one sample of one epoch of a run seeded with `seed`.
  static uint64_t mix(uint64_t seed, uint64_t epoch, uint64_t index) {
    SampleRng rng(seed ^ (epoch * 0x9E3779B97F4A7C15ull));
    rng.state_ ^= rng.next() + index * 0xD1B54A32D192ED03ull;
    return rng.next();
  }

  /// Next 64 uniformly distributed bits.
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  /// Uniform double in [0, 1), 53 random bits.
  double uniform() {
    return static_cast<double>(next() >> 11) * 0x1.0p-53;
  }

  /// Uniform integer in [0, bound); bound > 0. Lemire's multiply-shift
  /// (bias below 2^-32 for the small bounds used here).
  uint64_t below(uint64_t bound) {
    return static_cast<uint64_t>(
        (static_cast<unsigned __int128>(next()) * bound) >> 64);
  }

 private:
  uint64_t state_;
};

} // namespace hotloop::data
