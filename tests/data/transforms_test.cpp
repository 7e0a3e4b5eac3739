#include "hotloop/data/transforms.h"
#include "hotloop/core/error.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

namespace hotloop::data {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kH = 6;
constexpr int64_t kW = 5;

at::Tensor random_image(int64_t channels = 1) {
  return at::randint(
      1, 256, {channels, kH, kW}, at::TensorOptions().dtype(at::kByte));
}

at::Tensor run(
    const ImageTransform& transform, const at::Tensor& image, uint64_t seed) {
  at::Tensor out = at::empty(image.sizes(), at::kFloat);
  SampleRng rng(seed);
  transform.apply(image.data_ptr<uint8_t>(), out.data_ptr<float>(), rng);
  return out;
}

TEST(ImageTransform, ScalesToUnitRangeWithoutOptions) {
  const at::Tensor image = random_image();
  const ImageTransform transform({}, 1, kH, kW);
  // The lookup table holds float(v / 255.0) computed in double.
  EXPECT_TRUE(run(transform, image, 1)
                  .equal((image.to(at::kDouble) / 255.0).to(at::kFloat)));
}

TEST(ImageTransform, NormalizesEachChannelWithItsMeanAndStd) {
  const at::Tensor image = random_image(3);
  ImageTransformOptions options;
  options.mean = {0.1, 0.5, 0.9};
  options.std = {0.2, 0.3, 0.4};
  const ImageTransform transform(options, 3, kH, kW);
  const at::Tensor mean =
      at::tensor({0.1, 0.5, 0.9}, at::kDouble).view({3, 1, 1});
  const at::Tensor std =
      at::tensor({0.2, 0.3, 0.4}, at::kDouble).view({3, 1, 1});
  const at::Tensor expected =
      ((image.to(at::kDouble) / 255.0 - mean) / std).to(at::kFloat);
  EXPECT_TRUE(run(transform, image, 1).allclose(expected, 0, 1e-6));
}

// Every output must be the input shifted by some (dy, dx) in [-pad, pad],
// zero-filled (normalized zero) where the shift leaves the image.
at::Tensor shifted(const at::Tensor& image, int64_t dy, int64_t dx) {
  at::Tensor out = at::zeros_like(image);
  for (int64_t y = 0; y < kH; ++y) {
    for (int64_t x = 0; x < kW; ++x) {
      const int64_t sy = y + dy, sx = x + dx;
      if (sy >= 0 && sy < kH && sx >= 0 && sx < kW) {
        out[0][y][x] = image[0][sy][sx];
      }
    }
  }
  return out;
}

TEST(ImageTransform, RandomCropIsAShiftWithinThePaddingAndCoversEveryOffset) {
  const at::Tensor image = random_image();
  ImageTransformOptions options;
  options.crop_padding = 2;
  const ImageTransform transform(options, 1, kH, kW);
  std::set<std::pair<int64_t, int64_t>> seen;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    const at::Tensor out = run(transform, image, seed);
    int matches = 0;
    for (int64_t dy = -2; dy <= 2; ++dy) {
      for (int64_t dx = -2; dx <= 2; ++dx) {
        if (out.equal((shifted(image, dy, dx).to(at::kDouble) / 255.0)
                          .to(at::kFloat))) {
          seen.insert({dy, dx});
          ++matches;
        }
      }
    }
    ASSERT_EQ(matches, 1) << "seed " << seed;
  }
  EXPECT_EQ(seen.size(), 25u);
}

TEST(ImageTransform, HorizontalFlipMirrorsAboutHalfTheSamples) {
  const at::Tensor image = random_image();
  ImageTransformOptions options;
  options.horizontal_flip = true;
  const ImageTransform transform(options, 1, kH, kW);
  const at::Tensor plain = (image.to(at::kDouble) / 255.0).to(at::kFloat);
  int flipped = 0;
  for (uint64_t seed = 0; seed < 1000; ++seed) {
    const at::Tensor out = run(transform, image, seed);
    if (out.equal(plain.flip({2}))) {
      ++flipped;
    } else {
      ASSERT_TRUE(out.equal(plain)) << "seed " << seed;
    }
  }
  EXPECT_GT(flipped, 430);
  EXPECT_LT(flipped, 570);
}

TEST(
    ImageTransform,
    RandomErasingZeroesOneBoxOfTorchvisionsSizesInEveryChannel) {
  constexpr int64_t kC = 3, kBigH = 24, kBigW = 20;
  // Pixel bytes 1..255: no value but an erased one is 0.
  const at::Tensor image = at::randint(
      1, 256, {kC, kBigH, kBigW}, at::TensorOptions().dtype(at::kByte));
  ImageTransformOptions options;
  options.random_erasing = 1.0;
  const ImageTransform transform(options, kC, kBigH, kBigW);
  const at::Tensor plain = (image.to(at::kDouble) / 255.0).to(at::kFloat);
  int wide = 0, tall = 0, erased = 0;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    const at::Tensor out = run(transform, image, seed);
    const at::Tensor zero = out.eq(0);
    // The same box in every channel, the rest untouched.
    ASSERT_TRUE(zero[0].equal(zero[1]) && zero[0].equal(zero[2]));
    ASSERT_TRUE(out.masked_fill(zero, 0).equal(plain.masked_fill(zero, 0)));
    const at::Tensor rows = zero[0].any(1).nonzero();
    const at::Tensor cols = zero[0].any(0).nonzero();
    if (rows.numel() == 0) {
      continue; // ten tries without a fit: rare for this size
    }
    ++erased;
    const int64_t h = rows.numel(), w = cols.numel();
    // A filled rectangle, inside the image.
    ASSERT_EQ(zero[0].sum().item<int64_t>(), h * w) << "seed " << seed;
    ASSERT_EQ(rows[-1].item<int64_t>() - rows[0].item<int64_t>() + 1, h);
    ASSERT_LT(h, kBigH);
    ASSERT_LT(w, kBigW);
    // 2% to 33% of the area and ratios 0.3 to 3.3, before rounding h, w.
    const double share = static_cast<double>(h * w) / (kBigH * kBigW);
    EXPECT_GT(share, 0.005) << "seed " << seed;
    EXPECT_LT(share, 0.42) << "seed " << seed;
    wide += w > h;
    tall += h > w;
  }
  EXPECT_GE(erased, 290);
  EXPECT_GT(wide, 50);
  EXPECT_GT(tall, 50);

  // p: about half of the samples.
  options.random_erasing = 0.5;
  const ImageTransform half(options, kC, kBigH, kBigW);
  int changed = 0;
  for (uint64_t seed = 0; seed < 1000; ++seed) {
    changed += !run(half, image, seed).equal(plain);
  }
  EXPECT_GT(changed, 430);
  EXPECT_LT(changed, 570);
}

TEST(ImageTransform, OutputDependsOnlyOnTheSeed) {
  const at::Tensor image = random_image();
  ImageTransformOptions options;
  options.crop_padding = 2;
  options.horizontal_flip = true;
  const ImageTransform transform(options, 1, kH, kW);
  const uint64_t seed = SampleRng::mix(7, 3, 11);
  EXPECT_TRUE(run(transform, image, seed).equal(run(transform, image, seed)));
  EXPECT_NE(SampleRng::mix(7, 3, 11), SampleRng::mix(7, 4, 11));
  EXPECT_NE(SampleRng::mix(7, 3, 11), SampleRng::mix(7, 3, 12));
  EXPECT_NE(SampleRng::mix(7, 3, 11), SampleRng::mix(8, 3, 11));
}

TEST(ImageTransform, InvalidOptionsNameTheOption) {
  ImageTransformOptions options;
  options.crop_padding = -1;
  EXPECT_THAT(
      [&] { ImageTransform(options, 1, kH, kW); },
      ::testing::ThrowsMessage<ConfigError>(
          HasSubstr("data.crop_padding must be >= 0, got -1")));
  options = {};
  options.mean = {0.5, 0.5};
  options.std = {0.5, 0.5};
  EXPECT_THAT(
      [&] { ImageTransform(options, 3, kH, kW); },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr(
          "data.mean has 2 values; expected 1 or 3 (one per channel)")));
  options.mean = {0.5};
  options.std = {0.0};
  EXPECT_THAT(
      [&] { ImageTransform(options, 1, kH, kW); },
      ::testing::ThrowsMessage<ConfigError>(
          HasSubstr("data.std values must be positive, got 0")));
  options.std = {};
  EXPECT_THAT(
      [&] { ImageTransform(options, 1, kH, kW); },
      ::testing::ThrowsMessage<ConfigError>(
          HasSubstr("data.mean and data.std must be given together")));
  options = {};
  options.random_erasing = 1.5;
  EXPECT_THAT(
      [&] { ImageTransform(options, 1, kH, kW); },
      ::testing::ThrowsMessage<ConfigError>(
          HasSubstr("data.random_erasing must be in [0, 1], got 1.5")));
}

} // namespace
} // namespace hotloop::data

namespace hotloop::data {
namespace {

TEST(ImageTransform, HalfPrecisionOutputsAreTheFloatValuesRoundedOnce) {
  const at::Tensor image = at::randint(0, 256, {2, 7, 9}).to(at::kByte);
  ImageTransformOptions options;
  options.crop_padding = 3;
  options.horizontal_flip = true;
  options.mean = {0.3, 0.6};
  options.std = {0.2, 0.4};
  const ImageTransform as_float(options, 2, 7, 9);
  for (auto dtype : {at::kBFloat16, at::kHalf}) {
    options.dtype = dtype;
    const ImageTransform as_half(options, 2, 7, 9);
    for (uint64_t seed = 0; seed < 20; ++seed) {
      at::Tensor expected = at::empty({2, 7, 9}, at::kFloat);
      at::Tensor got = at::empty({2, 7, 9}, dtype);
      SampleRng a(seed), b(seed);
      as_float.apply(image.data_ptr<uint8_t>(), expected.data_ptr(), a);
      as_half.apply(image.data_ptr<uint8_t>(), got.data_ptr(), b);
      ASSERT_TRUE(got.equal(expected.to(dtype))) << dtype << " seed " << seed;
    }
  }
  options.dtype = at::kDouble;
  EXPECT_THAT(
      [&] { ImageTransform(options, 2, 7, 9); },
      ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr(
          "data.dtype must be float32, bfloat16 or float16, got Double")));
}

TEST(ImageTransform, PaddingWiderThanTheImageGivesFillOrAShiftedImage) {
  const at::Tensor image = at::randint(1, 256, {1, 3, 3}).to(at::kByte);
  ImageTransformOptions options;
  options.crop_padding = 5;
  options.horizontal_flip = true;
  const ImageTransform transform(options, 1, 3, 3);
  for (uint64_t seed = 0; seed < 200; ++seed) {
    at::Tensor out = at::empty({1, 3, 3}, at::kFloat);
    SampleRng rng(seed);
    transform.apply(image.data_ptr<uint8_t>(), out.data_ptr(), rng);
    ASSERT_TRUE(out.ge(0).all().item<bool>() && out.le(1).all().item<bool>());
  }
}

} // namespace
} // namespace hotloop::data
