#include "hotloop/data/idx.h"

#include "hotloop/core/error.h"
#include "hotloop/data/dataset.h"

#include <ATen/ATen.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <memory>
#include <vector>

namespace hotloop::data {
namespace {

constexpr int kMaxDims = 8;

// Reads a file through zlib, which passes non-gzip files through unchanged.
// gzip is told apart by its magic bytes so that a corrupt .gz is reported as
// corrupt instead of being read as raw bytes.
class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path) {
    file_ = gzopen(path.c_str(), "rb");
    HOTLOOP_CHECK_AS(
        DataError,
        file_ != nullptr,
        path,
        ": cannot open: ",
        std::strerror(errno));
    gzbuffer(file_, 1 << 17);
    gzip_ = gzdirect(file_) == 0;
    std::error_code error;
    file_bytes_ = std::filesystem::file_size(path, error);
    if (error) {
      file_bytes_ = UINT64_MAX;
    }
  }
  ~Reader() {
    gzclose(file_);
  }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  // Reads up to `size` bytes; returns how many were read.
  size_t read(void* dst, size_t size) {
    auto* out = static_cast<char*>(dst);
    size_t done = 0;
    while (done < size) {
      const auto chunk =
          static_cast<unsigned>(std::min<size_t>(size - done, 1u << 30));
      const int got = gzread(file_, out + done, chunk);
      if (got < 0) {
        int code = 0;
        const char* message = gzerror(file_, &code);
        throw DataError(hotloop::detail::str_cat(
            path_, ": corrupt gzip data (", message, ")"));
      }
      if (got == 0) {
        break;
      }
      done += static_cast<size_t>(got);
    }
    return done;
  }

  void read_exact(void* dst, size_t size, const char* what) {
    require_whole(size, read(dst, size), what);
  }

  bool at_end() {
    char extra = 0;
    return read(&extra, 1) == 0;
  }

  // Checks, before anything is allocated for them, that `size` more bytes
  // can be in the file after the `consumed` bytes read so far: a raw file
  // holds what it holds; deflate expands at most 1032-fold, so a gzip file
  // of n bytes holds at most 1032 n.
  void require_room(uint64_t size, uint64_t consumed, const char* what) {
    if (file_bytes_ == UINT64_MAX) {
      return;
    }
    if (!gzip_) {
      const uint64_t left = file_bytes_ > consumed ? file_bytes_ - consumed : 0;
      require_whole(size, std::min(size, left), what);
      return;
    }
    constexpr uint64_t kMaxDeflateRatio = 1032;
    HOTLOOP_CHECK_AS(
        DataError,
        file_bytes_ > UINT64_MAX / kMaxDeflateRatio ||
            size <= file_bytes_ * kMaxDeflateRatio,
        path_,
        ": IDX header declares ",
        size,
        " bytes of ",
        what,
        ", more than a gzip file of ",
        file_bytes_,
        " bytes can hold");
  }

 private:
  void require_whole(uint64_t expected, uint64_t got, const char* what) const {
    HOTLOOP_CHECK_AS(
        DataError,
        got == expected,
        path_,
        ": truncated ",
        what,
        ": expected ",
        expected,
        " bytes, got ",
        got,
        gzip_ ? " (after decompression)" : "");
  }

  std::string path_;
  gzFile file_ = nullptr;
  bool gzip_ = false;
  uint64_t file_bytes_ = UINT64_MAX;
};

at::ScalarType idx_type(uint8_t code, const std::string& path) {
  switch (code) {
    case 0x08:
      return at::kByte;
    case 0x09:
      return at::kChar;
    case 0x0B:
      return at::kShort;
    case 0x0C:
      return at::kInt;
    case 0x0D:
      return at::kFloat;
    case 0x0E:
      return at::kDouble;
    default:
      throw DataError(hotloop::detail::str_cat(
          path,
          ": unknown IDX element type 0x",
          std::hex,
          int(code),
          " (expected 0x08, 0x09, 0x0B, 0x0C, 0x0D or 0x0E)"));
  }
}

void byteswap_in_place(at::Tensor& tensor) {
  const size_t width = tensor.element_size();
  if (width == 1) {
    return;
  }
  auto* bytes = static_cast<uint8_t*>(tensor.data_ptr());
  const size_t count = static_cast<size_t>(tensor.numel());
  for (size_t i = 0; i < count; ++i) {
    std::reverse(bytes + i * width, bytes + (i + 1) * width);
  }
}

} // namespace

at::Tensor read_idx(const std::string& path) {
  hotloop::detail::require_file(path);
  Reader reader(path);

  std::array<uint8_t, 4> magic{};
  reader.read_exact(magic.data(), magic.size(), "header");
  HOTLOOP_CHECK_AS(
      DataError,
      magic[0] == 0 && magic[1] == 0,
      path,
      ": not an IDX file (bad magic: the first two bytes must be zero)");
  const at::ScalarType dtype = idx_type(magic[2], path);
  const int ndim = magic[3];
  HOTLOOP_CHECK_AS(
      DataError,
      ndim >= 1 && ndim <= kMaxDims,
      path,
      ": IDX header declares ",
      ndim,
      " dimensions (expected 1 to ",
      kMaxDims,
      ")");

  std::vector<int64_t> sizes(ndim);
  for (int d = 0; d < ndim; ++d) {
    std::array<uint8_t, 4> be{};
    reader.read_exact(be.data(), be.size(), "header");
    const uint32_t size = (uint32_t(be[0]) << 24) | (uint32_t(be[1]) << 16) |
                          (uint32_t(be[2]) << 8) | uint32_t(be[3]);
    HOTLOOP_CHECK_AS(
        DataError,
        size > 0 && size <= (1u << 31),
        path,
        ": dimension ",
        d,
        " has size ",
        size,
        " (expected 1 to 2^31)");
    sizes[d] = size;
  }

  // The sizes multiplied (8 dimensions of up to 2^31 overflow 64 bits) and
  // held against what the file can hold, before the tensor is allocated.
  uint64_t bytes = c10::elementSize(dtype);
  for (const int64_t size : sizes) {
    HOTLOOP_CHECK_AS(
        DataError,
        !__builtin_mul_overflow(bytes, static_cast<uint64_t>(size), &bytes),
        path,
        ": IDX header declares more than 2^64 bytes of data");
  }
  reader.require_room(bytes, 4 + 4 * static_cast<uint64_t>(ndim), "data");
  at::Tensor tensor = at::empty(sizes, at::TensorOptions().dtype(dtype));
  reader.read_exact(tensor.data_ptr(), tensor.nbytes(), "data");
  HOTLOOP_CHECK_AS(
      DataError,
      reader.at_end(),
      path,
      ": has more data than its header declares (",
      tensor.nbytes(),
      " bytes)");
  byteswap_in_place(tensor);
  return tensor;
}

} // namespace hotloop::data
