#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace hotloop::log {

/// Each class's accuracy (recall) and count, then the matrix (rows: true
/// class, columns: prediction; counts[t][p] samples of class t predicted as
/// p: train::confusion_counts, on any device), as aligned text. `names`: class
/// k's name, or empty for the numbers.
void print_confusion(
    std::ostream& out,
    const at::Tensor& confusion,
    const std::vector<std::string>& names);

/// The matrix as CSV (a header of class names, then one row per true
/// class, named first), atomically at `path`.
void write_confusion_csv(
    const std::string& path,
    const at::Tensor& confusion,
    const std::vector<std::string>& names);

/// The class names and matrix of a file write_confusion_csv wrote. Throws
/// Error naming the file when it is malformed.
struct ConfusionTable {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> counts;
};
ConfusionTable read_confusion_csv(const std::string& path);

} // namespace hotloop::log
