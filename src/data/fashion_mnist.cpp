#include "hotloop/data/fashion_mnist.h"

#include "hotloop/core/error.h"
#include "hotloop/data/idx.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace hotloop::data {

const std::vector<std::string>& fashion_mnist_classes() {
  static const std::vector<std::string> names = {
      "T-shirt/top",
      "Trouser",
      "Pullover",
      "Dress",
      "Coat",
      "Sandal",
      "Shirt",
      "Sneaker",
      "Bag",
      "Ankle boot"};
  return names;
}
namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& text, const std::string& end) {
  return text.size() >= end.size() &&
         text.compare(text.size() - end.size(), end.size(), end) == 0;
}

// The file `prefix` + `stem` in `root`, compressed or not, for each of the
// split's stems (the test split is t10k in MNIST, test in EMNIST). With no
// prefix, a file that ends in the stem is taken when it is the only one
// (EMNIST's emnist-<subset>-...); several are an error naming them.
std::string find_file(
    const std::string& root,
    const std::vector<std::string>& stems,
    const std::string& prefix) {
  for (const std::string& stem : stems) {
    for (const char* suffix : {".gz", ""}) {
      const fs::path path = fs::path(root) / (prefix + stem + suffix);
      std::error_code ec;
      if (fs::is_regular_file(path, ec)) {
        return path.string();
      }
    }
  }
  if (prefix.empty()) {
    for (const std::string& stem : stems) {
      std::vector<std::string> found;
      for (const auto& entry : fs::directory_iterator(root)) {
        const std::string name = entry.path().filename().string();
        if (entry.is_regular_file() &&
            (ends_with(name, stem) || ends_with(name, stem + ".gz"))) {
          found.push_back(name);
        }
      }
      std::sort(found.begin(), found.end());
      if (found.size() == 1) {
        return (fs::path(root) / found.front()).string();
      }
      if (found.size() > 1) {
        std::string names;
        for (const std::string& name : found) {
          names += (names.empty() ? "" : ", ") + name;
        }
        throw DataError(hotloop::detail::str_cat(
            root,
            ": several MNIST-format sets (",
            names,
            "); choose one with data.idx_prefix (the part before ",
            stem,
            ")"));
      }
    }
  }
  throw DataError(hotloop::detail::str_cat(
      root,
      ": missing ",
      prefix,
      stems.front(),
      ".gz (or ",
      prefix,
      stems.front(),
      "); data.root must hold the MNIST-format files"));
}

} // namespace

std::shared_ptr<ImageClassificationDataset> load_mnist_split(
    const std::string& root,
    bool train,
    std::optional<ImageTransformOptions> transform,
    const std::string& prefix) {
  std::error_code ec;
  HOTLOOP_CHECK_AS(
      DataError,
      fs::is_directory(root, ec),
      "dataset folder '",
      root,
      "' does not exist (set data.root; on Debian install the "
      "dataset-fashion-mnist package)");
  const std::vector<std::string> splits =
      train ? std::vector<std::string>{"train"}
            : std::vector<std::string>{"t10k", "test"};
  std::vector<std::string> image_stems, label_stems;
  for (const std::string& split : splits) {
    image_stems.push_back(split + "-images-idx3-ubyte");
    label_stems.push_back(split + "-labels-idx1-ubyte");
  }
  const std::string images_path = find_file(root, image_stems, prefix);
  const std::string labels_path = find_file(root, label_stems, prefix);

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
