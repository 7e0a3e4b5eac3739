#include "hotloop/data/token_dataset.h"

#include "hotloop/core/error.h"

#include <ATen/ATen.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace hotloop::data {
namespace {

// Closes a file descriptor when it goes out of scope.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) {
      ::close(fd_);
    }
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const {
    return fd_;
  }

 private:
  int fd_;
};

// Decodes `count` little-endian tokens of `Bytes` bytes each.
template <int Bytes>
void decode(const uint8_t* bytes, int64_t count, int64_t* out) {
  for (int64_t i = 0; i < count; ++i) {
    uint32_t token = 0;
    for (int b = 0; b < Bytes; ++b) {
      token |= uint32_t(bytes[i * Bytes + b]) << (8 * b);
    }
    out[i] = token;
  }
}

} // namespace

TokenDataset::TokenDataset(const std::string& path, TokenDatasetOptions options)
    : path_(path),
      options_(std::move(options)),
      stride_(options_.stride().value_or(options_.context())) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.context() > 0,
      "data.context must be positive, got ",
      options_.context());
  HOTLOOP_CHECK_AS(
      ConfigError, stride_ > 0, "data.stride must be positive, got ", stride_);
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.token_bytes() == 1 || options_.token_bytes() == 2 ||
          options_.token_bytes() == 4,
      "data.token_bytes must be 1 (bytes of any file), 2 (uint16) or 4 "
      "(uint32), got ",
      options_.token_bytes());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.vocab_size() >= 0,
      "data.vocab_size must be >= 0 (0: unchecked), got ",
      options_.vocab_size());

  hotloop::detail::require_file(path);
  const FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  HOTLOOP_CHECK_AS(
      DataError, fd.get() >= 0, path, ": cannot open: ", std::strerror(errno));
  struct stat info {};
  HOTLOOP_CHECK_AS(
      DataError,
      ::fstat(fd.get(), &info) == 0,
      path,
      ": cannot stat: ",
      std::strerror(errno));
  const auto bytes = static_cast<int64_t>(info.st_size);
  HOTLOOP_CHECK_AS(
      DataError,
      bytes % options_.token_bytes() == 0,
      path,
      ": size ",
      bytes,
      " bytes is not a multiple of ",
      options_.token_bytes(),
      " (data.token_bytes)");
  num_tokens_ = bytes / options_.token_bytes();
  HOTLOOP_CHECK_AS(
      DataError,
      num_tokens_ >= options_.context() + 1,
      path,
      ": holds ",
      num_tokens_,
      " tokens; one window needs data.context + 1 = ",
      options_.context() + 1);

  void* mapped =
      ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd.get(), /*offset=*/0);
  HOTLOOP_CHECK_AS(
      DataError,
      mapped != MAP_FAILED,
      path,
      ": cannot map into memory: ",
      std::strerror(errno));
  data_ = static_cast<const uint8_t*>(mapped);
  mapped_bytes_ = static_cast<size_t>(bytes);
}

TokenDataset::~TokenDataset() {
  ::munmap(const_cast<uint8_t*>(data_), mapped_bytes_);
}

int64_t TokenDataset::size() const {
  return (num_tokens_ - options_.context() - 1) / stride_ + 1;
}

SampleSpec TokenDataset::spec() const {
  return SampleSpec{
      {options_.context()}, at::kLong, {options_.context()}, at::kLong};
}

void TokenDataset::read_window(
    int64_t index, int64_t* input, int64_t* target) const {
  check_index(index);
  const int64_t context = options_.context();
  const int64_t start = index * stride_;
  const uint8_t* bytes = data_ + start * options_.token_bytes();
  // tokens [start, start + context] -> input[0..context), target[context-1]
  if (options_.token_bytes() == 1) {
    decode<1>(bytes, context, input);
    decode<1>(bytes + context, 1, target + context - 1);
  } else if (options_.token_bytes() == 2) {
    decode<2>(bytes, context, input);
    decode<2>(bytes + 2 * context, 1, target + context - 1);
  } else {
    decode<4>(bytes, context, input);
    decode<4>(bytes + 4 * context, 1, target + context - 1);
  }
  std::copy(input + 1, input + context, target);

  const int64_t vocab = options_.vocab_size();
  if (vocab == 0) {
    return;
  }
  for (int64_t t = 0; t <= context; ++t) {
    const int64_t token = t < context ? input[t] : target[context - 1];
    HOTLOOP_CHECK_AS(
        DataError,
        token < vocab,
        path_,
        ": token at offset ",
        start + t,
        " is ",
        token,
        "; expected ids below data.vocab_size ",
        vocab);
  }
}

Example TokenDataset::get(
    int64_t index, const SampleContext& /*context*/) const {
  Example example{
      at::empty({options_.context()}, at::kLong),
      at::empty({options_.context()}, at::kLong)};
  read_window(
      index,
      example.input.data_ptr<int64_t>(),
      example.target.data_ptr<int64_t>());
  return example;
}

void TokenDataset::get_batch(
    c10::ArrayRef<int64_t> indices,
    const SampleContext& /*context*/,
    Batch& out) const {
  const int64_t context = options_.context();
  const std::vector<int64_t> shape = {
      static_cast<int64_t>(indices.size()), context};
  for (const at::Tensor* tensor : {&out.input, &out.target}) {
    HOTLOOP_CHECK(
        tensor->is_contiguous() && tensor->scalar_type() == at::kLong &&
            tensor->sizes() == at::IntArrayRef(shape),
        "a token batch must be contiguous int64 ",
        at::IntArrayRef(shape),
        ", got ",
        tensor->scalar_type(),
        tensor->sizes());
  }
  int64_t* input = out.input.data_ptr<int64_t>();
  int64_t* target = out.target.data_ptr<int64_t>();
  for (size_t k = 0; k < indices.size(); ++k) {
    read_window(indices[k], input + k * context, target + k * context);
  }
}

} // namespace hotloop::data
