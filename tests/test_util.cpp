#include "test_util.h"

#include "hotloop/core/error.h"
#include "hotloop/log/confusion.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <png.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>

namespace hotloop::testing {

namespace fs = std::filesystem;

TempDir::TempDir() {
  std::string pattern =
      (fs::temp_directory_path() / "hotloop-test-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("mkdtemp failed");
  }
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string TempDir::file(const std::string& name) const {
  return path_ + "/" + name;
}

ScopedWorkingDirectory::ScopedWorkingDirectory(const std::string& path)
    : previous_(fs::current_path().string()) {
  fs::current_path(path);
}

ScopedWorkingDirectory::~ScopedWorkingDirectory() {
  std::error_code ec;
  fs::current_path(previous_, ec);
}

void write_bytes(
    const std::string& path, const std::vector<uint8_t>& bytes, bool gzip) {
  if (gzip) {
    gzFile file = gzopen(path.c_str(), "wb");
    if (file == nullptr || gzwrite(file, bytes.data(), bytes.size()) !=
                               static_cast<int>(bytes.size())) {
      throw std::runtime_error("gzwrite failed: " + path);
    }
    gzclose(file);
    return;
  }
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

std::vector<uint8_t> idx_bytes(const at::Tensor& input) {
  const at::Tensor tensor = input.contiguous();
  uint8_t code = 0;
  switch (tensor.scalar_type()) {
    case at::kByte:
      code = 0x08;
      break;
    case at::kInt:
      code = 0x0C;
      break;
    case at::kFloat:
      code = 0x0D;
      break;
    default:
      throw std::runtime_error("idx_bytes: unsupported dtype");
  }
  std::vector<uint8_t> out = {0, 0, code, static_cast<uint8_t>(tensor.dim())};
  for (int64_t size : tensor.sizes()) {
    for (int shift = 24; shift >= 0; shift -= 8) {
      out.push_back(static_cast<uint8_t>((size >> shift) & 0xFF));
    }
  }
  const auto* data = static_cast<const uint8_t*>(tensor.data_ptr());
  const size_t width = tensor.element_size();
  for (int64_t i = 0; i < tensor.numel(); ++i) {
    for (size_t b = 0; b < width; ++b) {
      out.push_back(data[i * width + (width - 1 - b)]); // big-endian
    }
  }
  return out;
}

std::pair<at::Tensor, at::Tensor> quadrant_images(
    int64_t n, int64_t size, uint64_t seed) {
  at::Tensor labels = at::arange(n, at::kLong).remainder(4);
  at::Tensor images = at::zeros({n, size, size}, at::kFloat);
  const int64_t half = size / 2;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = labels[i].item<int64_t>();
    images[i]
        .narrow(0, (k / 2) * half, half)
        .narrow(1, (k % 2) * half, half)
        .fill_(200);
  }
  const at::Tensor noise =
      at::arange(n * size * size, at::kFloat).view({n, size, size});
  images = (images + (noise * static_cast<double>(seed + 7)).remainder(50))
               .clamp(0, 255);
  return {images.to(at::kByte), labels};
}

void write_png(const std::string& path, const at::Tensor& image) {
  std::filesystem::create_directories(fs::path(path).parent_path());
  png_image png;
  std::memset(&png, 0, sizeof(png));
  png.version = PNG_IMAGE_VERSION;
  png.height = static_cast<png_uint_32>(image.size(0));
  png.width = static_cast<png_uint_32>(image.size(1));
  const int64_t channels = image.size(2);
  png.format = channels == 1   ? PNG_FORMAT_GRAY
               : channels == 3 ? PNG_FORMAT_RGB
                               : PNG_FORMAT_RGBA;
  const at::Tensor pixels = image.contiguous();
  if (png_image_write_to_file(
          &png, path.c_str(), 0, pixels.data_ptr<uint8_t>(), 0, nullptr) == 0) {
    throw std::runtime_error(std::string("png write failed: ") + png.message);
  }
}

void write_image_folder(
    const std::string& root,
    int64_t n,
    int64_t size,
    uint64_t seed,
    const std::vector<std::string>& names) {
  const auto [images, labels] = quadrant_images(n, size, seed);
  for (int64_t i = 0; i < n; ++i) {
    const at::Tensor gray = images[i].reshape({size, size, 1});
    write_png(
        root + "/" + names.at(labels[i].item<int64_t>()) + "/" +
            std::to_string(i) + ".png",
        gray.expand({size, size, 3}).contiguous());
  }
}

void write_fake_mnist(
    const std::string& root, int64_t n_train, int64_t n_test, int64_t size) {
  fs::create_directories(root);
  auto make = [&](const std::string& prefix, int64_t n, uint64_t seed) {
    const auto [images, labels] = quadrant_images(n, size, seed);
    write_bytes(
        root + "/" + prefix + "-images-idx3-ubyte.gz", idx_bytes(images), true);
    write_bytes(
        root + "/" + prefix + "-labels-idx1-ubyte.gz",
        idx_bytes(labels.to(at::kByte)),
        true);
  };
  make("train", n_train, 1);
  make("t10k", n_test, 2);
}

const Reference& Reference::get(const std::string& file) {
  static std::map<std::string, Reference> cache;
  auto it = cache.find(file);
  if (it == cache.end()) {
    it =
        cache
            .emplace(
                file,
                Reference(std::string(HOTLOOP_TEST_REFERENCE_DIR) + "/" + file))
            .first;
  }
  return it->second;
}

std::vector<ReferenceEntry> Reference::all(
    const std::string& case_name, const std::string& field) const {
  std::vector<ReferenceEntry> out;
  for (const auto& row : rows_) {
    if (row.first == case_name + " " + field) {
      out.push_back(row.second);
    }
  }
  if (out.empty()) {
    throw std::out_of_range(
        "no reference rows '" + case_name + " " + field +
        "' (regenerate with its tests/reference/make_*.py script)");
  }
  return out;
}

const ReferenceEntry& Reference::one(
    const std::string& case_name,
    const std::string& field,
    const std::string& name) const {
  for (const auto& row : rows_) {
    if (row.first == case_name + " " + field && row.second.name == name) {
      return row.second;
    }
  }
  throw std::out_of_range(
      "no reference row '" + case_name + " " + field + " " + name + "'");
}

Reference::Reference(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw std::runtime_error("cannot open reference file " + path);
  }
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') {
      continue;
    }
    std::istringstream fields(line);
    std::string case_name, field;
    ReferenceEntry entry;
    fields >> case_name >> field >> entry.name >> entry.shape;
    // std::stod, unlike operator>>, reads "nan" and "inf".
    for (std::string value; fields >> value;) {
      entry.values.push_back(std::stod(value));
    }
    rows_.emplace_back(case_name + " " + field, std::move(entry));
  }
}

namespace {

// The operator an OpCount counts and its calls (one OpCount at a time).
std::string counted_op;
int counted_calls = 0;

std::unique_ptr<at::ObserverContext> count_call(const at::RecordFunction& fn) {
  if (counted_op == fn.name()) {
    ++counted_calls;
  }
  return nullptr;
}

} // namespace

OpCount::OpCount(std::string op)
    : handle_(at::addThreadLocalCallback(
          at::RecordFunctionCallback(count_call))) {
  counted_op = std::move(op);
  counted_calls = 0;
}

OpCount::~OpCount() {
  at::removeCallback(handle_);
}

int OpCount::calls() const {
  return counted_calls;
}

at::Tensor read_confusion_counts(const std::string& path) {
  const log::ConfusionTable table = log::read_confusion_csv(path);
  const auto classes = static_cast<int64_t>(table.counts.size());
  at::Tensor counts = at::empty({classes, classes}, at::kLong);
  for (int64_t t = 0; t < classes; ++t) {
    for (int64_t p = 0; p < classes; ++p) {
      counts[t][p] = table.counts[t][p];
    }
  }
  return counts;
}

double max_difference(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

double max_relative_difference(
    const at::Tensor& actual, const at::Tensor& expected) {
  const at::Tensor reference = expected.to(at::kDouble);
  return ((actual.to(at::kDouble) - reference).abs() /
          reference.abs().clamp_min(1e-30))
      .max()
      .item<double>();
}

std::string shape_string(at::IntArrayRef sizes) {
  std::string out = "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    out.append(i ? "," : "").append(std::to_string(sizes[i]));
  }
  return out + "]";
}

std::vector<int64_t> parse_shape(const std::string& shape) {
  std::vector<int64_t> sizes;
  std::istringstream in(shape.substr(1, shape.size() - 2));
  for (std::string item; std::getline(in, item, ',');) {
    sizes.push_back(std::stoll(item));
  }
  return sizes;
}

at::Tensor to_tensor(
    const ReferenceEntry& entry, at::ScalarType dtype, double scale) {
  at::Tensor values = at::tensor(entry.values, at::kDouble) / scale;
  return values.to(dtype).reshape(parse_shape(entry.shape));
}

std::string cuda_kernels_missing() {
  if (!at::hasCUDA() || at::getNumGPUs() == 0) {
    return "needs a CUDA build of LibTorch and a GPU";
  }
  // tests/CMakeLists.txt defines it for this file, as CMakeLists.txt does
  // for the fused ops' sources.
  if (!HOTLOOP_HAS_CUDA_KERNELS) {
    return "needs hotloop's CUDA kernels, which this build did not compile "
           "(CMake found no CUDA compiler: set CMAKE_CUDA_COMPILER)";
  }
  return "";
}

std::string double_backward_error(const at::Tensor& loss) {
  try {
    loss.backward({}, /*retain_graph=*/true, /*create_graph=*/true);
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "no error";
}

std::string error_when_files_stop_at_1mb(const std::function<void()>& write) {
  char folder[] = "/tmp/hotloop-test-XXXXXX";
  if (::mkdtemp(folder) == nullptr) {
    return "(no scratch folder)";
  }
  const std::string message = std::string(folder) + "/message.txt";
  const pid_t child = ::fork();
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{1 << 20, 1 << 20};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    std::string what = "(no Error)";
    try {
      write();
    } catch (const hotloop::Error& e) {
      what = e.what();
    } catch (...) {
      what = "(another exception)";
    }
    std::ofstream(message) << what;
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  std::string what = "(the child ended abnormally)";
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    std::ifstream in(message);
    what.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::filesystem::remove_all(folder);
  return what;
}

} // namespace hotloop::testing
