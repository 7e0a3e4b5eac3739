#pragma once

#include "hotloop/data/dataset.h"
#include "hotloop/data/transforms.h"

#include <torch/arg.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace hotloop::data {

/// How ImageFolder turns image files into samples.
struct ImageFolderOptions {
  /* implicit */ ImageFolderOptions(std::vector<int64_t> image_size)
      : image_size_(std::move(image_size)) {}

  /// [height, width] every image is resized to, bilinearly with half-pixel
  /// centers (`F.interpolate(mode="bilinear", align_corners=False)`, no
  /// antialias), rounded to uint8 like torchvision's Resize on uint8.
  TORCH_ARG(std::vector<int64_t>, image_size);
  /// 3: RGB; 1: grayscale, with PIL's `convert("L")` weights.
  TORCH_ARG(int64_t, channels) = 3;
  /// Every image under root, in any folder, sorted by path, with target -1:
  /// images to predict (class names, if wanted, from `classes`).
  TORCH_ARG(bool, unlabeled) = false;
  /// Class names in class order; empty: the sorted subfolders of root.
  /// Given (a validation folder takes the training folder's), a subfolder
  /// outside the list is an error and a class may have no folder.
  TORCH_ARG(std::vector<std::string>, classes);
  /// How each decoded image becomes image_size:
  /// "resize": the whole image, resized (its aspect ratio not kept);
  /// "center_crop": torchvision's evaluation recipe, Resize(resize_size)
  ///   (the shorter side) then CenterCrop(image_size);
  /// "random_resized_crop": torchvision's RandomResizedCrop(image_size,
  ///   crop_scale, crop_ratio), a box drawn per sample and epoch, resized.
  TORCH_ARG(std::string, crop) = "resize";
  /// random_resized_crop: [min, max] of the box's share of the image area.
  TORCH_ARG(std::vector<double>, crop_scale) = std::vector<double>{0.08, 1.0};
  /// random_resized_crop: [min, max] of the box's width / height, drawn
  /// uniformly in log space.
  TORCH_ARG(std::vector<double>, crop_ratio) =
      std::vector<double>{3.0 / 4.0, 4.0 / 3.0};
  /// center_crop: the shorter side before the crop; 0: the larger of
  /// image_size / 0.875, torchvision's 256 for 224.
  TORCH_ARG(int64_t, resize_size) = 0;
  /// Decode a JPEG at 1/2, 1/4 or 1/8 of its size in the DCT domain when
  /// the region to resize stays at least as large as image_size (PIL's
  /// draft mode): on large photos several times less decoding.
  TORCH_ARG(bool, jpeg_draft) = true;
  /// A file that cannot be read or decoded: "fail" stops with DataError
  /// naming it; "skip" records it (bad_samples) and gives the next
  /// readable sample in its place, so batches keep their size.
  TORCH_ARG(std::string, on_bad_sample) = "fail";
  /// Crop, flip and normalize after the resize; the default scales to
  /// [0, 1].
  TORCH_ARG(ImageTransformOptions, transform);
};

/// torchvision's ImageFolder: `root/<class>/**/<image>` with `.jpg`, `.jpeg`
/// or `.png` files (any case), decoded when read.
///
/// Classes are the subfolder names of `root` (hidden ones skipped), sorted,
/// numbered 0..K-1. Samples are ordered by class, then by folder and file
/// name, as torchvision orders them. Every image is decoded to 8-bit RGB
/// (alpha dropped), converted to grayscale when asked, cropped and resized
/// (`crop`), then transformed by ImageTransform. A JPEG whose region is at
/// least twice the output size is decoded at 1/2, 1/4 or 1/8 scale in the
/// DCT domain (`jpeg_draft`). Each loader thread reuses its decoder and
/// buffers, and the result is written straight into the batch.
///
/// JPEG is decoded with libjpeg-turbo (accurate DCT, fancy upsampling, as
/// PIL does), PNG with libpng; the format comes from the file's first bytes
/// (the extension decides only for files that match neither). JPEG warnings
/// (e.g. extraneous bytes) are tolerated, as PIL and torchvision do.
///
/// Holds only paths: `get` and `get_batch` read and decode with local state,
/// so any number of threads may call them at once.
class ImageFolder : public Dataset {
 public:
  /// One image file and its class index.
  struct Sample {
    std::string path;
    int64_t target = 0;
  };

  /// Lists `root`. Throws ConfigError naming the option for an image_size
  /// that is not two positive values, channels other than 1 or 3, or bad
  /// transform options; DataError naming the folder for a missing root, a
  /// root without class folders, or a class folder without images.
  ImageFolder(const std::string& root, ImageFolderOptions options);

  int64_t size() const override;
  SampleSpec spec() const override;
  /// input: [C, H, W] of the transform's dtype (float32 by default);
  /// target: [] int64. Throws DataError naming the file when it cannot be
  /// read or decoded.
  Example get(int64_t index, const SampleContext& context) const override;
  /// out.input: [B, C, H, W]; out.target: [B] int64. Throws like `get`.
  void get_batch(
      c10::ArrayRef<int64_t> indices,
      const SampleContext& context,
      Batch& out) const override;

  /// Class names (subfolder names), sorted; class k is classes()[k].
  const std::vector<std::string>& classes() const {
    return classes_;
  }
  /// Every sample, in index order.
  const std::vector<Sample>& samples() const {
    return samples_;
  }
  const ImageFolderOptions& options() const {
    return options_;
  }
  /// With on_bad_sample=skip: the samples whose file could not be read so
  /// far, by index, with what was wrong.
  std::map<int64_t, std::string> bad_samples() const;

 private:
  void scan(const std::string& root);
  // Decodes, resizes and transforms sample `index` into `out`: [C, H, W] of
  // the transform's dtype. Returns the sample written: `index`, or with
  // on_bad_sample=skip the readable one that stands in for it.
  int64_t load(int64_t index, const SampleContext& context, void* out) const;
  void decode_into(int64_t index, const SampleContext& context, void* out) const;

  struct BadSamples {
    std::mutex mutex;
    std::map<int64_t, std::string> files;
  };

  ImageFolderOptions options_;
  ImageTransform transform_;
  std::vector<std::string> classes_;
  std::vector<Sample> samples_;
  std::shared_ptr<BadSamples> bad_ = std::make_shared<BadSamples>();
};

} // namespace hotloop::data
