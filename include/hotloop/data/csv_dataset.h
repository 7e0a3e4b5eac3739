#pragma once

#include "hotloop/data/tensor_dataset.h"

#include <torch/arg.h>

#include <cstdint>
#include <string>
#include <vector>

namespace hotloop::data {

/// How to read a CSV file of numbers.
struct CsvDatasetOptions {
  /// The first non-blank row names the columns.
  TORCH_ARG(bool, header) = true;
  /// Name of the label column (needs `header`); empty: use `label_index`.
  TORCH_ARG(std::string, label_column);
  /// Index of the label column when `label_column` is empty, from 0;
  /// negative counts from the end (-1: the last column).
  TORCH_ARG(int64_t, label_index) = -1;
  /// Labels are float32 regression targets instead of int64 class indices.
  TORCH_ARG(bool, regression) = false;
  /// Field separator; '\0': a tab when the first row has more tabs than
  /// commas, else a comma.
  TORCH_ARG(char, delimiter) = ',';
  /// The feature columns by header name, in this order (needs `header`);
  /// empty: every column but the label, in file order.
  TORCH_ARG(std::vector<std::string>, feature_columns);
  /// Class names in class order (a model's, from its checkpoint): every
  /// label must be one of them, and class k is `classes[k]` whichever
  /// labels the file holds. Empty: integer labels as they are, or the
  /// sorted distinct names.
  TORCH_ARG(std::vector<std::string>, classes);
  /// A table to predict on may lack the label column (named by
  /// `label_column`, which then must be set): every target is then -1
  /// (NaN with `regression`) and labeled() is false.
  TORCH_ARG(bool, label_optional) = false;
};

/// A CSV file of numbers, parsed once into memory: one label column, the
/// feature columns (every other column, or those named) float32.
///
/// Class labels are integers >= 0 as they are; when any label is not one
/// (a name, say "setosa"), every label is a name, and class k is the k-th
/// of the sorted distinct names (class_names()).
///
/// Fields may be surrounded by spaces and double quotes; blank lines, a
/// UTF-8 byte order mark and CRLF line ends are accepted. Numbers are read
/// as double and rounded to float32, like `pandas.read_csv` followed by
/// `.astype("float32")`.
class CsvDataset : public TensorDataset {
 public:
  /// inputs: [N, F] float32, the feature columns in file order;
  /// targets: [N] int64 class indices >= 0, or [N] float32 with
  /// `regression`.
  ///
  /// Throws ConfigError naming the option for `label_column` without
  /// `header`, an unknown `label_column` name or an out-of-range
  /// `label_index`; DataError naming the file for a missing or empty file, a
  /// file with no data rows or fewer than 2 columns, and naming
  /// `file:line` (and the column, counted from 0) for a row with another
  /// number of columns, a field that is not a number, a label that is not
  /// a class index, or one outside the given `classes`.
  explicit CsvDataset(const std::string& path, CsvDatasetOptions options = {});

  /// Header names of the feature columns, in order; empty without a header.
  const std::vector<std::string>& feature_names() const {
    return feature_names_;
  }
  /// Header name of the label column; empty without a header.
  const std::string& label_name() const {
    return label_name_;
  }
  /// 1 + the largest class index; 0 with `regression`.
  int64_t num_classes() const {
    return num_classes_;
  }
  /// Class k's name when the labels were names (or `classes` was given);
  /// empty otherwise.
  const std::vector<std::string>& class_names() const {
    return class_names_;
  }
  /// false when the label column was absent (`label_optional`).
  bool labeled() const {
    return labeled_;
  }

 private:
  struct Parsed;
  explicit CsvDataset(Parsed parsed);
  static Parsed parse(
      const std::string& path, const CsvDatasetOptions& options);

  std::vector<std::string> feature_names_;
  std::string label_name_;
  int64_t num_classes_ = 0;
  std::vector<std::string> class_names_;
  bool labeled_ = true;
};

} // namespace hotloop::data
