#pragma once

// Helpers shared by the test files: temporary folders and IDX fixtures.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

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

/// Writes a small MNIST-format dataset (train: n_train, t10k: n_test
/// quadrant images of size x size) into `root`, gzip-compressed.
void write_fake_mnist(
    const std::string& root,
    int64_t n_train,
    int64_t n_test,
    int64_t size = 28);

} // namespace hotloop::testing
