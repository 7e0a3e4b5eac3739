#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace hotloop::log {

/// The metrics of a run as a CSV logger writes them (Lightning's CSVLogger
/// layout): one column per header name, one entry per data row. An entry is
/// std::nullopt where the row left the cell empty, i.e. that metric was not
/// logged in that logging call; `nan` and `inf` cells are kept as values.
class MetricsTable {
 public:
  using Column = std::vector<std::optional<double>>;

  /// No columns, no rows.
  MetricsTable() = default;

  /// Requires unique `names` and one column of equal length per name.
  MetricsTable(std::vector<std::string> names, std::vector<Column> columns);

  /// The column names in header order.
  const std::vector<std::string>& names() const {
    return names_;
  }

  /// The number of data rows.
  size_t rows() const {
    return columns_.empty() ? 0 : columns_.front().size();
  }

  bool has(const std::string& name) const;

  /// The column called `name`; throws Error when there is none.
  const Column& column(const std::string& name) const;

 private:
  std::vector<std::string> names_;
  std::vector<Column> columns_;
};

/// Reads a metrics.csv: a header row of unique column names, then rows of
/// as many cells, each empty, a decimal or exponent number (`0.5`, `1e-05`)
/// or `nan` / `inf` / `-inf`. Cells may be double-quoted (`"a,b"`), blank
/// lines are ignored, and an empty file gives an empty table.
///
/// Throws Error `<path>: no such file` when it is missing, and for a
/// malformed file an Error naming the path, the 1-based line and what was
/// expected: `runs/x/metrics.csv:7: expected 5 cells as in the header,
/// got 4`, `runs/x/metrics.csv:3: expected a number in column 'val_acc',
/// got 'abc'`.
MetricsTable read_metrics_csv(const std::string& path);

} // namespace hotloop::log
