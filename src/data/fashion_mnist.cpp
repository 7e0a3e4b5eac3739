#include "hotloop/data/fashion_mnist.h"

#include "hotloop/core/error.h"
#include "hotloop/data/idx.h"

#include <ATen/ATen.h>

#include <filesystem>

namespace hotloop::data {
namespace {

namespace fs = std::filesystem;

// The file `stem` in `root`, compressed or not.
std::string find_file(const std::string& root, const std::string& stem) {
  for (const char* suffix : {".gz", ""}) {
    const fs::path path = fs::path(root) / (stem + suffix);
    std::error_code ec;
    if (fs::is_regular_file(path, ec)) {
      return path.string();
    }
  }
  throw DataError(hotloop::detail::str_cat(
      root,
      ": missing ",
      stem,
      ".gz (or ",
      stem,
      "); data.root must hold the MNIST-format files"));
}

} // namespace

std::shared_ptr<ImageClassificationDataset> load_mnist_split(
    const std::string& root,
    bool train,
    std::optional<ImageTransformOptions> transform) {
  std::error_code ec;
  HOTLOOP_CHECK_AS(
      DataError,
      fs::is_directory(root, ec),
      "dataset folder '",
      root,
      "' does not exist (set data.root; on Debian install the "
      "dataset-fashion-mnist package)");
  const std::string prefix = train ? "train" : "t10k";
  const std::string images_path =
      find_file(root, prefix + "-images-idx3-ubyte");
  const std::string labels_path =
      find_file(root, prefix + "-labels-idx1-ubyte");

  at::Tensor images = read_idx(images_path);
  HOTLOOP_CHECK_AS(
      DataError,
      images.dim() == 3 && images.scalar_type() == at::kByte,
      images_path,
      ": expected uint8 images of shape [N, H, W], got ",
      images.scalar_type(),
      " ",
      images.sizes());
  at::Tensor labels = read_idx(labels_path);
  HOTLOOP_CHECK_AS(
      DataError,
      labels.dim() == 1 && labels.scalar_type() == at::kByte,
      labels_path,
      ": expected uint8 labels of shape [N], got ",
      labels.scalar_type(),
      " ",
      labels.sizes());
  HOTLOOP_CHECK_AS(
      DataError,
      images.size(0) == labels.size(0),
      images_path,
      " has ",
      images.size(0),
      " images but ",
      labels_path,
      " has ",
      labels.size(0),
      " labels");
  return std::make_shared<ImageClassificationDataset>(
      std::move(images), std::move(labels), std::move(transform));
}

} // namespace hotloop::data
