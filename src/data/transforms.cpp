#include "hotloop/data/transforms.h"

#include "hotloop/core/error.h"

#include <algorithm>
#include <cmath>

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
      options_.random_erasing >= 0 && options_.random_erasing <= 1,
      "data.random_erasing must be in [0, 1], got ",
      options_.random_erasing);
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
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.dtype == c10::kFloat || options_.dtype == c10::kBFloat16 ||
          options_.dtype == c10::kHalf,
      "data.dtype must be float32, bfloat16 or float16, got ",
      options_.dtype);
  for (int64_t c = 0; c < channels; ++c) {
    const double mean =
        options_.mean.empty() ? 0 : per_channel(options_.mean, c);
    const double std = options_.std.empty() ? 1 : per_channel(options_.std, c);
    std::array<double, 256> values{};
    for (int v = 0; v < 256; ++v) {
      values[v] = (v / 255.0 - mean) / std;
    }
    auto fill = [&](auto& lut) {
      using T = typename std::decay_t<decltype(lut)>::value_type::value_type;
      auto& table = lut.emplace_back();
      for (int v = 0; v < 256; ++v) {
        table[v] = static_cast<T>(static_cast<float>(values[v]));
      }
    };
    if (options_.dtype == c10::kFloat) {
      fill(lut_float_);
    } else if (options_.dtype == c10::kBFloat16) {
      fill(lut_bfloat16_);
    } else {
      fill(lut_half_);
    }
  }
}

void ImageTransform::apply(
    const uint8_t* src, void* dst, SampleRng& rng) const {
  switch (options_.dtype) {
    case c10::kBFloat16:
      apply_to(src, static_cast<c10::BFloat16*>(dst), lut_bfloat16_, rng);
      break;
    case c10::kHalf:
      apply_to(src, static_cast<c10::Half*>(dst), lut_half_, rng);
      break;
    default:
      apply_to(src, static_cast<float*>(dst), lut_float_, rng);
  }
}

template <typename T>
void ImageTransform::apply_to(
    const uint8_t* src, T* dst, const Lut<T>& luts, SampleRng& rng) const {
  const int64_t pad = options_.crop_padding;
  // Offsets into the padded image, drawn in torchvision's order (top, left,
  // then the flip coin), though from a different generator.
  const int64_t top =
      pad > 0 ? static_cast<int64_t>(rng.below(2 * pad + 1)) : 0;
  const int64_t left =
      pad > 0 ? static_cast<int64_t>(rng.below(2 * pad + 1)) : 0;
  const bool flip = options_.horizontal_flip && (rng.next() >> 63);
  const int64_t dy = top - pad;  // source row = y + dy
  const int64_t dx = left - pad; // source column before the flip = x + dx
  const int64_t w = width_;
  // Output columns [x0, x1) read inside the source row; the rest is padding.
  // Without flip column x reads x + dx; with flip it reads w - 1 - x + dx.
  const int64_t x0 = std::min<int64_t>(
      w, flip ? std::max<int64_t>(0, dx) : std::max<int64_t>(0, -dx));
  const int64_t x1 = std::max<int64_t>(
      x0, flip ? std::min<int64_t>(w, w + dx) : std::min<int64_t>(w, w - dx));

  for (int64_t c = 0; c < channels_; ++c) {
    const T* lut = luts[c].data();
    const T fill = lut[0];
    const uint8_t* plane = src + c * height_ * w;
    T* out_plane = dst + c * height_ * w;
    for (int64_t y = 0; y < height_; ++y) {
      T* out = out_plane + y * w;
      const int64_t sy = y + dy;
      if (sy < 0 || sy >= height_) {
        std::fill(out, out + w, fill);
        continue;
      }
      std::fill(out, out + x0, fill);
      std::fill(out + x1, out + w, fill);
      const uint8_t* row = plane + sy * w;
      if (flip) {
        const uint8_t* from = row + (w - 1 + dx);
        for (int64_t x = x0; x < x1; ++x) {
          out[x] = lut[from[-x]];
        }
      } else {
        const uint8_t* from = row + dx;
        for (int64_t x = x0; x < x1; ++x) {
          out[x] = lut[from[x]];
        }
      }
    }
  }
  // Drawn only when on, so the other augmentations' draws stay as they were.
  if (options_.random_erasing > 0 && rng.uniform() < options_.random_erasing) {
    erase(dst, rng);
  }
}

template <typename T>
void ImageTransform::erase(T* dst, SampleRng& rng) const {
  // RandomErasing.get_params with scale (0.02, 0.33), ratio (0.3, 3.3):
  // up to ten tries for a box inside the image, rounded half to even as
  // Python's round, then a uniform position; none fits: left as it is.
  const double area = static_cast<double>(height_ * width_);
  const double log_low = std::log(0.3);
  const double log_high = std::log(3.3);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double erase_area = area * (0.02 + (0.33 - 0.02) * rng.uniform());
    const double aspect =
        std::exp(log_low + (log_high - log_low) * rng.uniform());
    const auto h =
        static_cast<int64_t>(std::nearbyint(std::sqrt(erase_area * aspect)));
    const auto w =
        static_cast<int64_t>(std::nearbyint(std::sqrt(erase_area / aspect)));
    if (!(h < height_ && w < width_)) {
      continue;
    }
    const auto top = static_cast<int64_t>(rng.below(height_ - h + 1));
    const auto left = static_cast<int64_t>(rng.below(width_ - w + 1));
    for (int64_t c = 0; c < channels_; ++c) {
      for (int64_t y = top; y < top + h; ++y) {
        T* row = dst + (c * height_ + y) * width_ + left;
        std::fill(row, row + w, T(0));
      }
    }
    return;
  }
}

} // namespace hotloop::data
