#pragma once

#include "hotloop/data/random.h"

#include <c10/core/ScalarType.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <array>
#include <cstdint>
#include <vector>

namespace hotloop::data {

/// What the image pipeline does to each uint8 image, in torchvision's order:
/// RandomCrop(size, padding) -> RandomHorizontalFlip -> ToTensor ->
/// Normalize(mean, std) -> RandomErasing(p).
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
  /// Output element type: float32, bfloat16 or float16 (the conversion is
  /// part of the same pass).
  c10::ScalarType dtype = c10::kFloat;
  /// torchvision's RandomErasing with its defaults after Normalize: with
  /// this probability, a rectangle of 2% to 33% of the image with an aspect
  /// ratio log-uniform in [0.3, 3.3] (ten tries to fit one) is set to 0 in
  /// every channel. 0: off; at most 1.
  double random_erasing = 0;
};

/// The fused image transform: crop, flip, scale and normalize in one pass
/// over the output, through a 256-entry lookup table per channel.
/// Immutable after construction, so one instance serves every loader thread.
class ImageTransform {
 public:
  /// Throws ConfigError for a negative padding, a mean/std size that matches
  /// neither 1 nor `channels`, a non-positive std, or another dtype.
  ImageTransform(
      ImageTransformOptions options,
      int64_t channels,
      int64_t height,
      int64_t width);

  /// src: [C, H, W] uint8; dst: [C, H, W] of `options().dtype`. `rng`
  /// supplies this sample's crop offset, flip and erasing.
  void apply(const uint8_t* src, void* dst, SampleRng& rng) const;

  const ImageTransformOptions& options() const {
    return options_;
  }

 private:
  ImageTransformOptions options_;
  int64_t channels_, height_, width_;
  template <typename T>
  using Lut = std::vector<std::array<T, 256>>;
  template <typename T>
  void apply_to(
      const uint8_t* src, T* dst, const Lut<T>& lut, SampleRng& rng) const;
  template <typename T>
  void erase(T* dst, SampleRng& rng) const;

  // Value of each pixel byte after scaling and normalization, per channel,
  // computed in double and rounded once to the output type.
  Lut<float> lut_float_;
  Lut<c10::BFloat16> lut_bfloat16_;
  Lut<c10::Half> lut_half_;
};

} // namespace hotloop::data
