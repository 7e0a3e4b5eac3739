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
#include <tuple>
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

void read_file(const std::string& path, std::vector<uint8_t>& bytes) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  HOTLOOP_CHECK_AS(
      DataError, in, path, ": cannot open: ", std::strerror(errno));
  const std::streamoff size = in.tellg();
  bytes.resize(static_cast<size_t>(std::max<std::streamoff>(size, 0)));
  in.seekg(0);
  HOTLOOP_CHECK_AS(
      DataError,
      size >= 0 && in.read(reinterpret_cast<char*>(bytes.data()), size),
      path,
      ": cannot read: ",
      std::strerror(errno));
}

// One loader thread's TurboJPEG decompressor, made on first use.
tjhandle jpeg_decoder(const std::string& path) {
  thread_local const std::unique_ptr<void, int (*)(tjhandle)> decoder(
      tjInitDecompress(), tjDestroy);
  HOTLOOP_CHECK_AS(
      DataError,
      decoder != nullptr,
      path,
      ": cannot start the JPEG decoder: ",
      tjGetErrorStr2(nullptr));
  return decoder.get();
}

// The stored size of a JPEG, from its header.
std::pair<int64_t, int64_t> jpeg_size(
    const std::string& path, const std::vector<uint8_t>& file) {
  tjhandle decoder = jpeg_decoder(path);
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  HOTLOOP_CHECK_AS(
      DataError,
      tjDecompressHeader3(
          decoder,
          file.data(),
          file.size(),
          &width,
          &height,
          &subsampling,
          &colorspace) == 0,
      path,
      ": not a valid JPEG: ",
      tjGetErrorStr2(decoder));
  HOTLOOP_CHECK_AS(
      DataError,
      width > 0 && height > 0,
      path,
      ": not a valid JPEG: no image data");
  return {height, width};
}

// Decodes a JPEG of stored size `height` x `width` at 1/`denominator` of
// it (1, 2, 4 or 8: libjpeg-turbo scales in the DCT domain) into `pixels`.
void decode_jpeg(
    const std::string& path,
    const std::vector<uint8_t>& file,
    int64_t height,
    int64_t width,
    int denominator,
    Pixels& pixels) {
  tjhandle decoder = jpeg_decoder(path);
  const tjscalingfactor factor{1, denominator};
  pixels.width = TJSCALED(static_cast<int>(width), factor);
  pixels.height = TJSCALED(static_cast<int>(height), factor);
  pixels.stride = 3;
  pixels.data.resize(static_cast<size_t>(pixels.width * pixels.height * 3));
  const int status = tjDecompress2(
      decoder,
      file.data(),
      file.size(),
      pixels.data.data(),
      static_cast<int>(pixels.width),
      /*pitch=*/0,
      static_cast<int>(pixels.height),
      TJPF_RGB,
      /*flags=*/0);
  // Warnings (corrupt data that libjpeg worked around) also return -1; like
  // PIL we keep such images, but not files that end early, whose missing
  // rows libjpeg fills with gray (PIL: "image file is truncated").
  const char* message = tjGetErrorStr2(decoder);
  HOTLOOP_CHECK_AS(
      DataError,
      status == 0 || (tjGetErrorCode(decoder) == TJERR_WARNING &&
                      std::strstr(message, "Premature end") == nullptr),
      path,
      ": not a valid JPEG: ",
      message);
}

void decode_png(
    const std::string& path, const std::vector<uint8_t>& file, Pixels& pixels) {
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
  pixels.height = image.height;
  pixels.width = image.width;
  pixels.stride = 4;
  pixels.data.resize(PNG_IMAGE_SIZE(image));
  HOTLOOP_CHECK_AS(
      DataError,
      png_image_finish_read(&image, nullptr, pixels.data.data(), 0, nullptr) !=
          0,
      path,
      ": not a valid PNG: ",
      image.message);
}

// PIL's RGB -> L conversion: ITU-R 601-2 luma in 16-bit fixed point, in
// place (each gray byte lands at or before its pixel's first byte).
void to_gray(Pixels& pixels) {
  const size_t count = static_cast<size_t>(pixels.height * pixels.width);
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* p = &pixels.data[i * pixels.stride];
    pixels.data[i] = static_cast<uint8_t>(
        (p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16);
  }
  pixels.stride = 1;
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

// `in` source pixels starting at `first` (a crop's edge) to `out`.
Taps bilinear_taps(int64_t first, int64_t in, int64_t out) {
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
    taps.index0.push_back(first + i0);
    taps.index1.push_back(first + (i0 < in - 1 ? i0 + 1 : i0));
    taps.weight0.push_back(1.0f - lambda1);
    taps.weight1.push_back(lambda1);
  }
  return taps;
}

// A region of an image, in pixels.
struct Box {
  int64_t top = 0, left = 0, height = 0, width = 0;
};

// `value` in [0, 255] rounded half to even, as std::nearbyint in the
// default rounding mode: adding and taking away 1.5 * 2^23 leaves no bits
// below the unit (exact for |value| < 2^22), without a libm call per pixel.
inline uint8_t round_to_byte(float value) {
  constexpr float kShift = 12582912.0f;
  const float rounded = (value + kShift) - kShift;
  return static_cast<uint8_t>(std::clamp(rounded, 0.0f, 255.0f));
}

// Resizes `box` of the first `channels` channels of `src` into `dst`:
// [channels, height, width] uint8, rounding half to even like torch.round
// (a crop then F.interpolate of the crop). Separably: each source row the
// output needs is interpolated along x once, into `rows`, then every
// output row blends two of those, a loop the compiler vectorizes. The
// arithmetic is that of interpolating each output pixel on its own, so
// the result is the same to the bit.
void resize_bilinear(
    const Pixels& src,
    const Box& box,
    int64_t channels,
    int64_t height,
    int64_t width,
    uint8_t* dst,
    std::vector<float>& rows) {
  const Taps ys = bilinear_taps(box.top, box.height, height);
  const Taps xs = bilinear_taps(box.left, box.width, width);
  const int64_t row_bytes = src.width * src.stride;
  const int64_t plane = height * width;
  const int64_t first = ys.index0.front();
  const int64_t last = ys.index1.back();
  const int64_t row_floats = channels * width;
  rows.resize(static_cast<size_t>((last - first + 1) * row_floats));
  std::vector<int64_t> left(width), right(width);
  for (int64_t x = 0; x < width; ++x) {
    left[x] = xs.index0[x] * src.stride;
    right[x] = xs.index1[x] * src.stride;
  }
  const float* w0 = xs.weight0.data();
  const float* w1 = xs.weight1.data();
  for (int64_t r = first; r <= last; ++r) {
    const uint8_t* row = src.data.data() + r * row_bytes;
    float* out = rows.data() + (r - first) * row_floats;
    for (int64_t c = 0; c < channels; ++c, out += width) {
      for (int64_t x = 0; x < width; ++x) {
        out[x] = row[left[x] + c] * w0[x] + row[right[x] + c] * w1[x];
      }
    }
  }
  for (int64_t y = 0; y < height; ++y) {
    const float top_weight = ys.weight0[y];
    const float bottom_weight = ys.weight1[y];
    const float* top = rows.data() + (ys.index0[y] - first) * row_floats;
    const float* bottom = rows.data() + (ys.index1[y] - first) * row_floats;
    for (int64_t c = 0; c < channels; ++c) {
      uint8_t* out = dst + c * plane + y * width;
      const float* t = top + c * width;
      const float* b = bottom + c * width;
      for (int64_t x = 0; x < width; ++x) {
        out[x] = round_to_byte(t[x] * top_weight + b[x] * bottom_weight);
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
  const std::string& crop = options.crop();
  HOTLOOP_CHECK_AS(
      ConfigError,
      crop == "resize" || crop == "center_crop" ||
          crop == "random_resized_crop",
      "data.crop must be resize, center_crop or random_resized_crop, got '",
      crop,
      "'");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.on_bad_sample() == "fail" || options.on_bad_sample() == "skip",
      "data.on_bad_sample must be fail or skip, got '",
      options.on_bad_sample(),
      "'");
  const std::vector<double>& scale = options.crop_scale();
  HOTLOOP_CHECK_AS(
      ConfigError,
      scale.size() == 2 && scale[0] > 0 && scale[0] <= scale[1] &&
          scale[1] <= 1,
      "data.crop_scale must be [min, max] with 0 < min <= max <= 1, got ",
      at::ArrayRef<double>(scale));
  const std::vector<double>& ratio = options.crop_ratio();
  HOTLOOP_CHECK_AS(
      ConfigError,
      ratio.size() == 2 && ratio[0] > 0 && ratio[0] <= ratio[1],
      "data.crop_ratio must be [min, max] with 0 < min <= max, got ",
      at::ArrayRef<double>(ratio));
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.resize_size() == 0 ||
          options.resize_size() >= std::max(size[0], size[1]),
      "data.resize_size must be 0 or at least the larger side of "
      "data.image_size ",
      at::IntArrayRef(size),
      ", got ",
      options.resize_size());
  return options;
}

// torchvision's RandomResizedCrop.get_params on this sample's generator:
// ten tries at a box of a random share of the area and aspect ratio, else
// the central box of the nearest allowed ratio.
Box random_resized_box(
    int64_t height,
    int64_t width,
    const std::vector<double>& scale,
    const std::vector<double>& ratio,
    SampleRng& rng) {
  const double area = static_cast<double>(height * width);
  const double log_low = std::log(ratio[0]);
  const double log_high = std::log(ratio[1]);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target =
        area * (scale[0] + (scale[1] - scale[0]) * rng.uniform());
    const double aspect =
        std::exp(log_low + (log_high - log_low) * rng.uniform());
    // Python's round(): half to even.
    const auto w = static_cast<int64_t>(std::nearbyint(std::sqrt(target * aspect)));
    const auto h = static_cast<int64_t>(std::nearbyint(std::sqrt(target / aspect)));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const auto top = static_cast<int64_t>(rng.below(height - h + 1));
      const auto left = static_cast<int64_t>(rng.below(width - w + 1));
      return {top, left, h, w};
    }
  }
  const double in_ratio =
      static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width;
  int64_t h = height;
  if (in_ratio < ratio[0]) {
    h = static_cast<int64_t>(std::nearbyint(w / ratio[0]));
  } else if (in_ratio > ratio[1]) {
    w = static_cast<int64_t>(std::nearbyint(h * ratio[1]));
  }
  return {(height - h) / 2, (width - w) / 2, h, w};
}

// Resize(resize_size) then CenterCrop(out): the crop's box in the source.
Box center_box(
    int64_t height,
    int64_t width,
    int64_t out_height,
    int64_t out_width,
    int64_t resize_size) {
  const double shorter = resize_size > 0
      ? static_cast<double>(resize_size)
      : std::nearbyint(static_cast<double>(std::max(out_height, out_width)) /
                       0.875);
  const double factor =
      static_cast<double>(std::min(height, width)) / shorter;
  const int64_t h = std::clamp<int64_t>(
      static_cast<int64_t>(std::nearbyint(out_height * factor)), 1, height);
  const int64_t w = std::clamp<int64_t>(
      static_cast<int64_t>(std::nearbyint(out_width * factor)), 1, width);
  return {(height - h) / 2, (width - w) / 2, h, w};
}

// The largest JPEG DCT scaling (1/8, 1/4, 1/2) that keeps `box` at least
// out_height x out_width, as PIL's draft() picks it; 1 for none.
int draft_denominator(const Box& box, int64_t out_height, int64_t out_width) {
  for (const int denominator : {8, 4, 2}) {
    if (box.height / denominator >= out_height &&
        box.width / denominator >= out_width) {
      return denominator;
    }
  }
  return 1;
}

// `box` of the full-size image, in an image decoded at 1/`denominator`.
Box scaled(const Box& box, int denominator, const Pixels& pixels) {
  if (denominator == 1) {
    return box;
  }
  Box out;
  out.top = std::min(box.top / denominator, pixels.height - 1);
  out.left = std::min(box.left / denominator, pixels.width - 1);
  out.height = std::clamp<int64_t>(
      box.height / denominator, 1, pixels.height - out.top);
  out.width =
      std::clamp<int64_t>(box.width / denominator, 1, pixels.width - out.left);
  return out;
}

bool is_png(const std::string& path, const std::vector<uint8_t>& file) {
  const bool png_magic =
      file.size() >= 8 && std::memcmp(file.data(), "\x89PNG\r\n\x1a\n", 8) == 0;
  const bool jpeg_magic =
      file.size() >= 2 && file[0] == 0xFF && file[1] == 0xD8;
  return png_magic || (!jpeg_magic && lower_extension(path) == ".png");
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
  if (options_.unlabeled()) {
    classes_ = options_.classes();
    std::vector<std::string> files;
    for (const fs::directory_entry& entry : fs::recursive_directory_iterator(
             root, fs::directory_options::follow_directory_symlink)) {
      if (entry.is_regular_file() && is_image_file(entry.path())) {
        files.push_back(entry.path().string());
      }
    }
    HOTLOOP_CHECK_AS(
        DataError,
        !files.empty(),
        root,
        ": no images (expected .jpg, .jpeg or .png files)");
    std::sort(files.begin(), files.end());
    for (std::string& file : files) {
      samples_.push_back(Sample{std::move(file), -1});
    }
    return;
  }
  std::vector<std::string> folders;
  for (const fs::directory_entry& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.front() != '.') {
      folders.push_back(name);
    }
  }
  std::sort(folders.begin(), folders.end());
  HOTLOOP_CHECK_AS(
      DataError,
      !folders.empty(),
      root,
      ": no class folders (expected ",
      root,
      "/<class>/<image>.jpg, .jpeg or .png)");
  classes_ = options_.classes().empty() ? folders : options_.classes();
  std::string listed;
  for (size_t k = 0; k < classes_.size() && k < 10; ++k) {
    listed += (k > 0 ? ", " : "") + classes_[k];
  }
  if (classes_.size() > 10) {
    listed += ", ...";
  }
  for (const std::string& folder : folders) {
    HOTLOOP_CHECK_AS(
        DataError,
        std::find(classes_.begin(), classes_.end(), folder) != classes_.end(),
        (fs::path(root) / folder).string(),
        ": class '",
        folder,
        "' is not among the ",
        classes_.size(),
        " classes given (",
        listed,
        ")");
  }

  for (size_t k = 0; k < classes_.size(); ++k) {
    const fs::path folder = fs::path(root) / classes_[k];
    if (!options_.classes().empty() && !fs::is_directory(folder, ec)) {
      continue; // a class this split lacks
    }
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

int64_t ImageFolder::load(
    int64_t index, const SampleContext& context, void* out) const {
  check_index(index);
  if (options_.on_bad_sample() == "fail") {
    decode_into(index, context, out);
    return index;
  }
  // The sample, else the next readable one after it (wrapping around).
  const auto n = static_cast<int64_t>(samples_.size());
  for (int64_t tried = 0; tried < n; ++tried) {
    const int64_t candidate = (index + tried) % n;
    {
      const std::lock_guard<std::mutex> lock(bad_->mutex);
      if (bad_->files.count(candidate) != 0) {
        continue;
      }
    }
    try {
      decode_into(candidate, context, out);
      return candidate;
    } catch (const DataError& error) {
      const std::lock_guard<std::mutex> lock(bad_->mutex);
      bad_->files.emplace(candidate, error.what());
    }
  }
  throw DataError(hotloop::detail::str_cat(
      "none of the ", n, " images can be read; the first: ",
      bad_samples().begin()->second));
}

std::map<int64_t, std::string> ImageFolder::bad_samples() const {
  const std::lock_guard<std::mutex> lock(bad_->mutex);
  return bad_->files;
}

void ImageFolder::decode_into(
    int64_t index, const SampleContext& context, void* out) const {
  // Each loader thread keeps its buffers between samples.
  thread_local std::vector<uint8_t> file;
  thread_local Pixels pixels;
  thread_local std::vector<uint8_t> resized;
  thread_local std::vector<float> rows;
  const std::string& path = samples_[index].path;
  read_file(path, file);
  HOTLOOP_CHECK_AS(DataError, !file.empty(), path, ": empty file");
  const int64_t out_height = options_.image_size()[0];
  const int64_t out_width = options_.image_size()[1];
  SampleRng rng(SampleRng::mix(context.seed, context.epoch, index));

  // The region to resize is chosen on the stored size; a JPEG is then
  // decoded at the smallest DCT scale that keeps the region large enough.
  const bool png = is_png(path, file);
  int64_t height = 0;
  int64_t width = 0;
  if (png) {
    decode_png(path, file, pixels);
    height = pixels.height;
    width = pixels.width;
  } else {
    std::tie(height, width) = jpeg_size(path, file);
  }
  Box box{0, 0, height, width};
  if (options_.crop() == "random_resized_crop") {
    box = random_resized_box(
        height, width, options_.crop_scale(), options_.crop_ratio(), rng);
  } else if (options_.crop() == "center_crop") {
    box = center_box(
        height, width, out_height, out_width, options_.resize_size());
  }
  if (!png) {
    const int denominator = options_.jpeg_draft()
        ? draft_denominator(box, out_height, out_width)
        : 1;
    decode_jpeg(path, file, height, width, denominator, pixels);
    box = scaled(box, denominator, pixels);
  }
  if (options_.channels() == 1) {
    to_gray(pixels);
  }
  resized.resize(static_cast<size_t>(options_.channels() * out_height * out_width));
  resize_bilinear(
      pixels,
      box,
      options_.channels(),
      out_height,
      out_width,
      resized.data(),
      rows);
  transform_.apply(resized.data(), out, rng);
}

Example ImageFolder::get(int64_t index, const SampleContext& context) const {
  Example example{
      at::empty(
          spec().input_shape,
          at::TensorOptions().dtype(transform_.options().dtype)),
      at::empty({}, at::kLong)};
  example.target.fill_(
      samples_[load(index, context, example.input.data_ptr())].target);
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
    target[k] = samples_[load(indices[k], context, input + k * row_bytes)].target;
  }
}

} // namespace hotloop::data
