#pragma once

// Helpers shared by the test files: temporary folders and IDX fixtures.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#ifndef HOTLOOP_TEST_REFERENCE_DIR
#define HOTLOOP_TEST_REFERENCE_DIR "tests/reference"
#endif

/// Expects `statement` to throw `hotloop::ErrorType` whose message contains
/// `text` (LibTorch's ASSERT_THROWS_WITH, for hotloop's error types).
#define EXPECT_THROWS_WITH(ErrorType, statement, text) \
  EXPECT_THAT(                                         \
      [&] { (void)(statement); },                      \
      ::testing::ThrowsMessage<::hotloop::ErrorType>(  \
          ::testing::HasSubstr(text)))

namespace hotloop::testing {

/// A fresh folder under the system temp dir, removed with its content when
/// the object goes out of scope.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const {
    return path_;
  }
  /// path() + "/" + name
  std::string file(const std::string& name) const;

 private:
  std::string path_;
};

/// Makes `path` the process's working directory for the object's lifetime,
/// then goes back to the one before.
class ScopedWorkingDirectory {
 public:
  explicit ScopedWorkingDirectory(const std::string& path);
  ~ScopedWorkingDirectory();
  ScopedWorkingDirectory(const ScopedWorkingDirectory&) = delete;
  ScopedWorkingDirectory& operator=(const ScopedWorkingDirectory&) = delete;

 private:
  std::string previous_;
};

/// Writes `bytes` to `path`, gzip-compressed when `gzip` is true.
void write_bytes(
    const std::string& path,
    const std::vector<uint8_t>& bytes,
    bool gzip = false);

/// The bytes of an IDX file holding `tensor` (uint8, int32 or float32).
std::vector<uint8_t> idx_bytes(const at::Tensor& tensor);

/// n images [n, size, size] uint8 and labels [n] int64 in 4 classes: class
/// k is bright in quadrant k, plus deterministic noise, so a small CNN
/// learns it in a few steps.
std::pair<at::Tensor, at::Tensor> quadrant_images(
    int64_t n, int64_t size, uint64_t seed);

/// Writes image [H, W, C] uint8 (C = 1, 3 or 4) as a lossless PNG at
/// `path`, making its folder.
void write_png(const std::string& path, const at::Tensor& image);

/// Writes an image folder of n quadrant images (see quadrant_images) as
/// PNGs: root/<class name>/<i>.png with class k named names[k], 3 colour
/// channels.
void write_image_folder(
    const std::string& root,
    int64_t n,
    int64_t size,
    uint64_t seed,
    const std::vector<std::string>& names = {"north", "east", "south", "west"});

/// Writes a small MNIST-format dataset (train: n_train, t10k: n_test
/// quadrant images of size x size) into `root`, gzip-compressed.
void write_fake_mnist(
    const std::string& root,
    int64_t n_train,
    int64_t n_test,
    int64_t size = 28);

/// One record of a reference file written by a tests/reference/make_*.py
/// script: "<case> <field> <name> <shape> <values...>".
struct ReferenceEntry {
  std::string name;
  std::string shape; // "[d0,d1,...]"
  std::vector<double> values;
};

/// A reference file of tests/reference, read once and kept.
class Reference {
 public:
  static const Reference& get(const std::string& file);

  /// The entries of `case_name` with `field`, in file order; throws
  /// std::out_of_range when there are none.
  std::vector<ReferenceEntry> all(
      const std::string& case_name, const std::string& field) const;

  const ReferenceEntry& one(
      const std::string& case_name,
      const std::string& field,
      const std::string& name) const;

 private:
  explicit Reference(const std::string& path);
  std::vector<std::pair<std::string, ReferenceEntry>> rows_;
};

/// Why a test of hotloop's own CUDA kernels (src/models/*.cu) cannot run
/// here, empty when it can: it needs a GPU and a build that compiled them
/// (CMake found CUDA's compiler).
std::string cuda_kernels_missing();

/// What `loss.backward(create_graph=true)` throws (c10::Error's message
/// without its backtrace), "no error" if nothing; the graph is kept, so the
/// same loss can run backward again after.
std::string double_backward_error(const at::Tensor& loss);

/// Counts the calls of one ATen operator ("aten::mm") on this thread
/// while it lives (a thread-local RecordFunction callback; a CPU backward
/// runs on the thread that calls it).
class OpCount {
 public:
  explicit OpCount(std::string op);
  ~OpCount();
  OpCount(const OpCount&) = delete;
  OpCount& operator=(const OpCount&) = delete;
  int calls() const;

 private:
  uint64_t handle_;
};

/// The largest |a - b| over the elements, in double.
double max_difference(const at::Tensor& a, const at::Tensor& b);

/// The largest |actual - expected| / |expected| over the elements, in
/// double.
double max_relative_difference(
    const at::Tensor& actual, const at::Tensor& expected);

/// What a quantization observer saw comes out of float convs and matmuls
/// whose rounding depends on the CPU's kernels: the same Debian LibTorch
/// 1.13 that made the torch.ao references (on the AMD EPYC machines) gives
/// other bits on an AVX-512 Xeon, as 2.11's wheel does, and the minima,
/// maxima and scales derived from them move by an ulp or two. So a
/// relative 1e-6 (8 float ulps) for those, with zero points exact.
constexpr double kObservedTolerance = 1e-6;

/// Runs `write` in a child process that may write 1 MB per file
/// (RLIMIT_FSIZE: a write past it fails as on a full disk) and returns the
/// message of the hotloop::Error it throws; "(no Error)", "(another
/// exception)" or "(the child ended abnormally)" otherwise.
std::string error_when_files_stop_at_1mb(const std::function<void()>& write);

/// The counts of a confusion.csv (log::write_confusion_csv) as an int64
/// [C, C] tensor: rows true classes, columns predictions.
at::Tensor read_confusion_counts(const std::string& path);

/// "[d0,d1,...]"
std::string shape_string(at::IntArrayRef sizes);
std::vector<int64_t> parse_shape(const std::string& shape);

/// The entry's values as a tensor of its shape, divided by `scale`.
at::Tensor to_tensor(
    const ReferenceEntry& entry, at::ScalarType dtype, double scale = 1.0);

} // namespace hotloop::testing
