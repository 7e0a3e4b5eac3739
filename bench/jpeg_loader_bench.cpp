// One epoch of a folder of real JPEGs through hotloop's DataLoader over
// ImageFolder and through PyTorch's DataLoader over torchvision's
// ImageFolder, printed side by side as ratios.
//
// The folder: Fashion-MNIST upscaled to 256x256 RGB JPEGs (quality 90, 6000
// files by default), written by bench/make_jpeg_folder.py, or any
// ImageFolder root given with --root. Every row does the same work: every
// file, shuffled, decoded to RGB, RandomResizedCrop(224) (scale 0.08-1,
// ratio 3/4-4/3), horizontal flip, normalize with ImageNet's mean and std,
// batches of 64 as [B, 3, 224, 224] float32 inputs and [B] int64 targets,
// each batch touched (one element read). Each row runs one untimed warm-up
// epoch, then --epochs timed epochs; figures are the median epoch.
// Information only: the exit status ignores the target.

#include <hotloop/core/error.h>
#include "bench_util.h"

#include <hotloop/data.h>

#include <ATen/Parallel.h>
#include <torch/types.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef HOTLOOP_BENCH_PYTHON
#define HOTLOOP_BENCH_PYTHON "/usr/bin/python3"
#endif
#ifndef HOTLOOP_BENCH_IMAGE_FOLDER_SCRIPT
#define HOTLOOP_BENCH_IMAGE_FOLDER_SCRIPT "bench/python_image_folder.py"
#endif
#ifndef HOTLOOP_BENCH_MAKE_JPEG_SCRIPT
#define HOTLOOP_BENCH_MAKE_JPEG_SCRIPT "bench/make_jpeg_folder.py"
#endif
#ifndef HOTLOOP_BENCH_JPEG_FOLDER
#define HOTLOOP_BENCH_JPEG_FOLDER "build/bench-data/fashion-jpeg"
#endif

using hotloop::bench::describe_machine;
using hotloop::bench::json_number;
using hotloop::bench::json_string;
using hotloop::bench::quoted;
using hotloop::bench::run_command;
using hotloop::bench::shell_quote;
using hotloop::bench::load_average;
using hotloop::bench::Machine;

namespace {

constexpr int64_t kBatchSize = 64;
constexpr int64_t kSide = 224;
constexpr int64_t kChannels = 3;
constexpr uint64_t kSeed = 0;
constexpr int64_t kDefaultCount = 6000;

// The target the project tracks: hotloop's faster row over PyTorch's faster
// row.
constexpr double kTargetOverPython = 5;

struct Options {
  std::string root; // empty: the folder make_jpeg_folder.py makes
  int64_t epochs = 1;
  bool skip_python = false;
  bool json = false;
  std::string python = HOTLOOP_BENCH_PYTHON;
  std::optional<int64_t> count; // files to make; only without --root
};

/// Median timed epoch of one competitor.
struct Measurement {
  double epoch_seconds = 0;
  int64_t samples = 0; // per epoch
  double samples_per_second() const {
    return samples / epoch_seconds;
  }
};

struct Row {
  std::string name;
  std::string key; // stable id for JSON and the target
  int64_t threads = 0;
  std::optional<Measurement> measured;
  std::string skipped; // why there is no measurement
};

// Keeps the compiler from dropping work whose result is never read.
volatile double g_sink = 0;

// Reads one element of each output, as a training step would read them all.
void touch(const float* input, const int64_t* target) {
  g_sink = g_sink + input[0] + static_cast<double>(target[0]);
}

void check_batch(const at::Tensor& input, const at::Tensor& target) {
  const int64_t b = target.numel();
  if (input.dim() != 4 || input.size(0) != b || input.size(1) != kChannels ||
      input.size(2) != kSide || input.size(3) != kSide ||
      input.scalar_type() != at::kFloat || target.scalar_type() != at::kLong ||
      !input.is_contiguous()) {
    std::ostringstream message;
    message << "unexpected batch: input " << input.sizes() << " "
            << input.scalar_type() << ", target " << target.sizes() << " "
            << target.scalar_type();
    throw std::runtime_error(message.str());
  }
}

// One warm-up epoch, then `epochs` timed ones; `run_epoch` returns the
// samples it saw.
Measurement time_epochs(
    int64_t epochs,
    int64_t expected_samples,
    const std::function<int64_t()>& run_epoch) {
  run_epoch();
  std::vector<double> seconds;
  for (int64_t e = 0; e < epochs; ++e) {
    const auto start = std::chrono::steady_clock::now();
    const int64_t samples = run_epoch();
    const auto stop = std::chrono::steady_clock::now();
    if (samples != expected_samples) {
      throw std::runtime_error(
          "an epoch gave " + std::to_string(samples) + " samples, expected " +
          std::to_string(expected_samples));
    }
    seconds.push_back(std::chrono::duration<double>(stop - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  const size_t n = seconds.size();
  const double median =
      n % 2 == 1 ? seconds[n / 2] : (seconds[n / 2 - 1] + seconds[n / 2]) / 2;
  return Measurement{median, expected_samples};
}

/// torchvision's ImageNet training recipe at 224x224 as hotloop spells it.
std::shared_ptr<hotloop::data::ImageFolder> make_image_folder(
    const std::string& root) {
  hotloop::data::ImageTransformOptions transform;
  transform.horizontal_flip = true;
  transform.mean = {0.485, 0.456, 0.406};
  transform.std = {0.229, 0.224, 0.225};
  return std::make_shared<hotloop::data::ImageFolder>(
      root,
      hotloop::data::ImageFolderOptions({kSide, kSide})
          .channels(kChannels)
          .crop("random_resized_crop")
          .transform(transform));
}

Measurement bench_hotloop(
    const std::shared_ptr<hotloop::data::ImageFolder>& folder,
    int64_t workers,
    int64_t epochs) {
  auto options = hotloop::data::DataLoaderOptions(kBatchSize)
                     .shuffle(true)
                     .num_workers(workers)
                     .seed(kSeed);
  if (workers > 0) {
    // As the Python rows' persistent_workers: the threads start once, not
    // once per epoch.
    options.persistent_workers(true);
  }
  hotloop::data::DataLoader loader(folder, options);
  return time_epochs(epochs, folder->size(), [&] {
    int64_t samples = 0;
    for (auto& batch : loader) {
      check_batch(batch.input, batch.target);
      touch(batch.input.data_ptr<float>(), batch.target.data_ptr<int64_t>());
      samples += batch.target.size(0);
    }
    return samples;
  });
}

// --- Subprocesses ----------------------------------------------------------

bool is_directory(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

/// Makes (or finds already made) the default folder with
/// make_jpeg_folder.py; throws hotloop::DataError when it cannot.
void make_folder(const Options& options, const std::string& root) {
  if (access(options.python.c_str(), X_OK) != 0) {
    throw hotloop::DataError(
        options.python +
        " not found or not executable: it makes the JPEG folder (--python "
        "PATH), or pass --root DIR with an ImageFolder of your own");
  }
  const std::string command =
      shell_quote(options.python) + " " +
      shell_quote(HOTLOOP_BENCH_MAKE_JPEG_SCRIPT) + " --out " +
      shell_quote(root) + " --count " +
      std::to_string(options.count.value_or(kDefaultCount));
  std::string output;
  const int status = run_command(command, output);
  if (status != 0 || !is_directory(root)) {
    throw hotloop::DataError(
        std::string(HOTLOOP_BENCH_MAKE_JPEG_SCRIPT) +
        " could not make the JPEG folder " + root + " (exit status " +
        std::to_string(status) + "; its message is above)");
  }
}

/// What make_jpeg_folder.py's stamp says about the folder ("Fashion-MNIST
/// upscaled to 256x256 RGB JPEGs, quality 90, ..."); empty for a folder it
/// did not make.
std::string describe_folder(const std::string& root) {
  std::ifstream file(root + "/.make_jpeg_folder.json");
  if (!file) {
    return "";
  }
  const std::string text(
      (std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const auto size = json_number(text, "size");
  const auto quality = json_number(text, "quality");
  if (!size || !quality) {
    return "";
  }
  const long side = static_cast<long>(*size);
  return "Fashion-MNIST upscaled to " + std::to_string(side) + "x" +
         std::to_string(side) + " RGB JPEGs, quality " +
         std::to_string(static_cast<long>(*quality)) + ", by " +
         "make_jpeg_folder.py";
}

struct PythonResult {
  std::vector<Row> rows; // one per worker count, or one skipped row each
  std::string versions;  // "Python 3.11.2, torch ..." when it ran
};

Row python_row(int64_t workers) {
  Row row;
  row.name = "PyTorch DataLoader + torchvision ImageFolder";
  row.key = "python_" + std::to_string(workers);
  row.threads = workers;
  return row;
}

PythonResult run_python(const Options& options, const std::string& root) {
  PythonResult result;
  auto skip_all = [&](const std::string& why) {
    for (int64_t workers : {0, 2}) {
      Row row = python_row(workers);
      row.skipped = why;
      result.rows.push_back(row);
    }
    return result;
  };
  if (options.skip_python) {
    return skip_all("--skip-python");
  }
  if (access(options.python.c_str(), X_OK) != 0) {
    return skip_all(options.python + " not found or not executable");
  }
  if (access(HOTLOOP_BENCH_IMAGE_FOLDER_SCRIPT, R_OK) != 0) {
    return skip_all(
        std::string(HOTLOOP_BENCH_IMAGE_FOLDER_SCRIPT) + " not found");
  }
  const std::string command = shell_quote(options.python) + " " +
                              shell_quote(HOTLOOP_BENCH_IMAGE_FOLDER_SCRIPT) +
                              " --json --workers 0,2 --root " +
                              shell_quote(root) + " --epochs " +
                              std::to_string(options.epochs);
  std::string output;
  const int status = run_command(command, output);
  if (auto error = json_string(output, "error")) {
    return skip_all(*error);
  }
  if (status != 0) {
    return skip_all(
        options.python + " exited with status " + std::to_string(status));
  }
  const size_t results = output.find("\"results\"");
  if (results == std::string::npos) {
    return skip_all("no results in the script's output");
  }
  // Each result is a flat object {"workers": ..., "samples_per_s": ...}.
  for (size_t open = output.find('{', results); open != std::string::npos;
       open = output.find('{', open + 1)) {
    const size_t close = output.find('}', open);
    if (close == std::string::npos) {
      break;
    }
    const std::string object = output.substr(open, close - open + 1);
    const auto workers = json_number(object, "workers");
    const auto samples = json_number(object, "samples");
    const auto epoch_s = json_number(object, "epoch_s");
    if (!workers || !samples || !epoch_s) {
      return skip_all("malformed result: " + object);
    }
    Row row = python_row(static_cast<int64_t>(*workers));
    row.measured = Measurement{*epoch_s, static_cast<int64_t>(*samples)};
    result.rows.push_back(row);
  }
  if (result.rows.empty()) {
    return skip_all("no results in the script's output");
  }
  result.versions = "Python " + json_string(output, "python").value_or("?") +
                    ", torch " + json_string(output, "torch").value_or("?") +
                    ", torchvision " +
                    json_string(output, "torchvision").value_or("?") +
                    ", Pillow " + json_string(output, "pillow").value_or("?");
  return result;
}

// --- Report ----------------------------------------------------------------

const Row* find_row(const std::vector<Row>& rows, const std::string& key) {
  for (const Row& row : rows) {
    if (row.key == key && row.measured) {
      return &row;
    }
  }
  return nullptr;
}

// The fastest measured row whose key starts with `prefix`.
const Row* best_row(const std::vector<Row>& rows, const std::string& prefix) {
  const Row* best = nullptr;
  for (const Row& row : rows) {
    if (row.key.rfind(prefix, 0) == 0 && row.measured &&
        (best == nullptr || row.measured->samples_per_second() >
                                best->measured->samples_per_second())) {
      best = &row;
    }
  }
  return best;
}

/// hotloop's faster row over PyTorch's faster row.
struct Target {
  const Row* hotloop = nullptr;
  const Row* python = nullptr;
  std::optional<double> measured; // nullopt when a side has no row
  std::string why_missing;
  bool pass() const {
    return measured && *measured >= kTargetOverPython;
  }
  std::string result() const {
    return !measured ? "n/a" : pass() ? "PASS" : "MISS";
  }
};

Target evaluate_target(const std::vector<Row>& rows) {
  Target t;
  t.hotloop = best_row(rows, "hotloop_");
  t.python = best_row(rows, "python_");
  if (t.hotloop && t.python) {
    t.measured = t.hotloop->measured->samples_per_second() /
                 t.python->measured->samples_per_second();
  } else {
    t.why_missing = t.python ? "hotloop rows missing" : "PyTorch rows skipped";
  }
  return t;
}

std::string format(const char* spec, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), spec, value);
  return text;
}

constexpr const char* kRowFormat = "%-44s %7ld %12.1f %9.3f %13s\n";
constexpr const char* kSkipFormat = "%-44s %7ld  skipped (%s)\n";

void print_table(
    const std::string& root,
    const std::string& folder_description,
    int64_t images,
    int64_t classes,
    const Options& options,
    const Machine& machine,
    const std::string& python_versions,
    const std::vector<Row>& rows,
    const Target& target) {
  std::printf("hotloop JPEG image-folder loader benchmark\n");
  std::vector<std::pair<std::string, std::string>> extra;
  if (!python_versions.empty()) {
    extra.emplace_back("python", python_versions);
  }
  hotloop::bench::print_machine(machine, extra);
  std::printf(
      "data:    %s: %ld images in %ld classes%s%s\n",
      root.c_str(),
      static_cast<long>(images),
      static_cast<long>(classes),
      folder_description.empty() ? "" : "; ",
      folder_description.c_str());
  std::printf(
      "work:    batch %ld, shuffled, decode to RGB, RandomResizedCrop(224) + "
      "RandomHorizontalFlip + Normalize(ImageNet mean/std) -> [B,3,224,224] "
      "float32 + [B] int64\n",
      static_cast<long>(kBatchSize));
  std::printf(
      "threads: hotloop rows with 1 intra-op thread (threads = loader "
      "threads); PyTorch rows torch.set_num_threads(1), threads = worker "
      "processes\n");
  std::printf(
      "timing:  1 warm-up epoch per row, then %ld timed epoch(s); median "
      "epoch\n\n",
      static_cast<long>(options.epochs));

  const Row* hotloop = find_row(rows, "hotloop_2");
  std::printf(
      "%-44s %7s %12s %9s %13s\n",
      "loader",
      "threads",
      "samples/s",
      "epoch s",
      "hotloop(2)/x");
  for (const Row& row : rows) {
    if (!row.measured) {
      std::printf(
          kSkipFormat,
          row.name.c_str(),
          static_cast<long>(row.threads),
          row.skipped.c_str());
      continue;
    }
    const double sps = row.measured->samples_per_second();
    const std::string over =
        hotloop ? format("%.2fx", hotloop->measured->samples_per_second() / sps)
                : "-";
    std::printf(
        kRowFormat,
        row.name.c_str(),
        static_cast<long>(row.threads),
        sps,
        row.measured->epoch_seconds,
        over.c_str());
  }
  std::printf("\ntarget (information only, not a gate):\n");
  if (target.measured) {
    std::printf(
        "  hotloop (best) >= %.0fx PyTorch (best): %s (measured %.2fx) - "
        "hotloop with %ld threads over PyTorch with %ld workers\n",
        kTargetOverPython,
        target.result().c_str(),
        *target.measured,
        static_cast<long>(target.hotloop->threads),
        static_cast<long>(target.python->threads));
  } else {
    std::printf(
        "  hotloop (best) >= %.0fx PyTorch (best): n/a (%s)\n",
        kTargetOverPython,
        target.why_missing.c_str());
  }
}

void print_json(
    const std::string& root,
    const std::string& folder_description,
    int64_t images,
    int64_t classes,
    const Options& options,
    const Machine& machine,
    const std::string& python_versions,
    const std::vector<Row>& rows,
    const Target& target) {
  const Row* hotloop = find_row(rows, "hotloop_2");
  std::ostringstream out;
  out.precision(10);
  out << "{\n  \"machine\": {\"cpu\": " << quoted(machine.cpu)
      << ", \"cores\": " << machine.cores
      << ", \"libtorch\": " << quoted(machine.libtorch)
      << ", \"intra_op_threads\": " << machine.intra_op_threads
      << ", \"python\": " << quoted(python_versions)
      << ", \"date\": " << quoted(machine.date)
      << ", \"load_average_before\": " << quoted(machine.load_before)
      << ", \"load_average_after\": " << quoted(machine.load_after) << "},\n";
  out << "  \"config\": {\"root\": " << quoted(root)
      << ", \"folder\": " << quoted(folder_description)
      << ", \"images\": " << images << ", \"classes\": " << classes
      << ", \"batch_size\": " << kBatchSize << ", \"output\": [" << kChannels
      << ", " << kSide << ", " << kSide
      << "], \"crop\": \"random_resized_crop\", \"horizontal_flip\": true"
      << ", \"warmup\": \"1 epoch\", \"timed_epochs\": " << options.epochs
      << ", \"statistic\": \"median epoch\"},\n";
  out << "  \"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& row = rows[i];
    out << (i ? ",\n" : "\n") << "    {\"key\": " << quoted(row.key)
        << ", \"name\": " << quoted(row.name)
        << ", \"threads\": " << row.threads;
    if (row.measured) {
      const double sps = row.measured->samples_per_second();
      out << ", \"samples_per_s\": " << sps
          << ", \"epoch_s\": " << row.measured->epoch_seconds
          << ", \"samples_per_epoch\": " << row.measured->samples;
      if (hotloop) {
        out << ", \"hotloop_2_over_row\": "
            << hotloop->measured->samples_per_second() / sps;
      }
    } else {
      out << ", \"samples_per_s\": null, \"skipped\": " << quoted(row.skipped);
    }
    out << "}";
  }
  out << "\n  ],\n  \"target\": {\"name\": "
      << quoted("hotloop (best) over PyTorch (best)")
      << ", \"goal\": " << kTargetOverPython
      << ", \"unit\": \"x\", \"measured\": ";
  if (target.measured) {
    out << *target.measured
        << ", \"hotloop_row\": " << quoted(target.hotloop->key)
        << ", \"python_row\": " << quoted(target.python->key);
  } else {
    out << "null, \"why\": " << quoted(target.why_missing);
  }
  out << ", \"result\": " << quoted(target.result()) << "}\n}\n";
  std::cout << out.str();
}

// --- Command line ----------------------------------------------------------

void print_usage() {
  std::printf(
      "usage: jpeg_loader_bench [--root DIR | --count N] [--epochs N] "
      "[--skip-python]\n"
      "                         [--json] [--python PATH]\n"
      "  --root DIR      an ImageFolder root (<DIR>/<class>/<image>.jpg) to "
      "use as it is\n"
      "                  (default: %s, made or checked\n"
      "                  by make_jpeg_folder.py before the rows run)\n"
      "  --count N       JPEG files in the default folder (default %ld); "
      "not with --root\n"
      "  --epochs N      timed epochs per row after 1 warm-up epoch "
      "(default 1)\n"
      "  --skip-python   leave out the PyTorch DataLoader rows\n"
      "  --json          print the results as JSON\n"
      "  --python PATH   interpreter with torch + torchvision, also runs "
      "make_jpeg_folder.py\n"
      "                  (default %s)\n",
      HOTLOOP_BENCH_JPEG_FOLDER,
      static_cast<long>(kDefaultCount),
      HOTLOOP_BENCH_PYTHON);
}

int64_t positive_integer(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || value < 1) {
    throw std::invalid_argument(
        flag + " must be a positive integer, got '" + text + "'");
  }
  return value;
}

// nullopt after --help.
std::optional<Options> parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        throw std::invalid_argument(arg + " needs a value");
      }
      return argv[++i];
    };
    if (arg == "--root") {
      options.root = value();
      if (options.root.empty()) {
        throw std::invalid_argument("--root needs a folder");
      }
    } else if (arg == "--epochs") {
      options.epochs = positive_integer(arg, value());
    } else if (arg == "--count") {
      options.count = positive_integer(arg, value());
    } else if (arg == "--skip-python") {
      options.skip_python = true;
    } else if (arg == "--json") {
      options.json = true;
    } else if (arg == "--python") {
      options.python = value();
    } else if (arg == "--help" || arg == "-h") {
      print_usage();
      return std::nullopt;
    } else {
      throw std::invalid_argument(
          "unknown argument '" + arg + "' (see --help)");
    }
  }
  if (!options.root.empty() && options.count) {
    throw std::invalid_argument(
        "--count sizes the folder the benchmark makes; it does not apply to "
        "--root");
  }
  return options;
}

void log_progress(const std::string& what) {
  // Progress goes to stderr so --json output stays one document.
  std::fprintf(stderr, "running %s...\n", what.c_str());
}

int run(const Options& options) {
  // One intra-op thread, so that a hotloop row's thread count is its loader
  // threads and nothing else; describe_machine records it.
  at::set_num_threads(1);

  std::string root = options.root;
  if (root.empty()) {
    root = HOTLOOP_BENCH_JPEG_FOLDER;
    log_progress("make_jpeg_folder.py (does nothing when the folder is made)");
    make_folder(options, root);
  } else if (!is_directory(root)) {
    std::fprintf(
        stderr,
        "error: image folder %s not found; pass --root DIR with "
        "<DIR>/<class>/<image>.jpg, or leave --root out to have "
        "make_jpeg_folder.py make one\n",
        root.c_str());
    return 1;
  }
  Machine machine = describe_machine();

  const auto folder = make_image_folder(root);
  const std::string folder_description = describe_folder(root);
  const int64_t images = folder->size();
  const auto classes = static_cast<int64_t>(folder->classes().size());

  std::vector<Row> rows;
  for (int64_t workers : {0, 2}) {
    Row row;
    row.name = "hotloop DataLoader + ImageFolder";
    row.key = "hotloop_" + std::to_string(workers);
    row.threads = workers;
    log_progress(row.name + ", " + std::to_string(workers));
    row.measured = bench_hotloop(folder, workers, options.epochs);
    rows.push_back(row);
  }
  log_progress("PyTorch DataLoader + torchvision ImageFolder (subprocess)");
  PythonResult python = run_python(options, root);
  rows.insert(rows.end(), python.rows.begin(), python.rows.end());
  machine.load_after = load_average();

  const Target target = evaluate_target(rows);
  if (options.json) {
    print_json(
        root,
        folder_description,
        images,
        classes,
        options,
        machine,
        python.versions,
        rows,
        target);
  } else {
    print_table(
        root,
        folder_description,
        images,
        classes,
        options,
        machine,
        python.versions,
        rows,
        target);
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  try {
    const std::optional<Options> options = parse(argc, argv);
    return options ? run(*options) : 0;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const hotloop::DataError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
