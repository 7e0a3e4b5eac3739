#include "commands.h"

#include "hotloop/cli/trained_data.h"
#include "hotloop/core/error.h"
#include "hotloop/train/checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <sstream>

namespace hotloop::cli {
namespace {

// 1234567 as "1,234,567".
std::string grouped(int64_t n) {
  std::string digits = std::to_string(n);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) {
    digits.insert(static_cast<size_t>(i), ",");
  }
  return digits;
}

// The number of values of a "[a, b, c]" shape.
int64_t values_of(const std::string& shape) {
  int64_t n = 1;
  std::istringstream in(shape.substr(1));
  int64_t d = 0;
  char separator = 0;
  while (in >> d) {
    n *= d;
    in >> separator;
  }
  return n;
}

} // namespace

int run_checkpoint(const std::vector<std::string>& args, std::ostream& out) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    out << "usage: hotloop checkpoint PATH\n\n"
           "Prints what a checkpoint holds (progress, the model's parameters, "
           "optimizers,\nschedules, callbacks, metrics) and whether its "
           "checksum verifies; exit status 1\nwhen it does not.\n";
    return 0;
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      args.size() == 1 && args[0].rfind("--", 0) != 0,
      "usage: hotloop checkpoint PATH");
  const std::string& path = args[0];
  const train::CheckpointSummary s = train::describe_checkpoint(path);
  std::error_code ec;
  out << "checkpoint " << path << " ("
      << grouped(static_cast<int64_t>(std::filesystem::file_size(path, ec)))
      << " bytes)\n";
  char crc[9];
  std::snprintf(crc, sizeof(crc), "%08x", s.seal.stored_crc);
  if (!s.seal.intact) {
    out << "  integrity: CORRUPTED: " << s.seal.problem << "\n"
        << "  content: not read ("
        << (s.seal.sealed ? "the file changed after hotloop wrote it"
                          : "LibTorch's reader does not check damaged records")
        << ")\n";
    return 1;
  }
  if (!s.seal.sealed) {
    out << "  integrity: no checksum (written by an older hotloop); its zip "
           "records' CRC-32s match, format "
        << s.format << "\n";
  } else {
    out << "  integrity: verified (crc32 " << crc << "), format "
        << s.seal.format << ", written by hotloop " << s.seal.hotloop_version
        << " with LibTorch " << s.seal.libtorch_version << "\n";
  }
  out << "  progress: " << hotloop::detail::counted(s.progress.epoch, "epoch")
      << " completed, step " << s.progress.global_step;
  if (s.progress.epoch_batches > 0) {
    out << ", "
        << hotloop::detail::counted(
               s.progress.epoch_batches, "batch", "batches")
        << " into epoch " << s.progress.epoch + 1;
  }
  out << "\n";
  if (!s.model.empty()) {
    int64_t values = 0;
    for (const auto& [name, shape] : s.model) {
      values += values_of(shape);
    }
    out << "  model: " << s.model.size() << " parameters and buffers, "
        << grouped(values) << " values\n";
    for (const auto& [name, shape] : s.model) {
      out << "    " << name << " " << shape << "\n";
    }
  }
  out << "  optimizers: " << s.optimizers << ", schedules: " << s.schedulers
      << (s.grad_scaler ? ", a loss scaler" : "") << "\n";
  if (!s.callbacks.empty()) {
    out << "  callbacks:";
    for (const std::string& key : s.callbacks) {
      out << " " << key;
    }
    out << "\n";
  }
  const nlohmann::json states =
      nlohmann::json::parse(s.callback_states, nullptr, false);
  if (states.is_object() && states.contains("data")) {
    const TrainedData data = TrainedData::from_json(states.at("data"), path);
    out << "  trained on:";
    if (data.num_classes > 0) {
      out << " " << data.num_classes << " classes";
      for (size_t k = 0; k < data.class_names.size(); ++k) {
        out << (k == 0 ? " (" : ", ") << data.class_names[k];
        if (k == 7 && data.class_names.size() > 9) {
          out << ", ... " << data.class_names.back();
          break;
        }
      }
      out << (data.class_names.empty() ? "" : ")");
    }
    if (!data.feature_names.empty()) {
      out << (data.num_classes > 0 ? ";" : "") << " columns";
      for (size_t j = 0; j < data.feature_names.size(); ++j) {
        out << (j == 0 ? " " : ", ") << data.feature_names[j];
      }
      out << " (standardized), label " << data.label_name;
    }
    out << "\n";
  }
  if (!s.metrics.empty()) {
    out << "  metrics:" << std::fixed << std::setprecision(4);
    for (const auto& [name, value] : s.metrics) {
      out << " " << name << " " << value;
    }
    out << std::defaultfloat << "\n";
  }
  return 0;
}

} // namespace hotloop::cli
