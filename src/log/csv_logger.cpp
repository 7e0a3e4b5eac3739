#include "hotloop/log/csv_logger.h"

#include "hotloop/log/csv.h"

#include "hotloop/core/error.h"
#include "hotloop/log/metrics_csv.h"
#include "hotloop/train/checkpoint.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>

namespace hotloop::log {
namespace {

namespace fs = std::filesystem;

// The shortest text that reads back as the same double (Python's repr).
std::string format_cell(double value) {
  if (std::isnan(value)) {
    return "nan";
  }
  if (std::isinf(value)) {
    return value > 0 ? "inf" : "-inf";
  }
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

} // namespace

CsvLogger::CsvLogger(std::string dir)
    : dir_(std::move(dir)), path_((fs::path(dir_) / "metrics.csv").string()) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  HOTLOOP_CHECK(
      !ec, "cannot create the log folder '", dir_, "': ", ec.message());
}

CsvLogger::~CsvLogger() {
  try {
    flush();
  } catch (...) {
    // A destructor must not throw; an explicit flush() reports errors.
  }
}

void CsvLogger::log_metrics(
    const std::map<std::string, double>& metrics, int64_t step) {
  for (const auto& [name, value] : metrics) {
    if (name != "epoch" && name != "step" &&
        !std::binary_search(columns_.begin(), columns_.end(), name)) {
      columns_.insert(
          std::upper_bound(columns_.begin(), columns_.end(), name), name);
      header_changed_ = true;
    }
  }
  rows_.emplace_back(step, metrics);
}

void CsvLogger::resume_at(int64_t step) {
  if (!fs::exists(path_)) {
    return;
  }
  const MetricsTable table = read_metrics_csv(path_);
  HOTLOOP_CHECK(
      table.has("step"), path_, ": no 'step' column to resume the log from");
  const MetricsTable::Column& steps = table.column("step");
  std::vector<std::pair<int64_t, std::map<std::string, double>>> kept;
  for (size_t row = 0; row < table.rows(); ++row) {
    if (!steps[row] || static_cast<int64_t>(*steps[row]) > step) {
      continue;
    }
    std::map<std::string, double> metrics;
    for (const std::string& name : table.names()) {
      const auto& cell = table.column(name)[row];
      if (name != "step" && cell) {
        metrics[name] = *cell;
      }
    }
    kept.emplace_back(static_cast<int64_t>(*steps[row]), std::move(metrics));
  }
  for (const std::string& name : table.names()) {
    if (name != "epoch" && name != "step" &&
        !std::binary_search(columns_.begin(), columns_.end(), name)) {
      columns_.insert(
          std::upper_bound(columns_.begin(), columns_.end(), name), name);
    }
  }
  rows_.insert(rows_.begin(), kept.begin(), kept.end());
  written_ = 0;
  header_changed_ = true; // the next flush writes the file anew
}

void CsvLogger::flush() {
  if (written_ == rows_.size() && !header_changed_) {
    return;
  }
  auto write_rows = [&](std::ostream& out, size_t from) {
    for (size_t i = from; i < rows_.size(); ++i) {
      const auto& [step, metrics] = rows_[i];
      const auto epoch = metrics.find("epoch");
      if (epoch != metrics.end()) {
        out << format_cell(epoch->second);
      }
      out << "," << step;
      for (const std::string& column : columns_) {
        out << ",";
        const auto found = metrics.find(column);
        if (found != metrics.end()) {
          out << format_cell(found->second);
        }
      }
      out << "\n";
    }
  };
  if (header_changed_ || written_ == 0) {
    // A new column changes every row: write the whole file again.
    train::write_file_atomically(path_, [&](std::ostream& out) {
      out << "epoch,step";
      for (const std::string& column : columns_) {
        out << "," << csv_field(column);
      }
      out << "\n";
      write_rows(out, 0);
    });
  } else {
    std::ofstream out(path_, std::ios::app);
    write_rows(out, written_);
    out.flush();
    HOTLOOP_CHECK(out.good(), path_, ": write failed");
  }
  written_ = rows_.size();
  header_changed_ = false;
}

void CsvLogger::log_hyperparams(
    const std::map<std::string, std::string>& params,
    const std::map<std::string, double>& metrics) {
  // yaml-cpp quotes whatever YAML would read differently (": ", "#", a
  // leading "-", ...), so the file reads back as the same text.
  YAML::Emitter yaml;
  yaml << YAML::BeginMap;
  for (const auto& [name, value] : params) {
    yaml << YAML::Key << name << YAML::Value;
    YAML::Node parsed;
    try {
      parsed = YAML::Load(value);
    } catch (const YAML::Exception&) {
    }
    if (parsed.IsSequence()) {
      yaml << YAML::Flow << parsed; // a list stays a list: [16, 32]
    } else {
      yaml << value;
    }
  }
  yaml << YAML::EndMap;
  train::write_file_atomically(
      (fs::path(dir_) / "hparams.yaml").string(),
      [&](std::ostream& out) { out << yaml.c_str() << "\n"; });
}

} // namespace hotloop::log
