#pragma once

#include "hotloop/data/random.h"

#include <array>
#include <cstdint>
#include <vector>

namespace hotloop::data {

/// What the image pipeline does to each uint8 image, in torchvision's order:
/// RandomCrop(size, padding) -> RandomHorizontalFlip -> ToTensor ->
/// Normalize(mean, std).
struct ImageTransformOptions {
  /// Zero padding on each side before a random crop back to the input size;
  /// 0 turns the crop off.
  int64_t crop_padding = 0;
  /// Flip left-right with probability 1/2.
  bool horizontal_flip = false;
  /// Per-channel mean and std applied after scaling to [0, 1]; empty means
  /// no normalization. One value applies to every channel.
  std::vector<double> mean;
  std::vector<double> std;
};

/// The fused image transform: crop, flip, scale and normalize in one pass
/// over the output, through a 256-entry lookup table per channel.
/// Immutable after construction, so one instance serves every loader thread.
class ImageTransform {
 public:
  /// Throws ConfigError for a negative padding, a mean/std size that matches
  /// neither 1 nor `channels`, or a non-positive std.
  ImageTransform(
      ImageTransformOptions options,
      int64_t channels,
      int64_t height,
      int64_t width);

  /// src: [C, H, W] uint8; dst: [C, H, W] float32. `rng` supplies this
  /// sample's crop offset and flip.
  void apply(const uint8_t* src, float* dst, SampleRng& rng) const;

  const ImageTransformOptions& options() const {
    return options_;
  }

 private:
  ImageTransformOptions options_;
  int64_t channels_, height_, width_;
  std::vector<std::array<float, 256>> lut_;
};

} // namespace hotloop::data
