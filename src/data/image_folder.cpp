#include "hotloop/data/image_folder.h"

#include "hotloop/core/error.h"

#include <ATen/ATen.h>
#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <utility>

namespace hotloop::data {
namespace {

namespace fs = std::filesystem;

// An 8-bit image with `stride` interleaved bytes per pixel, RGB first.
struct Pixels {
  int64_t height = 0;
  int64_t width = 0;
  int64_t stride = 0;
  std::vector<uint8_t> data;
};

std::string lower_extension(const fs::path& path) {
  std::string extension = path.extension().string();
  for (char& c : extension) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return extension;
}

bool is_image_file(const fs::path& path) {
  const std::string extension = lower_extension(path);
  return extension == ".jpg" || extension == ".jpeg" || extension == ".png";
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  HOTLOOP_CHECK_AS(
      DataError, in, path, ": cannot open: ", std::strerror(errno));
  return std::vector<uint8_t>(
      std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

Pixels decode_jpeg(const std::string& path, const std::vector<uint8_t>& file) {
  const std::unique_ptr<void, int (*)(tjhandle)> decoder(
      tjInitDecompress(), tjDestroy);
  HOTLOOP_CHECK_AS(
      DataError,
      decoder != nullptr,
      path,
      ": cannot start the JPEG decoder: ",
      tjGetErrorStr2(nullptr));
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  HOTLOOP_CHECK_AS(
      DataError,
      tjDecompressHeader3(
          decoder.get(),
          file.data(),
          file.size(),
          &width,
          &height,
          &subsampling,
          &colorspace) == 0,
      path,
      ": not a valid JPEG: ",
      tjGetErrorStr2(decoder.get()));
  HOTLOOP_CHECK_AS(
      DataError,
      width > 0 && height > 0,
      path,
      ": not a valid JPEG: no image data");
  Pixels pixels{height, width, 3, {}};
  pixels.data.resize(static_cast<size_t>(width) * height * 3);
  const int status = tjDecompress2(
      decoder.get(),
      file.data(),
      file.size(),
      pixels.data.data(),
      width,
      /*pitch=*/0,
      height,
      TJPF_RGB,
      /*flags=*/0);
  // Warnings (corrupt data that libjpeg worked around) also return -1; like
  // PIL we keep such images, but not files that end early, whose missing
  // rows libjpeg fills with gray (PIL: "image file is truncated").
  const char* message = tjGetErrorStr2(decoder.get());
  HOTLOOP_CHECK_AS(
      DataError,
      status == 0 || (tjGetErrorCode(decoder.get()) == TJERR_WARNING &&
                      std::strstr(message, "Premature end") == nullptr),
      path,
      ": not a valid JPEG: ",
      message);
  return pixels;
}

Pixels decode_png(const std::string& path, const std::vector<uint8_t>& file) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  // Frees libpng's state on every path out (a no-op once it is freed).
  const std::unique_ptr<png_image, void (*)(png_imagep)> guard(
      &image, png_image_free);
  HOTLOOP_CHECK_AS(
      DataError,
      png_image_begin_read_from_memory(&image, file.data(), file.size()) != 0,
      path,
      ": not a valid PNG: ",
      image.message);
  // 8-bit RGBA is not premultiplied, so dropping alpha gives the stored
  // colors, as PIL's convert("RGB") does.
  image.format = PNG_FORMAT_RGBA;
  Pixels pixels{image.height, image.width, 4, {}};
  pixels.data.resize(PNG_IMAGE_SIZE(image));
  HOTLOOP_CHECK_AS(
      DataError,
      png_image_finish_read(&image, nullptr, pixels.data.data(), 0, nullptr) !=
          0,
      path,
      ": not a valid PNG: ",
      image.message);
  return pixels;
}

Pixels decode(const std::string& path) {
  const std::vector<uint8_t> file = read_file(path);
  HOTLOOP_CHECK_AS(DataError, !file.empty(), path, ": empty file");
  const bool png_magic =
      file.size() >= 8 && std::memcmp(file.data(), "\x89PNG\r\n\x1a\n", 8) == 0;
  const bool jpeg_magic =
      file.size() >= 2 && file[0] == 0xFF && file[1] == 0xD8;
  if (png_magic || (!jpeg_magic && lower_extension(path) == ".png")) {
    return decode_png(path, file);
  }
  return decode_jpeg(path, file);
}

// PIL's RGB -> L conversion: ITU-R 601-2 luma in 16-bit fixed point.
Pixels to_gray(const Pixels& rgb) {
  Pixels gray{rgb.height, rgb.width, 1, {}};
  gray.data.resize(static_cast<size_t>(rgb.height * rgb.width));
  for (size_t i = 0; i < gray.data.size(); ++i) {
    const uint8_t* p = &rgb.data[i * rgb.stride];
    gray.data[i] = static_cast<uint8_t>(
        (p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16);
  }
  return gray;
}

// The two source indices and weights of each output index along one axis,
// as LibTorch 1.13's upsample_bilinear2d computes them for float images and
// align_corners=False: a float scale, the source position in double. (2.x
// computes the position in float, which moves weights by up to 1e-7 of the
// source size.)
struct Taps {
  std::vector<int64_t> index0, index1;
  std::vector<float> weight0, weight1;
};

Taps bilinear_taps(int64_t in, int64_t out) {
  Taps taps;
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  for (int64_t o = 0; o < out; ++o) {
    float lambda1 = 0;
    int64_t i0 = o;
    if (in != out) {
      const double source = std::max(0.0, scale * (o + 0.5) - 0.5);
      i0 = static_cast<int64_t>(source);
      lambda1 = static_cast<float>(source - static_cast<double>(i0));
    }
    taps.index0.push_back(i0);
    taps.index1.push_back(i0 < in - 1 ? i0 + 1 : i0);
    taps.weight0.push_back(1.0f - lambda1);
    taps.weight1.push_back(lambda1);
  }
  return taps;
}

// Resizes the first `channels` channels of `src` into `dst`: [channels,
// height, width] uint8, rounding half to even like torch.round.
void resize_bilinear(
    const Pixels& src,
    int64_t channels,
    int64_t height,
    int64_t width,
    uint8_t* dst) {
  const Taps ys = bilinear_taps(src.height, height);
  const Taps xs = bilinear_taps(src.width, width);
  const int64_t row_bytes = src.width * src.stride;
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t y = 0; y < height; ++y) {
      const uint8_t* row0 = src.data.data() + ys.index0[y] * row_bytes + c;
      const uint8_t* row1 = src.data.data() + ys.index1[y] * row_bytes + c;
      for (int64_t x = 0; x < width; ++x) {
        const int64_t a = xs.index0[x] * src.stride;
        const int64_t b = xs.index1[x] * src.stride;
        const float top = row0[a] * xs.weight0[x] + row0[b] * xs.weight1[x];
        const float bottom = row1[a] * xs.weight0[x] + row1[b] * xs.weight1[x];
        const float value = top * ys.weight0[y] + bottom * ys.weight1[y];
        *dst++ = static_cast<uint8_t>(
            std::clamp(std::nearbyint(value), 0.0f, 255.0f));
      }
    }
  }
}

const ImageFolderOptions& validated(const ImageFolderOptions& options) {
  const std::vector<int64_t>& size = options.image_size();
  HOTLOOP_CHECK_AS(
      ConfigError,
      size.size() == 2 && size[0] > 0 && size[1] > 0,
      "data.image_size must be [height, width] with positive values, got ",
      at::IntArrayRef(size));
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.channels() == 1 || options.channels() == 3,
      "data.channels must be 1 (grayscale) or 3 (RGB), got ",
      options.channels());
  return options;
}

} // namespace

ImageFolder::ImageFolder(const std::string& root, ImageFolderOptions options)
    : options_(validated(options)),
      transform_(
          options_.transform(),
          options_.channels(),
          options_.image_size()[0],
          options_.image_size()[1]) {
  try {
    scan(root);
  } catch (const fs::filesystem_error& e) {
    throw DataError(hotloop::detail::str_cat(
        e.path1().string(), ": cannot list: ", e.code().message()));
  }
}

void ImageFolder::scan(const std::string& root) {
  std::error_code ec;
  HOTLOOP_CHECK_AS(
      DataError, fs::is_directory(root, ec), root, ": no such folder");
  for (const fs::directory_entry& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.front() != '.') {
      classes_.push_back(name);
    }
  }
  std::sort(classes_.begin(), classes_.end());
  HOTLOOP_CHECK_AS(
      DataError,
      !classes_.empty(),
      root,
      ": no class folders (expected ",
      root,
      "/<class>/<image>.jpg, .jpeg or .png)");

  for (size_t k = 0; k < classes_.size(); ++k) {
    const fs::path folder = fs::path(root) / classes_[k];
    // (folder, file name) pairs sort as torchvision's sorted(os.walk(...)).
    std::vector<std::pair<std::string, std::string>> files;
    for (const fs::directory_entry& entry : fs::recursive_directory_iterator(
             folder, fs::directory_options::follow_directory_symlink)) {
      if (entry.is_regular_file() && is_image_file(entry.path())) {
        files.emplace_back(
            entry.path().parent_path().string(),
            entry.path().filename().string());
      }
    }
    HOTLOOP_CHECK_AS(
        DataError,
        !files.empty(),
        folder.string(),
        ": no images (expected .jpg, .jpeg or .png files)");
    std::sort(files.begin(), files.end());
    for (const auto& [dir, name] : files) {
      samples_.push_back(Sample{dir + "/" + name, static_cast<int64_t>(k)});
    }
  }
}

int64_t ImageFolder::size() const {
  return static_cast<int64_t>(samples_.size());
}

SampleSpec ImageFolder::spec() const {
  return SampleSpec{
      {options_.channels(), options_.image_size()[0], options_.image_size()[1]},
      transform_.options().dtype,
      {},
      at::kLong};
}

void ImageFolder::load(
    int64_t index, const SampleContext& context, void* out) const {
  check_index(index);
  Pixels pixels = decode(samples_[index].path);
  if (options_.channels() == 1) {
    pixels = to_gray(pixels);
  }
  const int64_t height = options_.image_size()[0];
  const int64_t width = options_.image_size()[1];
  std::vector<uint8_t> resized(options_.channels() * height * width);
  resize_bilinear(pixels, options_.channels(), height, width, resized.data());
  SampleRng rng(SampleRng::mix(context.seed, context.epoch, index));
  transform_.apply(resized.data(), out, rng);
}

Example ImageFolder::get(int64_t index, const SampleContext& context) const {
  Example example{
      at::empty(
          spec().input_shape,
          at::TensorOptions().dtype(transform_.options().dtype)),
      at::empty({}, at::kLong)};
  load(index, context, example.input.data_ptr());
  example.target.fill_(samples_[index].target);
  return example;
}

void ImageFolder::get_batch(
    c10::ArrayRef<int64_t> indices,
    const SampleContext& context,
    Batch& out) const {
  const SampleSpec expected = spec();
  const auto rows = static_cast<int64_t>(indices.size());
  std::vector<int64_t> shape = {rows};
  shape.insert(
      shape.end(), expected.input_shape.begin(), expected.input_shape.end());
  HOTLOOP_CHECK(
      out.input.is_contiguous() &&
          out.input.scalar_type() == expected.input_dtype &&
          out.input.sizes() == at::IntArrayRef(shape) &&
          out.target.is_contiguous() && out.target.scalar_type() == at::kLong &&
          out.target.sizes() == at::IntArrayRef({rows}),
      "an image batch must be contiguous ",
      expected.input_dtype,
      at::IntArrayRef(shape),
      " and int64 [",
      rows,
      "], got ",
      out.input.scalar_type(),
      out.input.sizes(),
      " and ",
      out.target.scalar_type(),
      out.target.sizes());
  auto* input = static_cast<char*>(out.input.data_ptr());
  const int64_t row_bytes = out.input.nbytes() / std::max<int64_t>(rows, 1);
  auto* target = out.target.data_ptr<int64_t>();
  for (int64_t k = 0; k < rows; ++k) {
    load(indices[k], context, input + k * row_bytes);
    target[k] = samples_[indices[k]].target;
  }
}

} // namespace hotloop::data
