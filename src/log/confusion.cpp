#include "hotloop/log/confusion.h"

#include "hotloop/core/error.h"
#include "hotloop/log/csv.h"
#include "hotloop/train/checkpoint.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <fstream>
#include <iomanip>
#include <sstream>

namespace hotloop::log {
namespace {

std::string name_of(const std::vector<std::string>& names, int64_t k) {
  return k < static_cast<int64_t>(names.size()) ? names[k]
                                                : std::to_string(k);
}

} // namespace

void print_confusion(
    std::ostream& out,
    const at::Tensor& confusion,
    const std::vector<std::string>& names) {
  const int64_t classes = confusion.size(0);
  const at::Tensor counts = confusion.to(at::kCPU, at::kLong).contiguous();
  const int64_t* c = counts.data_ptr<int64_t>();
  size_t width = 5;
  for (int64_t k = 0; k < classes; ++k) {
    width = std::max(width, name_of(names, k).size());
  }
  std::ostringstream text;
  text << "per class (accuracy: the share of the class predicted right)\n";
  text << "  " << std::left << std::setw(width) << "class" << std::right
       << std::setw(10) << "accuracy" << std::setw(8) << "count" << "\n";
  for (int64_t t = 0; t < classes; ++t) {
    int64_t total = 0;
    for (int64_t p = 0; p < classes; ++p) {
      total += c[t * classes + p];
    }
    text << "  " << std::left << std::setw(width) << name_of(names, t)
         << std::right << std::setw(10);
    if (total > 0) {
      text << std::fixed << std::setprecision(4)
           << static_cast<double>(c[t * classes + t]) / total;
    } else {
      text << "-";
    }
    text << std::setw(8) << total << "\n";
  }
  text << "confusion matrix (rows: true class, columns: predicted)\n";
  size_t cell = 5;
  for (int64_t k = 0; k < classes; ++k) {
    cell = std::max(cell, name_of(names, k).size());
  }
  text << "  " << std::setw(width) << "";
  for (int64_t p = 0; p < classes; ++p) {
    text << " " << std::setw(cell) << name_of(names, p);
  }
  text << "\n";
  for (int64_t t = 0; t < classes; ++t) {
    text << "  " << std::left << std::setw(width) << name_of(names, t)
         << std::right;
    for (int64_t p = 0; p < classes; ++p) {
      text << " " << std::setw(cell) << c[t * classes + p];
    }
    text << "\n";
  }
  out << text.str();
}

void write_confusion_csv(
    const std::string& path,
    const at::Tensor& confusion,
    const std::vector<std::string>& names) {
  const int64_t classes = confusion.size(0);
  const at::Tensor counts = confusion.to(at::kCPU, at::kLong).contiguous();
  const int64_t* c = counts.data_ptr<int64_t>();
  train::write_file_atomically(path, [&](std::ostream& csv) {
    csv << "true\\predicted";
    for (int64_t p = 0; p < classes; ++p) {
      csv << "," << csv_field(name_of(names, p));
    }
    csv << "\n";
    for (int64_t t = 0; t < classes; ++t) {
      csv << csv_field(name_of(names, t));
      for (int64_t p = 0; p < classes; ++p) {
        csv << "," << c[t * classes + p];
      }
      csv << "\n";
    }
  });
}

ConfusionTable read_confusion_csv(const std::string& path) {
  std::ifstream in(path);
  HOTLOOP_CHECK(in, path, ": cannot open");
  ConfusionTable table;
  std::string line;
  HOTLOOP_CHECK(std::getline(in, line), path, ": empty");
  std::vector<std::string> header;
  HOTLOOP_CHECK(
      split_csv_line(line, &header), path, ": an unterminated quote");
  table.names.assign(header.begin() + 1, header.end());
  const size_t classes = table.names.size();
  while (std::getline(in, line)) {
    std::vector<std::string> fields;
    HOTLOOP_CHECK(
        split_csv_line(line, &fields), path, ": an unterminated quote");
    HOTLOOP_CHECK(
        fields.size() == classes + 1,
        path,
        ": row ",
        table.counts.size() + 1,
        " has ",
        fields.size(),
        " fields, expected ",
        classes + 1);
    std::vector<int64_t> row;
    for (size_t k = 1; k < fields.size(); ++k) {
      try {
        size_t used = 0;
        row.push_back(std::stoll(fields[k], &used));
        HOTLOOP_CHECK(used == fields[k].size(), "");
      } catch (const std::exception&) {
        throw Error(path + ": '" + fields[k] + "' is not a count");
      }
    }
    table.counts.push_back(std::move(row));
  }
  HOTLOOP_CHECK(
      table.counts.size() == classes,
      path,
      ": ",
      table.counts.size(),
      " rows for ",
      classes,
      " classes");
  return table;
}

} // namespace hotloop::log
