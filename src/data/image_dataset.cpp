#include "hotloop/data/image_dataset.h"

#include "hotloop/core/error.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <cmath>

namespace hotloop::data {
namespace {

at::Tensor with_channels(at::Tensor images) {
  HOTLOOP_CHECK_AS(
      DataError,
      images.dim() == 3 || images.dim() == 4,
      "images must be [N, H, W] or [N, C, H, W], got ",
      images.sizes());
  HOTLOOP_CHECK_AS(
      DataError,
      images.scalar_type() == at::kByte,
      "images must be uint8, got ",
      images.scalar_type());
  return (images.dim() == 3 ? images.unsqueeze(1) : images).contiguous();
}

} // namespace

ImageClassificationDataset::ImageClassificationDataset(
    at::Tensor images,
    at::Tensor labels,
    std::optional<ImageTransformOptions> transform)
    : images_(with_channels(std::move(images))),
      labels_(labels.to(at::kLong).contiguous()),
      transform_(
          transform.value_or(ImageTransformOptions{}),
          images_.size(1),
          images_.size(2),
          images_.size(3)) {
  HOTLOOP_CHECK_AS(
      DataError,
      labels_.dim() == 1,
      "labels must be [N], got ",
      labels_.sizes());
  HOTLOOP_CHECK_AS(
      DataError,
      labels_.size(0) == images_.size(0),
      "there are ",
      images_.size(0),
      " images but ",
      labels_.size(0),
      " labels");
  if (labels_.numel() > 0) {
    const int64_t min = labels_.min().item<int64_t>();
    HOTLOOP_CHECK_AS(DataError, min >= 0, "labels must be >= 0, found ", min);
    num_classes_ = labels_.max().item<int64_t>() + 1;
  }
}

int64_t ImageClassificationDataset::size() const {
  return images_.size(0);
}

SampleSpec ImageClassificationDataset::spec() const {
  return SampleSpec{
      {images_.size(1), images_.size(2), images_.size(3)},
      transform_.options().dtype,
      {},
      at::kLong};
}

Example ImageClassificationDataset::get(
    int64_t index, const SampleContext& context) const {
  check_index(index);
  Example example{
      at::empty(
          {images_.size(1), images_.size(2), images_.size(3)},
          at::TensorOptions().dtype(transform_.options().dtype)),
      labels_[index].clone()};
  SampleRng rng(SampleRng::mix(context.seed, context.epoch, index));
  transform_.apply(
      images_.data_ptr<uint8_t>() + index * images_[0].numel(),
      example.input.data_ptr(),
      rng);
  return example;
}

void ImageClassificationDataset::get_batch(
    c10::ArrayRef<int64_t> indices,
    const SampleContext& context,
    Batch& out) const {
  const int64_t sample_numel = images_[0].numel();
  const auto* images = images_.data_ptr<uint8_t>();
  const auto* labels = labels_.data_ptr<int64_t>();
  auto* input = static_cast<char*>(out.input.data_ptr());
  const int64_t row_bytes = sample_numel * out.input.element_size();
  auto* target = out.target.data_ptr<int64_t>();
  const int64_t n = size();
  // Shuffled indices jump around an array larger than the cache: ask for a
  // sample's image and label two samples before they are needed.
  constexpr size_t kAhead = 2;
  constexpr int64_t kLine = 64;
  auto prefetch = [&](size_t k) {
    if (k < indices.size()) {
      const uint8_t* image = images + indices[k] * sample_numel;
      for (int64_t offset = 0; offset < sample_numel; offset += kLine) {
        __builtin_prefetch(image + offset);
        // GCC deletes loops with no side effects, prefetch-only ones too;
        // an empty volatile asm keeps this one.
        asm volatile("");
      }
      __builtin_prefetch(labels + indices[k]);
    }
  };
  for (size_t k = 0; k < kAhead; ++k) {
    prefetch(k);
  }
  for (size_t k = 0; k < indices.size(); ++k) {
    prefetch(k + kAhead);
    const int64_t i = indices[k];
    TORCH_INTERNAL_ASSERT(i >= 0 && i < n, "sample index ", i, " out of range");
    SampleRng rng(SampleRng::mix(context.seed, context.epoch, i));
    transform_.apply(images + i * sample_numel, input + k * row_bytes, rng);
    target[k] = labels[i];
  }
}

std::pair<std::vector<double>, std::vector<double>> channel_statistics(
    const at::Tensor& images) {
  HOTLOOP_CHECK_AS(
      DataError,
      images.dim() == 4 && images.scalar_type() == at::kByte,
      "channel_statistics: expected uint8 images [N, C, H, W], got ",
      images.scalar_type(),
      images.sizes());
  const at::Tensor dense = images.contiguous();
  const int64_t n = dense.size(0);
  const int64_t channels = dense.size(1);
  const int64_t plane = dense.size(2) * dense.size(3);
  const uint8_t* data = dense.data_ptr<uint8_t>();
  std::vector<double> mean, std;
  for (int64_t c = 0; c < channels; ++c) {
    std::array<int64_t, 256> counts{};
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* p = data + (i * channels + c) * plane;
      for (int64_t j = 0; j < plane; ++j) {
        ++counts[p[j]];
      }
    }
    double sum = 0, squares = 0;
    for (int v = 0; v < 256; ++v) {
      sum += static_cast<double>(counts[v]) * v;
      squares += static_cast<double>(counts[v]) * v * v;
    }
    const double count = static_cast<double>(std::max<int64_t>(n * plane, 1));
    const double m = sum / count;
    mean.push_back(m / 255.0);
    std.push_back(std::sqrt(std::max(0.0, squares / count - m * m)) / 255.0);
  }
  return {mean, std};
}

} // namespace hotloop::data
