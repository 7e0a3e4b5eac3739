#pragma once

#include "hotloop/log/logger.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace hotloop::log {

/// Writes `metrics.csv` like Lightning's CSVLogger: a header `epoch,step,`
/// then every other metric name in sorted order, one row per record with
/// empty cells for metrics the record does not hold. Rows are buffered and
/// written on flush (each epoch end, a stop signal, the end of the run);
/// when a record brings a new metric name the file is rewritten, atomically,
/// with the wider header. log_hyperparams writes `hparams.yaml`. Not
/// thread-safe.
class CsvLogger : public Logger {
 public:
  /// Writes into `dir` (created if needed). Throws Error naming the folder
  /// when it cannot be created.
  explicit CsvLogger(std::string dir);
  ~CsvLogger() override;

  void log_metrics(
      const std::map<std::string, double>& metrics, int64_t step) override;
  void log_hyperparams(
      const std::map<std::string, std::string>& params,
      const std::map<std::string, double>& metrics) override;
  /// Takes the rows of an existing metrics.csv up to `step` as this
  /// logger's first records; the next flush rewrites the file with them.
  /// Throws Error naming the file when it cannot be read.
  void resume_at(int64_t step) override;
  /// Throws Error naming the file when a write fails.
  void flush() override;

  /// `<dir>/metrics.csv`.
  const std::string& path() const {
    return path_;
  }

 private:
  std::string dir_;
  std::string path_;
  // Column names besides epoch and step, sorted.
  std::vector<std::string> columns_;
  // Every record so far: rewriting the file with a new column needs them.
  std::vector<std::pair<int64_t, std::map<std::string, double>>> rows_;
  size_t written_ = 0;
  bool header_changed_ = false;
};

} // namespace hotloop::log
