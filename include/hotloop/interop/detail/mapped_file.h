#pragma once

#include <cstdint>
#include <string>

namespace hotloop::interop::detail {

/// A whole file mapped into memory, private and copy-on-write: what is
/// written to the pages stays in this process. Unmapped on destruction.
class MappedFile {
 public:
  /// Throws Error naming `path` when it is missing or cannot be mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  /// The first byte (nullptr for an empty file).
  uint8_t* data() const {
    return data_;
  }
  uint64_t size() const {
    return size_;
  }

 private:
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

} // namespace hotloop::interop::detail
