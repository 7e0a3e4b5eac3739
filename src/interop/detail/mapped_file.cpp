#include "hotloop/interop/detail/mapped_file.h"

#include "hotloop/core/error.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace hotloop::interop::detail {

MappedFile::MappedFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  HOTLOOP_CHECK(fd >= 0, path, ": cannot open: ", std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    const int error = errno;
    ::close(fd);
    throw Error(hotloop::detail::str_cat(
        path,
        ": not a regular file",
        error != 0 ? std::string(" (") + std::strerror(error) + ")" : ""));
  }
  size_ = static_cast<uint64_t>(info.st_size);
  if (size_ > 0) {
    // Writable but private: tensors viewing the pages may be written to
    // (copy-on-write); the file never changes.
    void* mapped = ::mmap(
        nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, /*offset=*/0);
    const int error = errno;
    ::close(fd);
    HOTLOOP_CHECK(
        mapped != MAP_FAILED,
        path,
        ": cannot map into memory: ",
        std::strerror(error));
    data_ = static_cast<uint8_t*>(mapped);
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) {
    ::munmap(data_, size_);
  }
}

} // namespace hotloop::interop::detail
