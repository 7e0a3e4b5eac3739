// One epoch of augmented Fashion-MNIST through hotloop's DataLoader, LibTorch's
// torch::data loader, PyTorch's DataLoader with torchvision transforms, and a
// plain memcpy of the same output bytes, printed side by side as ratios.
//
// Every row does the same work: the 60000 training images, shuffled, random
// crop 28 with padding 2, horizontal flip, normalize (0.2860, 0.3530), batches
// of 256 as [B, 1, 28, 28] float32 inputs and [B] int64 targets. Each row runs
// one untimed warm-up epoch, then --epochs timed epochs; figures are the
// median epoch. Information only: the exit status ignores the targets.

#include <hotloop/core/error.h>
#include "bench_util.h"

#include <hotloop/data.h>

#include <ATen/Parallel.h>
#include <torch/data.h>
#include <torch/types.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef HOTLOOP_BENCH_PYTHON
#define HOTLOOP_BENCH_PYTHON "/usr/bin/python3"
#endif
#ifndef HOTLOOP_BENCH_PYTHON_SCRIPT
#define HOTLOOP_BENCH_PYTHON_SCRIPT "bench/python_dataloader.py"
#endif

using hotloop::bench::describe_machine;
using hotloop::bench::json_number;
using hotloop::bench::json_string;
using hotloop::bench::quoted;
using hotloop::bench::shell_quote;
using hotloop::bench::load_average;
using hotloop::bench::Machine;

namespace {

constexpr int64_t kBatchSize = 256;
constexpr int64_t kPadding = 2;
constexpr int64_t kSide = 28;
constexpr double kMean = 0.2860;
constexpr double kStd = 0.3530;
constexpr uint64_t kSeed = 0;

// The targets the project tracks for hotloop with 2 threads.
constexpr double kTargetSamplesPerSecond = 1.5e6;
constexpr double kTargetOverLibTorch = 10;
constexpr double kTargetOverPython = 90;
constexpr double kTargetPercentOfCopy = 40;

struct Options {
  std::string root = hotloop::data::kFashionMnistDefaultRoot;
  int64_t epochs = 1;
  bool skip_python = false;
  bool json = false;
  std::string python = HOTLOOP_BENCH_PYTHON;
  std::string python_script = HOTLOOP_BENCH_PYTHON_SCRIPT;
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
  std::string key; // stable id for JSON and the targets
  int64_t threads = 0;
  std::optional<Measurement> measured;
  std::string skipped; // why there is no measurement
};

// Keeps the compiler from dropping work whose result is never read.
volatile double g_sink = 0;

void clobber(const void* p) {
  asm volatile("" : : "r"(p) : "memory");
}

// Reads one element of each output, as a training step would read them all.
void touch(const float* input, const int64_t* target) {
  g_sink = g_sink + input[0] + static_cast<double>(target[0]);
}

void check_batch(const at::Tensor& input, const at::Tensor& target) {
  const int64_t b = target.numel();
  if (input.dim() != 4 || input.size(0) != b || input.size(1) != 1 ||
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

Measurement bench_hotloop(
    const std::shared_ptr<hotloop::data::ImageClassificationDataset>& dataset,
    int64_t workers,
    int64_t epochs) {
  hotloop::data::DataLoader loader(
      dataset,
      hotloop::data::DataLoaderOptions(kBatchSize)
          .shuffle(true)
          .num_workers(workers)
          .seed(kSeed));
  return time_epochs(epochs, dataset->size(), [&] {
    int64_t samples = 0;
    for (auto& batch : loader) {
      check_batch(batch.input, batch.target);
      touch(batch.input.data_ptr<float>(), batch.target.data_ptr<int64_t>());
      samples += batch.target.size(0);
    }
    return samples;
  });
}

/// The augmented training images as a LibTorch user writes them: one
/// `Example<>` per sample from tensor ops, batched by `Stack<>`. The crop and
/// flip come from hotloop's per-sample generator keyed on (seed, epoch,
/// index), so both libraries pay the same for randomness.
class AugmentedImages : public torch::data::datasets::Dataset<AugmentedImages> {
 public:
  /// images: [N, 1, 28, 28] uint8; labels: [N] int64; `epoch` is shared by
  /// the copies LibTorch makes for its workers.
  AugmentedImages(
      torch::Tensor images,
      torch::Tensor labels,
      std::shared_ptr<const int64_t> epoch)
      : images_(std::move(images)),
        labels_(std::move(labels)),
        epoch_(std::move(epoch)) {}

  /// data: [1, 28, 28] float32; target: [] int64.
  torch::data::Example<> get(size_t index) override {
    const auto i = static_cast<int64_t>(index);
    hotloop::data::SampleRng rng(
        hotloop::data::SampleRng::mix(kSeed, *epoch_, index));
    const auto top = static_cast<int64_t>(rng.below(2 * kPadding + 1));
    const auto left = static_cast<int64_t>(rng.below(2 * kPadding + 1));
    const bool flip = rng.next() >> 63;
    torch::Tensor image = torch::constant_pad_nd(
        images_[i], {kPadding, kPadding, kPadding, kPadding}, 0);
    image = image.slice(1, top, top + kSide).slice(2, left, left + kSide);
    if (flip) {
      image = image.flip({2});
    }
    image = image.to(torch::kFloat).div(255).sub(kMean).div(kStd);
    return {image, labels_[i]};
  }

  torch::optional<size_t> size() const override {
    return static_cast<size_t>(images_.size(0));
  }

 private:
  torch::Tensor images_;
  torch::Tensor labels_;
  std::shared_ptr<const int64_t> epoch_;
};

Measurement bench_libtorch(
    const hotloop::data::ImageClassificationDataset& source,
    int64_t workers,
    int64_t epochs) {
  auto epoch = std::make_shared<int64_t>(0);
  auto loader =
      torch::data::make_data_loader<torch::data::samplers::RandomSampler>(
          AugmentedImages(source.images(), source.labels(), epoch)
              .map(torch::data::transforms::Stack<>()),
          torch::data::DataLoaderOptions()
              .batch_size(kBatchSize)
              .workers(static_cast<size_t>(workers)));
  return time_epochs(epochs, source.size(), [&] {
    // Before begin(), which sends the first requests; the workers are idle
    // here, the previous epoch having been read to the end.
    ++*epoch;
    int64_t samples = 0;
    for (auto& batch : *loader) {
      check_batch(batch.data, batch.target);
      touch(batch.data.data_ptr<float>(), batch.target.data_ptr<int64_t>());
      samples += batch.target.size(0);
    }
    return samples;
  });
}

/// A loader that does nothing but write its output: the epoch's output
/// floats, computed beforehand (samples x 784 float32, ~188 MB for
/// Fashion-MNIST, far larger than the cache), and the labels, memcpy'd batch
/// by batch into one batch buffer in the calling thread. This is the "plain
/// copy of the output floats": the memory traffic any loader that writes
/// its output must pay, with no work to make it.
Measurement bench_copy(int64_t samples, int64_t epochs) {
  const int64_t sample_floats = kSide * kSide;
  std::vector<float> input_src(samples * sample_floats, 0.5f);
  std::vector<int64_t> target_src(samples, 3);
  std::vector<float> input_dst(kBatchSize * sample_floats);
  std::vector<int64_t> target_dst(kBatchSize);
  return time_epochs(epochs, samples, [&] {
    int64_t done = 0;
    while (done < samples) {
      const int64_t rows = std::min(kBatchSize, samples - done);
      std::memcpy(
          input_dst.data(),
          input_src.data() + done * sample_floats,
          rows * sample_floats * sizeof(float));
      std::memcpy(
          target_dst.data(), target_src.data() + done, rows * sizeof(int64_t));
      clobber(input_dst.data());
      clobber(target_dst.data());
      touch(input_dst.data(), target_dst.data());
      done += rows;
    }
    return done;
  });
}

// --- Python subprocess -----------------------------------------------------

struct PythonResult {
  std::vector<Row> rows; // one per worker count, or one skipped row
  std::string versions;  // "Python 3.11.2, torch ..." when it ran
};

Row python_row(int64_t workers) {
  Row row;
  row.name = "PyTorch DataLoader + torchvision";
  row.key = "python_" + std::to_string(workers);
  row.threads = workers;
  return row;
}

PythonResult run_python(const Options& options) {
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
  if (access(options.python_script.c_str(), R_OK) != 0) {
    return skip_all(options.python_script + " not found (--python-script)");
  }
  const std::string command =
      shell_quote(options.python) + " " + shell_quote(options.python_script) +
      " --json --workers 0,2 --root " + shell_quote(options.root) +
      " --epochs " + std::to_string(options.epochs);
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    return skip_all("cannot start " + options.python);
  }
  std::string output;
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    output.append(buffer, n);
  }
  const int status = pclose(pipe);
  if (auto error = json_string(output, "error")) {
    return skip_all(*error);
  }
  if (status != 0) {
    return skip_all(
        options.python + " exited with status " +
        std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : status));
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

struct Target {
  std::string name;
  std::optional<double> measured; // nullopt when a row is missing
  double goal = 0;
  std::string unit;
  std::string against; // which row the ratio is taken against
  bool pass() const {
    return measured && *measured >= goal;
  }
};

std::vector<Target> evaluate_targets(const std::vector<Row>& rows) {
  const Row* hotloop = find_row(rows, "hotloop_2");
  const Row* libtorch = best_row(rows, "libtorch_");
  const Row* python = best_row(rows, "python_");
  const Row* copy = find_row(rows, "copy");
  auto sps = [](const Row* row) { return row->measured->samples_per_second(); };
  auto ratio = [&](const Row* over) -> std::optional<double> {
    if (hotloop == nullptr || over == nullptr) {
      return std::nullopt;
    }
    return sps(hotloop) / sps(over);
  };
  auto against = [](const Row* row) {
    return row == nullptr ? std::string("row missing")
                          : "vs its best row, " + std::to_string(row->threads) +
                                " workers";
  };
  std::vector<Target> targets;
  targets.push_back(
      {"hotloop (2 threads) samples/s",
       hotloop ? std::optional<double>(sps(hotloop)) : std::nullopt,
       kTargetSamplesPerSecond,
       "samples/s",
       ""});
  targets.push_back(
      {"x LibTorch's torch::data loader",
       ratio(libtorch),
       kTargetOverLibTorch,
       "x",
       against(libtorch)});
  targets.push_back(
      {"x PyTorch's DataLoader",
       ratio(python),
       kTargetOverPython,
       "x",
       against(python)});
  std::optional<double> percent;
  if (auto r = ratio(copy)) {
    percent = *r * 100;
  }
  targets.push_back(
      {"% of the copy bound", percent, kTargetPercentOfCopy, "%", ""});
  return targets;
}

std::string format(const char* spec, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), spec, value);
  return text;
}

void print_table(
    const Options& options,
    const Machine& machine,
    const std::string& python_versions,
    const std::vector<Row>& rows,
    const std::vector<Target>& targets) {
  std::printf("hotloop dataloader benchmark\n");
  std::vector<std::pair<std::string, std::string>> extra;
  if (!python_versions.empty()) {
    extra.emplace_back("python", python_versions);
  }
  hotloop::bench::print_machine(machine, extra);
  std::printf(
      "work:    Fashion-MNIST train (%s), batch %ld, shuffled, RandomCrop(28, "
      "padding=2) + RandomHorizontalFlip + Normalize(0.2860, 0.3530) -> "
      "[B,1,28,28] float32 + [B] int64\n",
      options.root.c_str(),
      static_cast<long>(kBatchSize));
  std::printf(
      "timing:  1 warm-up epoch per row, then %ld timed epoch(s); median "
      "epoch\n\n",
      static_cast<long>(options.epochs));

  const Row* hotloop = find_row(rows, "hotloop_2");
  const Row* copy = find_row(rows, "copy");
  std::printf(
      "%-34s %7s %12s %9s %13s %9s\n",
      "loader",
      "threads",
      "samples/s",
      "epoch s",
      "hotloop(2)/x",
      "% of copy");
  for (const Row& row : rows) {
    if (!row.measured) {
      std::printf(
          "%-34s %7ld  skipped (%s)\n",
          row.name.c_str(),
          static_cast<long>(row.threads),
          row.skipped.c_str());
      continue;
    }
    const double sps = row.measured->samples_per_second();
    const std::string over =
        hotloop ? format("%.2fx", hotloop->measured->samples_per_second() / sps)
                : "-";
    const std::string percent =
        copy
            ? format("%.1f%%", 100 * sps / copy->measured->samples_per_second())
            : "-";
    std::printf(
        "%-34s %7ld %12.0f %9.4f %13s %9s\n",
        row.name.c_str(),
        static_cast<long>(row.threads),
        sps,
        row.measured->epoch_seconds,
        over.c_str(),
        percent.c_str());
  }
  std::printf("\ntargets (information only, not a gate):\n");
  for (const Target& t : targets) {
    const std::string goal = t.unit == "samples/s"
                                 ? format(">= %.0f samples/s", t.goal)
                             : t.unit == "x" ? format(">= %.0fx", t.goal)
                                             : format(">= %.0f%%", t.goal);
    std::string measured = "n/a";
    if (t.measured) {
      measured = t.unit == "samples/s" ? format("%.0f samples/s", *t.measured)
                 : t.unit == "x"       ? format("%.2fx", *t.measured)
                                       : format("%.1f%%", *t.measured);
    }
    std::printf(
        "  %-4s %-34s %-20s measured %s%s%s\n",
        !t.measured ? "n/a"
        : t.pass()  ? "PASS"
                    : "MISS",
        t.name.c_str(),
        goal.c_str(),
        measured.c_str(),
        t.against.empty() ? "" : " ",
        t.against.empty() ? "" : ("(" + t.against + ")").c_str());
  }
}

void print_json(
    const Options& options,
    const Machine& machine,
    const std::string& python_versions,
    const std::vector<Row>& rows,
    const std::vector<Target>& targets) {
  const Row* hotloop = find_row(rows, "hotloop_2");
  const Row* copy = find_row(rows, "copy");
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
  out << "  \"config\": {\"root\": " << quoted(options.root)
      << ", \"batch_size\": " << kBatchSize
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
      if (copy) {
        out << ", \"percent_of_copy\": "
            << 100 * sps / copy->measured->samples_per_second();
      }
    } else {
      out << ", \"samples_per_s\": null, \"skipped\": " << quoted(row.skipped);
    }
    out << "}";
  }
  out << "\n  ],\n  \"targets\": [";
  for (size_t i = 0; i < targets.size(); ++i) {
    const Target& t = targets[i];
    out << (i ? ",\n" : "\n") << "    {\"name\": " << quoted(t.name)
        << ", \"goal\": " << t.goal << ", \"unit\": " << quoted(t.unit)
        << ", \"measured\": ";
    if (t.measured) {
      out << *t.measured;
    } else {
      out << "null";
    }
    out << ", \"against\": " << quoted(t.against) << ", \"result\": "
        << quoted(
               !t.measured ? "n/a"
               : t.pass()  ? "PASS"
                           : "MISS")
        << "}";
  }
  out << "\n  ]\n}\n";
  std::cout << out.str();
}

// --- Command line ----------------------------------------------------------

void print_usage() {
  std::printf(
      "usage: dataloader_bench [--root DIR] [--epochs N] [--skip-python] "
      "[--json]\n"
      "                        [--python PATH] [--python-script PATH]\n"
      "  --root DIR            Fashion-MNIST IDX files (default %s)\n"
      "  --epochs N            timed epochs per row after 1 warm-up epoch "
      "(default 1)\n"
      "  --skip-python         leave out the PyTorch DataLoader rows\n"
      "  --json                print the results as JSON\n"
      "  --python PATH         interpreter with torch + torchvision (default "
      "%s)\n"
      "  --python-script PATH  the Python row's script (default %s)\n",
      hotloop::data::kFashionMnistDefaultRoot,
      HOTLOOP_BENCH_PYTHON,
      HOTLOOP_BENCH_PYTHON_SCRIPT);
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
    } else if (arg == "--epochs") {
      const std::string text = value();
      char* end = nullptr;
      options.epochs = std::strtoll(text.c_str(), &end, 10);
      if (*end != '\0' || options.epochs < 1) {
        throw std::invalid_argument(
            "--epochs must be a positive integer, got '" + text + "'");
      }
    } else if (arg == "--skip-python") {
      options.skip_python = true;
    } else if (arg == "--json") {
      options.json = true;
    } else if (arg == "--python") {
      options.python = value();
    } else if (arg == "--python-script") {
      options.python_script = value();
    } else if (arg == "--help" || arg == "-h") {
      print_usage();
      return std::nullopt;
    } else {
      throw std::invalid_argument(
          "unknown argument '" + arg + "' (see --help)");
    }
  }
  return options;
}

void log_progress(const std::string& what) {
  // Progress goes to stderr so --json output stays one document.
  std::fprintf(stderr, "running %s...\n", what.c_str());
}

int run(const Options& options) {
  struct stat info {};
  if (stat(options.root.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    std::fprintf(
        stderr,
        "error: data folder %s not found; pass --root DIR with the "
        "Fashion-MNIST IDX files (Debian: apt install dataset-fashion-mnist)\n",
        options.root.c_str());
    return 1;
  }
  Machine machine = describe_machine();

  hotloop::data::ImageTransformOptions transform;
  transform.crop_padding = kPadding;
  transform.horizontal_flip = true;
  transform.mean = {kMean};
  transform.std = {kStd};
  const auto dataset =
      hotloop::data::load_mnist_split(options.root, /*train=*/true, transform);

  std::vector<Row> rows;
  auto measure = [&](Row row, const std::function<Measurement()>& bench) {
    log_progress(row.name + ", " + std::to_string(row.threads));
    row.measured = bench();
    rows.push_back(row);
  };
  for (int64_t workers : {0, 2}) {
    measure(
        {"hotloop DataLoader", "hotloop_" + std::to_string(workers), workers},
        [&] { return bench_hotloop(dataset, workers, options.epochs); });
  }
  for (int64_t workers : {0, 2}) {
    measure(
        {"LibTorch torch::data DataLoader",
         "libtorch_" + std::to_string(workers),
         workers},
        [&] { return bench_libtorch(*dataset, workers, options.epochs); });
  }
  log_progress("PyTorch DataLoader (subprocess)");
  PythonResult python = run_python(options);
  rows.insert(rows.end(), python.rows.begin(), python.rows.end());
  measure({"plain copy bound (memcpy)", "copy", 1}, [&] {
    return bench_copy(dataset->size(), options.epochs);
  });
  machine.load_after = load_average();

  const std::vector<Target> targets = evaluate_targets(rows);
  if (options.json) {
    print_json(options, machine, python.versions, rows, targets);
  } else {
    print_table(options, machine, python.versions, rows, targets);
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
    std::fprintf(
        stderr,
        "error: %s\nhint: pass --root DIR with the Fashion-MNIST IDX files\n",
        e.what());
    return 1;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
