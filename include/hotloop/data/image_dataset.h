#pragma once

#include "hotloop/data/dataset.h"
#include "hotloop/data/transforms.h"

#include <ATen/core/Tensor.h>

#include <optional>
#include <utility>
#include <vector>

namespace hotloop::data {

/// Images held in memory as uint8 with one class label each; the transform
/// runs fused inside `get_batch`.
class ImageClassificationDataset : public Dataset {
 public:
  /// images: [N, H, W] or [N, C, H, W] uint8, contiguous; labels: [N] any
  /// integer type, values in [0, num_classes). Without a transform the
  /// output is the pixel value / 255.
  /// Throws DataError when the shapes, dtypes or counts disagree.
  ImageClassificationDataset(
      at::Tensor images,
      at::Tensor labels,
      std::optional<ImageTransformOptions> transform = std::nullopt);

  int64_t size() const override;
  SampleSpec spec() const override;
  /// input: [C, H, W] float32, transformed; target: [] int64.
  Example get(int64_t index, const SampleContext& context) const override;
  void get_batch(
      c10::ArrayRef<int64_t> indices,
      const SampleContext& context,
      Batch& out) const override;

  /// images: [N, C, H, W] uint8
  const at::Tensor& images() const {
    return images_;
  }
  /// labels: [N] int64
  const at::Tensor& labels() const {
    return labels_;
  }
  /// 1 + the largest label.
  int64_t num_classes() const {
    return num_classes_;
  }

 private:
  at::Tensor images_;
  at::Tensor labels_;
  int64_t num_classes_ = 0;
  ImageTransform transform_;
};

/// Per-channel mean and standard deviation (population) of uint8 images
/// [N, C, H, W] scaled to [0, 1], for Normalize: exact, from each
/// channel's histogram, with no float copy of the images.
std::pair<std::vector<double>, std::vector<double>> channel_statistics(
    const at::Tensor& images);

} // namespace hotloop::data
