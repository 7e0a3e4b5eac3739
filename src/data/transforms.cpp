#include "hotloop/data/transforms.h"

#include "hotloop/core/error.h"

#include <algorithm>

namespace hotloop::data {
namespace {

void check_per_channel(
    const std::vector<double>& values, const char* name, int64_t channels) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      values.empty() || values.size() == 1 ||
          static_cast<int64_t>(values.size()) == channels,
      "data.",
      name,
      " has ",
      values.size(),
      " values; expected 1 or ",
      channels,
      " (one per channel)");
}

double per_channel(const std::vector<double>& values, int64_t c) {
  return values.size() == 1 ? values[0] : values[c];
}

} // namespace

ImageTransform::ImageTransform(
    ImageTransformOptions options,
    int64_t channels,
    int64_t height,
    int64_t width)
    : options_(std::move(options)),
      channels_(channels),
      height_(height),
      width_(width) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.crop_padding >= 0,
      "data.crop_padding must be >= 0, got ",
      options_.crop_padding);
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.mean.empty() == options_.std.empty(),
      "data.mean and data.std must be given together");
  check_per_channel(options_.mean, "mean", channels);
  check_per_channel(options_.std, "std", channels);
  for (double s : options_.std) {
    HOTLOOP_CHECK_AS(
        ConfigError, s > 0, "data.std values must be positive, got ", s);
  }
  lut_.resize(channels);
  for (int64_t c = 0; c < channels; ++c) {
    const double mean =
        options_.mean.empty() ? 0 : per_channel(options_.mean, c);
    const double std = options_.std.empty() ? 1 : per_channel(options_.std, c);
    for (int v = 0; v < 256; ++v) {
      lut_[c][v] = static_cast<float>((v / 255.0 - mean) / std);
    }
  }
}

void ImageTransform::apply(
    const uint8_t* src, float* dst, SampleRng& rng) const {
  const int64_t pad = options_.crop_padding;
  // Offsets into the padded image; the same draws torchvision makes (top,
  // left, then the flip coin), though from a different generator.
  const int64_t top =
      pad > 0 ? static_cast<int64_t>(rng.below(2 * pad + 1)) : 0;
  const int64_t left =
      pad > 0 ? static_cast<int64_t>(rng.below(2 * pad + 1)) : 0;
  const bool flip = options_.horizontal_flip && (rng.next() >> 63);
  const int64_t dy = top - pad;  // source row = y + dy
  const int64_t dx = left - pad; // source col = x + dx (before the flip)

  for (int64_t c = 0; c < channels_; ++c) {
    const float* lut = lut_[c].data();
    const float fill = lut[0];
    const uint8_t* plane = src + c * height_ * width_;
    float* out_plane = dst + c * height_ * width_;
    for (int64_t y = 0; y < height_; ++y) {
      float* out = out_plane + y * width_;
      const int64_t sy = y + dy;
      if (sy < 0 || sy >= height_) {
        std::fill(out, out + width_, fill);
        continue;
      }
      const uint8_t* row = plane + sy * width_;
      // Output column x reads cropped column (flip ? W-1-x : x).
      for (int64_t x = 0; x < width_; ++x) {
        const int64_t sx = (flip ? width_ - 1 - x : x) + dx;
        out[x] = (sx >= 0 && sx < width_) ? lut[row[sx]] : fill;
      }
    }
  }
}

} // namespace hotloop::data
