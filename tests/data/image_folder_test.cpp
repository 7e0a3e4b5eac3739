#include "hotloop/data/image_folder.h"
#include "hotloop/core/error.h"
#include "hotloop/data/image_dataset.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <png.h>
#include <turbojpeg.h>

#include <cstring>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace hotloop::data {
namespace {

namespace fs = std::filesystem;
using ::hotloop::testing::TempDir;
using ::hotloop::testing::write_bytes;
using ::hotloop::testing::write_png;
using ::testing::HasSubstr;

// A random image: [height, width, channels] uint8.
at::Tensor random_image(int64_t height, int64_t width, int64_t channels = 3) {
  return at::randint(
      0, 256, {height, width, channels}, at::TensorOptions().dtype(at::kByte));
}

// The bytes of image [H, W, 3] uint8 as a 4:4:4 JPEG.
std::vector<uint8_t> jpeg_bytes(const at::Tensor& image, int quality = 95) {
  tjhandle encoder = tjInitCompress();
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  const at::Tensor pixels = image.contiguous();
  if (tjCompress2(
          encoder,
          pixels.data_ptr<uint8_t>(),
          static_cast<int>(image.size(1)),
          0,
          static_cast<int>(image.size(0)),
          TJPF_RGB,
          &buffer,
          &size,
          TJSAMP_444,
          quality,
          0) != 0) {
    throw std::runtime_error(tjGetErrorStr2(encoder));
  }
  std::vector<uint8_t> bytes(buffer, buffer + size);
  tjFree(buffer);
  tjDestroy(encoder);
  return bytes;
}

void write_jpeg(const std::string& path, const at::Tensor& image) {
  fs::create_directories(fs::path(path).parent_path());
  write_bytes(path, jpeg_bytes(image));
}

// TurboJPEG's own RGB decode of `bytes`: [H, W, 3] uint8.
at::Tensor decode_with_turbojpeg(const std::vector<uint8_t>& bytes) {
  tjhandle decoder = tjInitDecompress();
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  tjDecompressHeader3(
      decoder,
      bytes.data(),
      bytes.size(),
      &width,
      &height,
      &subsampling,
      &colorspace);
  at::Tensor out = at::empty({height, width, 3}, at::kByte);
  tjDecompress2(
      decoder,
      bytes.data(),
      bytes.size(),
      out.data_ptr<uint8_t>(),
      width,
      0,
      height,
      TJPF_RGB,
      0);
  tjDestroy(decoder);
  return out;
}

// The uint8 pixels behind an untransformed output ([C, H, W] float v/255).
at::Tensor pixels_of(const at::Tensor& output) {
  return (output * 255).round().to(at::kByte);
}

// image [H, W, C] uint8 -> [C, H, W] uint8
at::Tensor chw(const at::Tensor& image) {
  return image.permute({2, 0, 1}).contiguous();
}

Batch empty_batch(const Dataset& dataset, int64_t rows) {
  const SampleSpec spec = dataset.spec();
  std::vector<int64_t> input = {rows};
  input.insert(input.end(), spec.input_shape.begin(), spec.input_shape.end());
  return Batch{
      at::empty(input, at::TensorOptions().dtype(spec.input_dtype)),
      at::empty({rows}, at::kLong)};
}

TEST(ImageFolder, ClassesAndSamplesAreSortedLikeTorchvision) {
  TempDir dir;
  const std::string root = dir.file("root");
  write_png(root + "/dog/b.png", random_image(4, 4));
  write_png(root + "/dog/a.PNG", random_image(4, 4));
  write_jpeg(root + "/cat/z.jpg", random_image(4, 4));
  write_jpeg(root + "/cat/sub/a.JPEG", random_image(4, 4));
  write_jpeg(root + "/cat/y.Jpg", random_image(4, 4));
  write_bytes(root + "/cat/notes.txt", {1, 2, 3});
  write_png(root + "/.hidden/c.png", random_image(4, 4));
  write_bytes(root + "/readme.jpg", {1});

  const ImageFolder dataset(root, ImageFolderOptions({4, 4}));
  EXPECT_EQ(dataset.classes(), (std::vector<std::string>{"cat", "dog"}));
  std::vector<std::string> paths;
  std::vector<int64_t> targets;
  for (const ImageFolder::Sample& sample : dataset.samples()) {
    paths.push_back(sample.path);
    targets.push_back(sample.target);
  }
  // Each folder's files, then its subfolders' (sorted os.walk order).
  EXPECT_EQ(
      paths,
      (std::vector<std::string>{
          root + "/cat/y.Jpg",
          root + "/cat/z.jpg",
          root + "/cat/sub/a.JPEG",
          root + "/dog/a.PNG",
          root + "/dog/b.png"}));
  EXPECT_EQ(targets, (std::vector<int64_t>{0, 0, 0, 1, 1}));
  EXPECT_EQ(dataset.size(), 5);
  EXPECT_EQ(dataset.get(3, SampleContext{}).target.item<int64_t>(), 1);
  EXPECT_EQ(dataset.get(3, SampleContext{}).target.dim(), 0);
}

TEST(ImageFolder, PngAtTheOutputSizeKeepsExactPixels) {
  TempDir dir;
  const at::Tensor rgb = random_image(5, 7);
  const at::Tensor gray = random_image(5, 7, 1);
  write_png(dir.file("root/a/rgb.png"), rgb);
  write_png(dir.file("root/b/gray.png"), gray);
  const ImageFolder dataset(dir.file("root"), ImageFolderOptions({5, 7}));
  const SampleSpec spec = dataset.spec();
  EXPECT_EQ(spec.input_shape, (std::vector<int64_t>{3, 5, 7}));
  EXPECT_EQ(spec.input_dtype, at::kFloat);
  EXPECT_EQ(spec.target_shape, std::vector<int64_t>{});
  EXPECT_EQ(spec.target_dtype, at::kLong);

  const at::Tensor out = dataset.get(0, SampleContext{}).input;
  EXPECT_EQ(out.scalar_type(), at::kFloat);
  // ToTensor: v / 255 computed in double, rounded once to float.
  EXPECT_TRUE(out.equal((chw(rgb).to(at::kDouble) / 255.0).to(at::kFloat)));
  // A grayscale file read as RGB repeats its one channel.
  EXPECT_TRUE(pixels_of(dataset.get(1, SampleContext{}).input)
                  .equal(chw(gray).expand({3, 5, 7})));
}

// uint8 output [C, H, W] against ATen's upsample_bilinear2d of the same
// image in float, rounded half to even: equal except within 5e-3 of a tie,
// which float rounding may break either way (LibTorch versions differ there
// too), and never more than 1 apart.
void expect_matches_interpolate(
    const at::Tensor& got, const at::Tensor& image, int64_t h, int64_t w) {
  const at::Tensor reference =
      at::upsample_bilinear2d(
          chw(image).unsqueeze(0).to(at::kFloat), {h, w}, false)
          .squeeze(0);
  const at::Tensor expected = reference.round();
  const at::Tensor actual = got.to(at::kFloat);
  EXPECT_LE((actual - expected).abs().max().item<float>(), 1.0f);
  const at::Tensor clear = ((reference - reference.floor()) - 0.5).abs() > 5e-3;
  EXPECT_TRUE(actual.masked_select(clear).equal(expected.masked_select(clear)))
      << "resizing to " << h << "x" << w;
}

TEST(ImageFolder, ResizeMatchesBilinearInterpolateWithoutAntialias) {
  TempDir dir;
  const at::Tensor image = random_image(13, 17);
  write_png(dir.file("root/a/x.png"), image);
  const std::vector<std::vector<int64_t>> sizes = {
      {8, 8}, {20, 31}, {13, 40}, {1, 1}, {3, 17}};
  for (const std::vector<int64_t>& size : sizes) {
    const ImageFolder dataset(dir.file("root"), ImageFolderOptions(size));
    const at::Tensor got = pixels_of(dataset.get(0, SampleContext{}).input);
    EXPECT_EQ(got.sizes(), at::IntArrayRef({3, size[0], size[1]}));
    expect_matches_interpolate(got, image, size[0], size[1]);
  }
}

TEST(ImageFolder, GrayscaleUsesPilLumaWeights) {
  TempDir dir;
  const at::Tensor image = random_image(6, 9);
  write_png(dir.file("root/a/x.png"), image);
  const ImageFolder dataset(
      dir.file("root"), ImageFolderOptions({6, 9}).channels(1));
  EXPECT_EQ(dataset.spec().input_shape, (std::vector<int64_t>{1, 6, 9}));
  // PIL: L = (R * 19595 + G * 38470 + B * 7471 + 0x8000) >> 16
  const at::Tensor rgb = chw(image).to(at::kLong);
  const at::Tensor luma =
      (rgb[0] * 19595 + rgb[1] * 38470 + rgb[2] * 7471 + 0x8000)
          .div(65536, "floor")
          .to(at::kByte)
          .unsqueeze(0);
  EXPECT_TRUE(pixels_of(dataset.get(0, SampleContext{}).input).equal(luma));

  // Then resized like any other image.
  const ImageFolder small(
      dir.file("root"), ImageFolderOptions({4, 5}).channels(1));
  expect_matches_interpolate(
      pixels_of(small.get(0, SampleContext{}).input),
      luma.permute({1, 2, 0}),
      4,
      5);
}

TEST(ImageFolder, AlphaIsDroppedNotComposited) {
  TempDir dir;
  const at::Tensor image = random_image(4, 6, 4);
  write_png(dir.file("root/a/x.png"), image);
  const ImageFolder dataset(dir.file("root"), ImageFolderOptions({4, 6}));
  EXPECT_TRUE(pixels_of(dataset.get(0, SampleContext{}).input)
                  .equal(chw(image.narrow(2, 0, 3))));
}

TEST(ImageFolder, JpegDecodesAsTurboJpegDoesAndCloseToTheSource) {
  TempDir dir;
  // A smooth image, so that JPEG keeps it close.
  const at::Tensor y = at::arange(24, at::kFloat).view({24, 1, 1});
  const at::Tensor x = at::arange(32, at::kFloat).view({1, 32, 1});
  const at::Tensor c = at::tensor({1.f, 2.f, 3.f}).view({1, 1, 3});
  const at::Tensor image = (y * 4 + x * 3 * c + 20).clamp(0, 255).to(at::kByte);
  write_jpeg(dir.file("root/a/x.jpg"), image);
  const ImageFolder dataset(dir.file("root"), ImageFolderOptions({24, 32}));
  const at::Tensor got = pixels_of(dataset.get(0, SampleContext{}).input);
  const at::Tensor decoded = decode_with_turbojpeg(jpeg_bytes(image));
  EXPECT_TRUE(got.equal(chw(decoded)));
  EXPECT_LE(
      (got.to(at::kInt) - chw(image).to(at::kInt)).abs().max().item<int>(), 6);
}

TEST(ImageFolder, CenterCropIsResizeThenTheCentralBox) {
  TempDir dir;
  const at::Tensor image = random_image(10, 20);
  write_png(dir.file("root/a/x.png"), image);
  // Resize(5) scales the shorter side 10 by 1/2, so CenterCrop(4) is the
  // central 8 x 8 box of the file: rows 1..8, columns 6..13.
  const ImageFolder dataset(
      dir.file("root"),
      ImageFolderOptions({4, 4}).crop("center_crop").resize_size(5));
  expect_matches_interpolate(
      pixels_of(dataset.get(0, SampleContext{}).input),
      image.narrow(0, 1, 8).narrow(1, 6, 8),
      4,
      4);
  // At the default resize size (image_size / 0.875 = 9 here) the box of a
  // 10-pixel side for 8 outputs is 10 * 8 / 9 = 9 pixels, rounded.
  const ImageFolder standard(
      dir.file("root"), ImageFolderOptions({8, 8}).crop("center_crop"));
  expect_matches_interpolate(
      pixels_of(standard.get(0, SampleContext{}).input),
      image.narrow(0, 0, 9).narrow(1, 5, 9),
      8,
      8);
}

TEST(ImageFolder, RandomResizedCropTakesABoxPerSampleAndEpoch) {
  TempDir dir;
  const at::Tensor image = random_image(12, 12);
  write_png(dir.file("root/a/x.png"), image);
  // A quarter of the area at aspect 1: a 6 x 6 window, kept at its size,
  // so the output is exactly the file's pixels somewhere.
  const ImageFolder dataset(
      dir.file("root"),
      ImageFolderOptions({6, 6})
          .crop("random_resized_crop")
          .crop_scale({0.25, 0.25})
          .crop_ratio({1.0, 1.0}));
  std::set<std::pair<int64_t, int64_t>> corners;
  for (uint64_t epoch = 0; epoch < 12; ++epoch) {
    SampleContext context;
    context.seed = 3;
    context.epoch = epoch;
    const at::Tensor got = pixels_of(dataset.get(0, context).input);
    EXPECT_TRUE(got.equal(pixels_of(dataset.get(0, context).input)))
        << "the same sample and epoch give the same box";
    bool found = false;
    for (int64_t top = 0; top <= 6 && !found; ++top) {
      for (int64_t left = 0; left <= 6 && !found; ++left) {
        if (got.equal(chw(image.narrow(0, top, 6).narrow(1, left, 6)))) {
          corners.emplace(top, left);
          found = true;
        }
      }
    }
    EXPECT_TRUE(found) << "epoch " << epoch << ": not a 6 x 6 window";
  }
  EXPECT_GT(corners.size(), 4u) << "the box moves from epoch to epoch";
  // The whole area at the image's own aspect is the plain resize.
  const ImageFolder whole(
      dir.file("root"),
      ImageFolderOptions({5, 5})
          .crop("random_resized_crop")
          .crop_scale({1.0, 1.0})
          .crop_ratio({1.0, 1.0}));
  const ImageFolder resized(dir.file("root"), ImageFolderOptions({5, 5}));
  EXPECT_TRUE(whole.get(0, SampleContext{}).input.equal(
      resized.get(0, SampleContext{}).input));
}

TEST(ImageFolder, LargeJpegsDecodeAtADctScaleThatKeepsTheOutputSize) {
  TempDir dir;
  const at::Tensor y = at::arange(64, at::kFloat).view({64, 1, 1});
  const at::Tensor x = at::arange(96, at::kFloat).view({1, 96, 1});
  const at::Tensor c = at::tensor({1.f, 0.5f, 0.25f}).view({1, 1, 3});
  const at::Tensor image = (y * 2 + x * c + 10).clamp(0, 255).to(at::kByte);
  const std::vector<uint8_t> bytes = jpeg_bytes(image);
  fs::create_directories(dir.file("root/a"));
  write_bytes(dir.file("root/a/x.jpg"), bytes);
  // 64 x 96 to 8 x 12 is exactly 1/8: TurboJPEG's own scaled decode,
  // pixel for pixel.
  tjhandle decoder = tjInitDecompress();
  at::Tensor eighth = at::empty({8, 12, 3}, at::kByte);
  ASSERT_EQ(
      tjDecompress2(
          decoder,
          bytes.data(),
          bytes.size(),
          eighth.data_ptr<uint8_t>(),
          12,
          0,
          8,
          TJPF_RGB,
          0),
      0);
  tjDestroy(decoder);
  const ImageFolder draft(dir.file("root"), ImageFolderOptions({8, 12}));
  const at::Tensor got = pixels_of(draft.get(0, SampleContext{}).input);
  EXPECT_TRUE(got.equal(chw(eighth)));
  // Without it, the full decode resized: close on a smooth image.
  const ImageFolder full(
      dir.file("root"), ImageFolderOptions({8, 12}).jpeg_draft(false));
  const at::Tensor exact = pixels_of(full.get(0, SampleContext{}).input);
  EXPECT_FALSE(got.equal(exact));
  EXPECT_LE((got.to(at::kInt) - exact.to(at::kInt)).abs().max().item<int>(), 4);
  // 20 x 30 keeps 1/2 (32 x 48 >= 20 x 30, 16 x 24 would not be).
  const ImageFolder half(dir.file("root"), ImageFolderOptions({20, 30}));
  const at::Tensor halved = pixels_of(half.get(0, SampleContext{}).input);
  EXPECT_LE(
      (halved.to(at::kInt) -
       pixels_of(ImageFolder(
                     dir.file("root"),
                     ImageFolderOptions({20, 30}).jpeg_draft(false))
                     .get(0, SampleContext{})
                     .input)
           .to(at::kInt))
          .abs()
          .max()
          .item<int>(),
      4);
}

TEST(ImageFolder, BadCropOptionsNameTheOption) {
  TempDir dir;
  write_png(dir.file("root/a/x.png"), random_image(4, 4));
  EXPECT_THAT(
      [&] {
        ImageFolder(dir.file("root"), ImageFolderOptions({4, 4}).crop("zoom"));
      },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr(
          "data.crop must be resize, center_crop or random_resized_crop, got "
          "'zoom'")));
  EXPECT_THAT(
      [&] {
        ImageFolder(
            dir.file("root"), ImageFolderOptions({4, 4}).crop_scale({0.5, 0.1}));
      },
      ::testing::ThrowsMessage<ConfigError>(
          HasSubstr("data.crop_scale must be [min, max] with 0 < min <= max "
                    "<= 1, got [0.5, 0.1]")));
  EXPECT_THAT(
      [&] {
        ImageFolder(
            dir.file("root"), ImageFolderOptions({4, 4}).crop_ratio({0, 1}));
      },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr("data.crop_ratio")));
  EXPECT_THAT(
      [&] {
        ImageFolder(
            dir.file("root"), ImageFolderOptions({8, 8}).resize_size(7));
      },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr(
          "data.resize_size must be 0 or at least the larger side of "
          "data.image_size [8, 8], got 7")));
}

TEST(ImageFolder, FormatComesFromTheContentNotTheExtension) {
  TempDir dir;
  const at::Tensor image = random_image(5, 5);
  write_png(dir.file("png/a/really_a_png.jpg"), image);
  EXPECT_TRUE(pixels_of(ImageFolder(dir.file("png"), ImageFolderOptions({5, 5}))
                            .get(0, SampleContext{})
                            .input)
                  .equal(chw(image)));
  write_jpeg(dir.file("jpeg/a/really_a_jpeg.png"), image);
  EXPECT_TRUE(
      pixels_of(ImageFolder(dir.file("jpeg"), ImageFolderOptions({5, 5}))
                    .get(0, SampleContext{})
                    .input)
          .equal(chw(decode_with_turbojpeg(jpeg_bytes(image)))));
}

TEST(ImageFolder, TransformRunsAfterTheResizeAsInImageClassificationDataset) {
  TempDir dir;
  std::vector<at::Tensor> images;
  for (int i = 0; i < 6; ++i) {
    images.push_back(random_image(9 + i, 7));
    write_png(
        dir.file(
            "root/c" + std::to_string(i % 2) + "/" + std::to_string(i) +
            ".png"),
        images.back());
  }
  ImageTransformOptions transform;
  transform.crop_padding = 2;
  transform.horizontal_flip = true;
  transform.mean = {0.5, 0.4, 0.3};
  transform.std = {0.2, 0.25, 0.3};
  const ImageFolder plain(dir.file("root"), ImageFolderOptions({8, 6}));
  const ImageFolder augmented(
      dir.file("root"), ImageFolderOptions({8, 6}).transform(transform));

  std::vector<at::Tensor> resized, labels;
  for (int64_t i = 0; i < plain.size(); ++i) {
    const Example example = plain.get(i, SampleContext{});
    resized.push_back(pixels_of(example.input));
    labels.push_back(example.target);
  }
  const ImageClassificationDataset reference(
      at::stack(resized), at::stack(labels), transform);
  for (const SampleContext context :
       {SampleContext{0, 0}, SampleContext{7, 3}}) {
    for (int64_t i = 0; i < plain.size(); ++i) {
      EXPECT_TRUE(augmented.get(i, context)
                      .input.equal(reference.get(i, context).input))
          << "sample " << i << ", epoch " << context.epoch;
    }
  }
}

TEST(ImageFolder, GetBatchEqualsStackedGet) {
  TempDir dir;
  write_png(dir.file("root/a/0.png"), random_image(10, 12));
  write_jpeg(dir.file("root/a/1.jpg"), random_image(7, 5));
  write_png(dir.file("root/b/2.png"), random_image(3, 3, 1));
  write_png(dir.file("root/c/3.png"), random_image(8, 8, 4));
  ImageTransformOptions transform;
  transform.crop_padding = 1;
  transform.horizontal_flip = true;
  for (const int64_t channels : {1, 3}) {
    const ImageFolder dataset(
        dir.file("root"),
        ImageFolderOptions({6, 5}).channels(channels).transform(transform));
    const std::vector<int64_t> indices = {3, 0, 2, 2, 1};
    const SampleContext context{42, 5};
    Batch batch = empty_batch(dataset, 5);
    dataset.get_batch(indices, context, batch);
    for (size_t k = 0; k < indices.size(); ++k) {
      const Example example = dataset.get(indices[k], context);
      EXPECT_TRUE(batch.input[k].equal(example.input)) << "row " << k;
      EXPECT_TRUE(batch.target[k].equal(example.target)) << "row " << k;
    }
  }
}

TEST(ImageFolder, ConcurrentReadsGiveTheSameValues) {
  TempDir dir;
  for (int i = 0; i < 8; ++i) {
    const std::string name = "root/c" + std::to_string(i % 3) + "/" +
                             std::to_string(i) + (i % 2 ? ".jpg" : ".png");
    if (i % 2) {
      write_jpeg(dir.file(name), random_image(20 + i, 30));
    } else {
      write_png(dir.file(name), random_image(30, 20 + i));
    }
  }
  const ImageFolder dataset(dir.file("root"), ImageFolderOptions({16, 16}));
  std::vector<at::Tensor> expected;
  for (int64_t i = 0; i < dataset.size(); ++i) {
    expected.push_back(dataset.get(i, SampleContext{}).input);
  }
  std::vector<std::vector<at::Tensor>> seen(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < seen.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        for (int64_t i = 0; i < dataset.size(); ++i) {
          seen[t].push_back(dataset.get(i, SampleContext{}).input);
        }
      }
    });
  }
  for (std::thread& thread : threads) {
    thread.join();
  }
  for (const auto& results : seen) {
    for (size_t j = 0; j < results.size(); ++j) {
      EXPECT_TRUE(results[j].equal(expected[j % expected.size()]));
    }
  }
}

TEST(ImageFolder, MissingOrEmptyFoldersAreNamed) {
  TempDir dir;
  EXPECT_THROWS_WITH(
      DataError,
      ImageFolder(dir.file("absent"), ImageFolderOptions({4, 4})),
      dir.file("absent") + ": no such folder");
  fs::create_directories(dir.file("empty"));
  write_png(dir.file("empty/loose.png"), random_image(2, 2));
  EXPECT_THROWS_WITH(
      DataError,
      ImageFolder(dir.file("empty"), ImageFolderOptions({4, 4})),
      dir.file("empty") + ": no class folders (expected " + dir.file("empty") +
          "/<class>/<image>.jpg, .jpeg or .png)");
  write_png(dir.file("root/cat/1.png"), random_image(2, 2));
  fs::create_directories(dir.file("root/dog/sub"));
  write_bytes(dir.file("root/dog/notes.txt"), {1});
  EXPECT_THROWS_WITH(
      DataError,
      ImageFolder(dir.file("root"), ImageFolderOptions({4, 4})),
      dir.file("root") +
          "/dog: no images (expected .jpg, .jpeg or .png files)");
}

TEST(ImageFolder, CorruptImagesAreNamedWhenRead) {
  TempDir dir;
  const std::string root = dir.file("root");
  write_png(root + "/cat/0.png", random_image(4, 4));
  write_bytes(root + "/cat/1.jpg", {'n', 'o', 't', ' ', 'j', 'p', 'e', 'g'});
  std::vector<uint8_t> jpeg = jpeg_bytes(random_image(64, 64));
  jpeg.resize(jpeg.size() / 2);
  write_bytes(root + "/cat/2.jpg", jpeg);
  write_bytes(
      root + "/cat/3.png", {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n', 0, 0});
  write_bytes(root + "/cat/4.jpeg", {});
  write_bytes(root + "/cat/5.jpg", {0xFF, 0xD8, 0xFF, 0xD9});
  const ImageFolder dataset(root, ImageFolderOptions({4, 4}));
  EXPECT_NO_THROW(dataset.get(0, SampleContext{}));
  EXPECT_THROWS_WITH(
      DataError,
      dataset.get(1, SampleContext{}),
      root +
          "/cat/1.jpg: not a valid JPEG: Not a JPEG file: starts with 0x6e "
          "0x6f");
  EXPECT_THROWS_WITH(
      DataError,
      dataset.get(2, SampleContext{}),
      root + "/cat/2.jpg: not a valid JPEG: Premature end of JPEG file");
  EXPECT_THROWS_WITH(
      DataError,
      dataset.get(3, SampleContext{}),
      root + "/cat/3.png: not a valid PNG: ");
  EXPECT_THROWS_WITH(
      DataError,
      dataset.get(4, SampleContext{}),
      root + "/cat/4.jpeg: empty file");
  EXPECT_THROWS_WITH(
      DataError,
      dataset.get(5, SampleContext{}),
      root + "/cat/5.jpg: not a valid JPEG: no image data");
  Batch batch = empty_batch(dataset, 2);
  EXPECT_THROWS_WITH(
      DataError,
      dataset.get_batch(std::vector<int64_t>{0, 3}, SampleContext{}, batch),
      root + "/cat/3.png: not a valid PNG: ");
  fs::remove(root + "/cat/0.png");
  EXPECT_THROWS_WITH(
      DataError,
      dataset.get(0, SampleContext{}),
      root + "/cat/0.png: cannot open: ");
}

TEST(ImageFolder, SkippingBadFilesGivesTheNextReadableSampleAndNamesThem) {
  TempDir dir;
  const std::string root = dir.file("root");
  write_png(root + "/cat/0.png", random_image(4, 4));
  write_bytes(root + "/cat/1.jpg", {'n', 'o', 't'});
  write_png(root + "/cat/2.png", random_image(4, 4));
  write_png(root + "/dog/1.png", random_image(4, 4));
  write_bytes(root + "/dog/0.png", {});
  const ImageFolder dataset(
      root, ImageFolderOptions({4, 4}).on_bad_sample("skip"));
  // Sample 1 stands in as 2, with 2's class; the empty file as dog/1.
  const Example one = dataset.get(1, SampleContext{});
  EXPECT_TRUE(one.input.equal(dataset.get(2, SampleContext{}).input));
  EXPECT_EQ(one.target.item<int64_t>(), 0);
  Batch batch = empty_batch(dataset, 2);
  dataset.get_batch(std::vector<int64_t>{3, 0}, SampleContext{}, batch);
  EXPECT_TRUE(batch.input[0].equal(dataset.get(4, SampleContext{}).input));
  EXPECT_EQ(batch.target[0].item<int64_t>(), 1);
  const auto bad = dataset.bad_samples();
  ASSERT_EQ(bad.size(), 2u);
  EXPECT_THAT(bad.at(1), HasSubstr(root + "/cat/1.jpg: not a valid JPEG"));
  EXPECT_THAT(bad.at(3), HasSubstr(root + "/dog/0.png: empty file"));

  write_bytes(root + "/cat/0.png", {});
  write_bytes(root + "/cat/2.png", {});
  write_bytes(root + "/dog/1.png", {});
  const ImageFolder broken(
      root, ImageFolderOptions({4, 4}).on_bad_sample("skip"));
  EXPECT_THROWS_WITH(
      DataError,
      broken.get(0, SampleContext{}),
      "none of the 5 images can be read; the first: " + root +
          "/cat/0.png: empty file");
  EXPECT_THAT(
      [&] {
        ImageFolder(root, ImageFolderOptions({4, 4}).on_bad_sample("maybe"));
      },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr(
          "data.on_bad_sample must be fail or skip, got 'maybe'")));
}

TEST(ImageFolder, BadOptionsNameTheOption) {
  TempDir dir;
  write_png(dir.file("root/a/x.png"), random_image(2, 2));
  EXPECT_THROWS_WITH(
      ConfigError,
      ImageFolder(dir.file("root"), ImageFolderOptions({4})),
      "data.image_size must be [height, width] with positive values, got [4]");
  EXPECT_THROWS_WITH(
      ConfigError,
      ImageFolder(dir.file("root"), ImageFolderOptions({4, 0})),
      "got [4, 0]");
  EXPECT_THROWS_WITH(
      ConfigError,
      ImageFolder(dir.file("root"), ImageFolderOptions({4, 4}).channels(2)),
      "data.channels must be 1 (grayscale) or 3 (RGB), got 2");
  ImageTransformOptions transform;
  transform.mean = {0.5, 0.5};
  transform.std = {0.2, 0.2};
  EXPECT_THROWS_WITH(
      ConfigError,
      ImageFolder(
          dir.file("root"), ImageFolderOptions({4, 4}).transform(transform)),
      "data.mean has 2 values; expected 1 or 3");
}

TEST(ImageFolder, OutOfRangeIndicesAndBadBatchesAreRejected) {
  TempDir dir;
  write_png(dir.file("root/a/x.png"), random_image(2, 2));
  const ImageFolder dataset(dir.file("root"), ImageFolderOptions({4, 4}));
  EXPECT_THROWS_WITH(
      Error,
      dataset.get(1, SampleContext{}),
      "sample index 1 is out of range for a dataset of 1");
  Batch batch{at::empty({1, 3, 4, 5}), at::empty({1}, at::kLong)};
  EXPECT_THROWS_WITH(
      Error,
      dataset.get_batch(std::vector<int64_t>{0}, SampleContext{}, batch),
      "an image batch must be contiguous Float[1, 3, 4, 4] and int64 [1], got "
      "Float[1, 3, 4, 5] and Long[1]");
}

} // namespace
} // namespace hotloop::data
