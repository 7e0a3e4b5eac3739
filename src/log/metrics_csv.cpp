#include "hotloop/log/metrics_csv.h"

#include "hotloop/log/csv.h"

#include "hotloop/core/error.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <utility>

namespace hotloop::log {
namespace {

using hotloop::detail::str_cat;

std::string trim(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string::npos) {
    return "";
  }
  const size_t end = text.find_last_not_of(" \t");
  return text.substr(begin, end - begin + 1);
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) {
    return static_cast<char>(std::tolower(c));
  });
  return text;
}

// `nan`, `inf`, `-inf` as Python writes them (any case, `infinity` too),
// else decimal or exponent notation only: strtod alone would also take hex
// and `nan(...)`, which no logger writes.
std::optional<double> parse_number(const std::string& text) {
  const std::string word = lower(text);
  const bool negative = !word.empty() && word[0] == '-';
  const std::string unsigned_word =
      !word.empty() && (word[0] == '-' || word[0] == '+') ? word.substr(1)
                                                          : word;
  if (unsigned_word == "nan") {
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (unsigned_word == "inf" || unsigned_word == "infinity") {
    const double inf = std::numeric_limits<double>::infinity();
    return negative ? -inf : inf;
  }
  if (text.empty() || text.find_first_not_of("+-.0123456789eE") != text.npos) {
    return std::nullopt;
  }
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  // ERANGE on underflow still gives the nearest value; only overflow is an
  // error, and it gives +-inf, which the file could have said directly.
  if (*end != '\0' || end == text.c_str()) {
    return std::nullopt;
  }
  return value;
}

std::vector<std::string> read_header(
    const std::string& path, int64_t line_number, const std::string& line) {
  std::vector<std::string> names;
  HOTLOOP_CHECK(
      split_csv_line(line, &names),
      path,
      ":",
      line_number,
      ": expected a closing quote");
  for (size_t i = 0; i < names.size(); ++i) {
    names[i] = trim(names[i]);
    HOTLOOP_CHECK(
        !names[i].empty(),
        path,
        ":",
        line_number,
        ": expected a name for every column, got an empty one in column ",
        i + 1);
    HOTLOOP_CHECK(
        std::find(names.begin(), names.begin() + i, names[i]) ==
            names.begin() + i,
        path,
        ":",
        line_number,
        ": expected unique column names, got '",
        names[i],
        "' twice");
  }
  return names;
}

} // namespace

MetricsTable::MetricsTable(
    std::vector<std::string> names, std::vector<Column> columns)
    : names_(std::move(names)), columns_(std::move(columns)) {
  HOTLOOP_CHECK(
      names_.size() == columns_.size(),
      "MetricsTable: ",
      names_.size(),
      " names for ",
      columns_.size(),
      " columns");
  for (size_t i = 0; i < columns_.size(); ++i) {
    HOTLOOP_CHECK(
        columns_[i].size() == rows(),
        "MetricsTable: column '",
        names_[i],
        "' has ",
        columns_[i].size(),
        " rows, expected ",
        rows());
  }
}

bool MetricsTable::has(const std::string& name) const {
  return std::find(names_.begin(), names_.end(), name) != names_.end();
}

const MetricsTable::Column& MetricsTable::column(
    const std::string& name) const {
  const auto it = std::find(names_.begin(), names_.end(), name);
  HOTLOOP_CHECK(it != names_.end(), "metrics: no column '", name, "'");
  return columns_[it - names_.begin()];
}

MetricsTable read_metrics_csv(const std::string& path) {
  hotloop::detail::require_file(path);
  std::ifstream in(path, std::ios::binary);
  HOTLOOP_CHECK(in.good(), path, ": cannot read");
  std::vector<std::string> names;
  std::vector<MetricsTable::Column> columns;
  bool have_header = false;
  std::string line;
  std::vector<std::string> cells;
  for (int64_t line_number = 1; std::getline(in, line); ++line_number) {
    if (!line.empty() && line.back() == '\r') {
      line.pop_back(); // written on Windows
    }
    if (trim(line).empty()) {
      continue;
    }
    if (!have_header) {
      names = read_header(path, line_number, line);
      columns.resize(names.size());
      have_header = true;
      continue;
    }
    HOTLOOP_CHECK(
        split_csv_line(line, &cells),
        path,
        ":",
        line_number,
        ": expected a closing quote");
    HOTLOOP_CHECK(
        cells.size() == names.size(),
        path,
        ":",
        line_number,
        ": expected ",
        names.size(),
        " cells as in the header, got ",
        cells.size());
    for (size_t i = 0; i < cells.size(); ++i) {
      const std::string text = trim(cells[i]);
      if (text.empty()) {
        columns[i].push_back(std::nullopt);
        continue;
      }
      const std::optional<double> value = parse_number(text);
      HOTLOOP_CHECK(
          value.has_value(),
          path,
          ":",
          line_number,
          ": expected a number in column '",
          names[i],
          "', got '",
          text,
          "'");
      columns[i].push_back(value);
    }
  }
  HOTLOOP_CHECK(in.eof(), path, ": cannot read");
  return MetricsTable(std::move(names), std::move(columns));
}

} // namespace hotloop::log
