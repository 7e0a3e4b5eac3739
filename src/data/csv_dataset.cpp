#include "hotloop/data/csv_dataset.h"

#include "hotloop/core/error.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string_view>

namespace hotloop::data {
namespace {

constexpr std::string_view kBlank = " \t";
constexpr std::string_view kByteOrderMark = "\xEF\xBB\xBF";
// Every integer up to 2^53 is exact in a double.
constexpr double kMaxClassIndex = 9007199254740992.0;

std::string read_file(const std::string& path) {
  hotloop::detail::require_file(path);
  std::ifstream in(path, std::ios::binary);
  HOTLOOP_CHECK_AS(
      DataError, in, path, ": cannot open: ", std::strerror(errno));
  std::string text(std::filesystem::file_size(path), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  HOTLOOP_CHECK_AS(
      DataError,
      in.gcount() == static_cast<std::streamsize>(text.size()),
      path,
      ": read failed after ",
      in.gcount(),
      " of ",
      text.size(),
      " bytes");
  return text;
}

// Splits `line` at `delimiter`s outside double quotes ("" inside quotes
// toggles twice, so escaped quotes need no special case).
void split(
    std::string_view line, char delimiter, std::vector<std::string_view>& out) {
  out.clear();
  size_t start = 0;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '"') {
      quoted = !quoted;
    } else if (line[i] == delimiter && !quoted) {
      out.push_back(line.substr(start, i - start));
      start = i + 1;
    }
  }
  out.push_back(line.substr(start));
}

// The field without surrounding blanks and double quotes.
std::string_view unquote(std::string_view field) {
  const size_t begin = field.find_first_not_of(kBlank);
  if (begin == std::string_view::npos) {
    return {};
  }
  field = field.substr(begin, field.find_last_not_of(kBlank) - begin + 1);
  if (field.size() >= 2 && field.front() == '"' && field.back() == '"') {
    field = field.substr(1, field.size() - 2);
  }
  return field;
}

// A header name: unquoted, with "" turned back into ".
std::string column_name(std::string_view field) {
  std::string name(unquote(field));
  for (size_t at = name.find("\"\""); at != std::string::npos;
       at = name.find("\"\"", at + 1)) {
    name.erase(at, 1);
  }
  return name;
}

// Parses the whole of `text` as a number, as `float(text)` would.
bool parse_number(std::string_view text, double& value) {
  if (!text.empty() && text.front() == '+') {
    text.remove_prefix(1); // from_chars does not take a leading '+'
    if (!text.empty() && text.front() == '-') {
      return false;
    }
  }
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return !text.empty() && ec == std::errc() && ptr == end;
}

bool is_class_index(double value) {
  return value >= 0 && value < kMaxClassIndex && std::floor(value) == value;
}

// "'a', 'b', 'c'" for an error message.
std::string quoted_list(const std::vector<std::string>& names) {
  std::string listed;
  for (const std::string& name : names) {
    listed += (listed.empty() ? "'" : ", '") + name + "'";
  }
  return listed;
}

// The label column's index, from the header names or the index option.
int64_t label_column(
    const std::string& path,
    const CsvDatasetOptions& options,
    const std::vector<std::string>& names,
    int64_t columns) {
  if (!options.label_column().empty()) {
    for (size_t j = 0; j < names.size(); ++j) {
      if (names[j] == options.label_column()) {
        return static_cast<int64_t>(j);
      }
    }
    if (options.label_optional()) {
      return -1; // a table to predict on
    }
    throw ConfigError(hotloop::detail::str_cat(
        "data.label_column '",
        options.label_column(),
        "' is not a column of ",
        path,
        " (columns: ",
        quoted_list(names),
        ")"));
  }
  const int64_t index = options.label_index() < 0
                            ? columns + options.label_index()
                            : options.label_index();
  HOTLOOP_CHECK_AS(
      ConfigError,
      index >= 0 && index < columns,
      "data.label_index ",
      options.label_index(),
      " is out of range for the ",
      columns,
      " columns of ",
      path);
  return index;
}

} // namespace

struct CsvDataset::Parsed {
  at::Tensor features;
  at::Tensor labels;
  std::vector<std::string> feature_names;
  std::string label_name;
  int64_t num_classes = 0;
  std::vector<std::string> class_names;
  bool labeled = true;
};

CsvDataset::CsvDataset(const std::string& path, CsvDatasetOptions options)
    : CsvDataset(parse(path, options)) {}

CsvDataset::CsvDataset(Parsed parsed)
    : TensorDataset(std::move(parsed.features), std::move(parsed.labels)),
      feature_names_(std::move(parsed.feature_names)),
      label_name_(std::move(parsed.label_name)),
      num_classes_(parsed.num_classes),
      class_names_(std::move(parsed.class_names)),
      labeled_(parsed.labeled) {}

CsvDataset::Parsed CsvDataset::parse(
    const std::string& path, const CsvDatasetOptions& options) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.header() || options.label_column().empty(),
      "data.label_column needs data.header (a header row naming the columns)");
  HOTLOOP_CHECK_AS(
      ConfigError,
      !options.label_optional() || !options.label_column().empty(),
      "an optional label column needs its name (data.label_column)");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.header() || options.feature_columns().empty(),
      "data.feature_columns needs data.header (a header row naming the "
      "columns)");
  const std::string text = read_file(path);
  std::string_view rest = text;
  if (rest.substr(0, kByteOrderMark.size()) == kByteOrderMark) {
    rest.remove_prefix(kByteOrderMark.size());
  }

  std::vector<std::string> names;
  std::vector<std::string_view> fields;
  int64_t columns = 0; // set by the first row
  int64_t label = 0;
  char delimiter = options.delimiter();
  // Per column: its place among the features, or -1 (the label, or a
  // column not asked for).
  std::vector<int64_t> feature_slot;
  int64_t feature_count = 0;
  std::vector<float> features;
  std::vector<std::string> label_texts; // classification
  std::vector<float> values;            // regression
  std::vector<int64_t> label_lines;
  int64_t rows = 0;
  int64_t line = 0;
  while (!rest.empty()) {
    const size_t end = rest.find('\n');
    std::string_view row = rest.substr(0, end);
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
    ++line;
    if (!row.empty() && row.back() == '\r') {
      row.remove_suffix(1);
    }
    if (row.find_first_not_of(kBlank) == std::string_view::npos) {
      continue;
    }
    if (delimiter == '\0') {
      const auto tabs = std::count(row.begin(), row.end(), '\t');
      const auto commas = std::count(row.begin(), row.end(), ',');
      delimiter = tabs > commas ? '\t' : ',';
    }
    split(row, delimiter, fields);
    if (columns == 0) {
      columns = static_cast<int64_t>(fields.size());
      if (options.header()) {
        for (std::string_view field : fields) {
          names.push_back(column_name(field));
        }
      }
      label = label_column(path, options, names, columns);
      HOTLOOP_CHECK_AS(
          DataError,
          columns >= (label < 0 ? 1 : 2),
          path,
          ":",
          line,
          ": expected at least 2 columns (features and a label), got ",
          columns);
      feature_slot.assign(columns, -1);
      if (options.feature_columns().empty()) {
        for (int64_t j = 0; j < columns; ++j) {
          feature_slot[j] = j == label ? -1 : feature_count++;
        }
      } else {
        for (const std::string& wanted : options.feature_columns()) {
          const auto at = std::find(names.begin(), names.end(), wanted);
          HOTLOOP_CHECK_AS(
              ConfigError,
              at != names.end() && at - names.begin() != label,
              "data.feature_columns: '",
              wanted,
              at == names.end() ? "' is not a column of "
                                : "' is the label of ",
              path);
          feature_slot[at - names.begin()] = feature_count++;
        }
      }
      if (options.header()) {
        continue;
      }
    }
    HOTLOOP_CHECK_AS(
        DataError,
        static_cast<int64_t>(fields.size()) == columns,
        path,
        ":",
        line,
        ": expected ",
        columns,
        " columns, got ",
        fields.size());
    ++rows;
    const size_t row_start = features.size();
    features.resize(row_start + feature_count);
    for (int64_t j = 0; j < columns; ++j) {
      const std::string_view field = unquote(fields[j]);
      if (j == label && !options.regression()) {
        label_texts.emplace_back(field);
        label_lines.push_back(line);
        continue;
      }
      if (j != label && feature_slot[j] < 0) {
        continue;
      }
      double value = 0;
      if (!parse_number(field, value)) {
        throw DataError(hotloop::detail::str_cat(
            path,
            ":",
            line,
            ": column ",
            j + 1,
            names.empty() ? "" : " ('" + names[j] + "')",
            field.empty() ? ": missing value" : ": expected a number, got '",
            field,
            field.empty() ? "" : "'"));
      }
      if (j == label) {
        values.push_back(static_cast<float>(value));
      } else {
        features[row_start + feature_slot[j]] = static_cast<float>(value);
      }
    }
  }
  HOTLOOP_CHECK_AS(DataError, columns > 0, path, ": empty file");
  HOTLOOP_CHECK_AS(
      DataError, rows > 0, path, ": no data rows after the header");

  Parsed parsed;
  parsed.features =
      at::from_blob(features.data(), {rows, feature_count}, at::kFloat).clone();
  if (label < 0) {
    parsed.labeled = false;
    parsed.labels =
        options.regression()
            ? at::full(
                  {rows}, std::numeric_limits<float>::quiet_NaN(), at::kFloat)
            : at::full({rows}, -1, at::kLong);
    parsed.class_names = options.classes();
    parsed.num_classes = static_cast<int64_t>(parsed.class_names.size());
  } else if (options.regression()) {
    parsed.labels = at::from_blob(values.data(), {rows}, at::kFloat).clone();
  } else if (!options.classes().empty()) {
    // The model's classes, in its order, whatever this file holds.
    parsed.class_names = options.classes();
    std::vector<int64_t> classes(rows);
    for (int64_t i = 0; i < rows; ++i) {
      const auto at = std::find(
          parsed.class_names.begin(), parsed.class_names.end(), label_texts[i]);
      if (at == parsed.class_names.end()) {
        throw DataError(hotloop::detail::str_cat(
            path,
            ":",
            label_lines[i],
            ": column ",
            label + 1,
            names.empty() ? "" : " ('" + names[label] + "')",
            ": '",
            label_texts[i],
            "' is not one of the model's classes (",
            quoted_list(parsed.class_names),
            ")"));
      }
      classes[i] = at - parsed.class_names.begin();
    }
    parsed.labels = at::from_blob(classes.data(), {rows}, at::kLong).clone();
    parsed.num_classes = static_cast<int64_t>(parsed.class_names.size());
  } else {
    // Integers >= 0 are class indices; any other label makes them all
    // names, numbered in sorted order.
    std::vector<int64_t> classes(rows);
    bool indices = true;
    bool numbers = true;
    int64_t first_bad = -1;
    for (int64_t i = 0; i < rows; ++i) {
      double value = 0;
      const bool number = parse_number(label_texts[i], value);
      numbers = numbers && number;
      if (number && is_class_index(value)) {
        classes[i] = static_cast<int64_t>(value);
      } else if (indices) {
        indices = false;
        first_bad = i;
      }
    }
    // Numbers that are not all class indices (2.5, -1) are a regression
    // target or a mistake, not names.
    if (!indices && numbers) {
      throw DataError(hotloop::detail::str_cat(
          path,
          ":",
          label_lines[first_bad],
          ": column ",
          label + 1,
          names.empty() ? "" : " ('" + names[label] + "')",
          ": expected a class index (an integer >= 0), got '",
          label_texts[first_bad],
          "' (for a number to predict: model.task=regression)"));
    }
    if (!indices) {
      for (int64_t i = 0; i < rows; ++i) {
        HOTLOOP_CHECK_AS(
            DataError,
            !label_texts[i].empty(),
            path,
            ":",
            label_lines[i],
            ": column ",
            label + 1,
            names.empty() ? "" : " ('" + names[label] + "')",
            ": missing label");
      }
      parsed.class_names = label_texts;
      std::sort(parsed.class_names.begin(), parsed.class_names.end());
      parsed.class_names.erase(
          std::unique(parsed.class_names.begin(), parsed.class_names.end()),
          parsed.class_names.end());
      for (int64_t i = 0; i < rows; ++i) {
        classes[i] = std::lower_bound(
                         parsed.class_names.begin(),
                         parsed.class_names.end(),
                         label_texts[i]) -
                     parsed.class_names.begin();
      }
    }
    parsed.labels = at::from_blob(classes.data(), {rows}, at::kLong).clone();
    parsed.num_classes = parsed.labels.max().item<int64_t>() + 1;
  }
  if (!names.empty()) {
    parsed.label_name = label < 0 ? options.label_column() : names[label];
    parsed.feature_names.resize(feature_count);
    for (int64_t j = 0; j < columns; ++j) {
      if (feature_slot[j] >= 0) {
        parsed.feature_names[feature_slot[j]] = names[j];
      }
    }
  }
  return parsed;
}

} // namespace hotloop::data
