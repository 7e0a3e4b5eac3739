#pragma once

#include "hotloop/data/image_dataset.h"

#include <memory>
#include <string>
#include <vector>

namespace hotloop::data {

/// Where Debian's `dataset-fashion-mnist` package installs the files.
inline constexpr const char* kFashionMnistDefaultRoot =
    "/usr/share/datasets/fashion-mnist";

/// Per-channel statistics of the Fashion-MNIST training images (after
/// scaling to [0, 1]), for Normalize.
inline constexpr double kFashionMnistMean = 0.2860;
inline constexpr double kFashionMnistStd = 0.3530;

/// Fashion-MNIST's ten classes, label k's name at k (torchvision's
/// `FashionMNIST.classes`).
const std::vector<std::string>& fashion_mnist_classes();

/// Loads one split of an MNIST-family dataset (MNIST, Fashion-MNIST,
/// KMNIST, EMNIST, ...) from `root`: `<prefix>{train,t10k|test}-{images-idx3,
/// labels-idx1}-ubyte` with or without `.gz`. With no prefix, the files
/// without one, else the only set whose names end so (EMNIST's
/// `emnist-letters-`); several such sets are an error naming them.
///
/// images: [N, 1, H, W] uint8; labels: [N] with N images (60000/10000 for
/// Fashion-MNIST). Throws DataError naming the folder or file when the
/// folder or a file is missing, a file is malformed, images are not
/// [N, H, W] uint8, labels are not [N] uint8, or the counts differ.
std::shared_ptr<ImageClassificationDataset> load_mnist_split(
    const std::string& root,
    bool train,
    std::optional<ImageTransformOptions> transform = std::nullopt,
    const std::string& prefix = "");

} // namespace hotloop::data
