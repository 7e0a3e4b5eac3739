#pragma once

#include "hotloop/interop/named_tensors.h"

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace hotloop::interop {

namespace detail {
class MappedFile;
} // namespace detail

/// The safetensors dtypes hotloop holds, by their name in the header: F64,
/// F32, F16, BF16, I64, I32, I16, I8, U8, BOOL. nullopt for any other name
/// (the format's U16, U32, U64, F8_E4M3, ... and unknown ones).
std::optional<at::ScalarType> safetensors_dtype(const std::string& name);
/// The header name of `dtype`; throws Error for a dtype that has none of
/// the ten above.
std::string safetensors_dtype_name(at::ScalarType dtype);

/// One tensor of a safetensors header.
struct SafetensorsEntry {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  /// Its bytes: [begin, end) of the data section that follows the header.
  uint64_t begin = 0;
  uint64_t end = 0;
};

/// A safetensors file (the format of Hugging Face's `safetensors`
/// library): an 8-byte little-endian header length N, N bytes of JSON
/// `{"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]},
/// ..., "__metadata__": {"key": "text"}}`, then the tensors' bytes,
/// little-endian, row-major and contiguous.
///
/// The constructor memory-maps the file and validates the whole header
/// before anything is read: the header length within the file and under
/// 100 MB, UTF-8 JSON with no repeated key, each entry's dtype one of the
/// ten hotloop holds, its shape of non-negative integers whose product
/// times the dtype's size is its byte length, the offsets in order and
/// within the data, every byte of which belongs to exactly one tensor (no
/// overlap, no gap, nothing after the last), `__metadata__` a map of
/// strings. Every error is one line naming the file and, where there is
/// one, the tensor. Reading a tensor copies nothing when its bytes are
/// aligned for its dtype (as save_safetensors writes them): the tensor is
/// then a copy-on-write view of the mapping, which lives as long as any
/// tensor taken from it; writes to it change this process's pages, never
/// the file. A file truncated by another process while mapped raises
/// SIGBUS on access, as with any mapping.
///
/// Thread-safe once constructed (every member is const).
class SafetensorsFile {
 public:
  /// Throws Error naming `path` when it is missing, unreadable or invalid
  /// (see above).
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const {
    return path_;
  }
  /// Entries in the order of their bytes in the file.
  const std::vector<SafetensorsEntry>& entries() const {
    return entries_;
  }
  /// `__metadata__`, empty when absent.
  const std::map<std::string, std::string>& metadata() const {
    return metadata_;
  }
  bool contains(const std::string& name) const {
    return index_.count(name) != 0;
  }
  /// The entry `name`; throws Error naming the file and the tensor when
  /// there is none.
  const SafetensorsEntry& entry(const std::string& name) const;

  /// Tensor `name` on the CPU, contiguous, of its entry's dtype and shape:
  /// a view of the mapping when zero_copy(name), a copy otherwise. A BOOL
  /// tensor whose bytes are not all 0 or 1 is refused (Error naming it).
  at::Tensor tensor(const std::string& name) const;
  /// Whether tensor(name) shares the mapped memory (its bytes are aligned
  /// for its dtype).
  bool zero_copy(const std::string& name) const;
  /// Every tensor and the metadata, in file order.
  NamedTensors read_all() const;

 private:
  std::string path_;
  std::shared_ptr<detail::MappedFile> file_;
  /// Byte offset of the data section in the file (8 + N).
  uint64_t data_offset_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

/// The bytes of a safetensors file holding `tensors` (each brought to the
/// CPU and made contiguous) with `metadata` as `__metadata__`. The header
/// lists the entries in the order of their bytes and is padded with spaces
/// to a multiple of 8 bytes; tensors are laid out by element size,
/// largest first (the given order otherwise), so each one's bytes are
/// aligned for its dtype and SafetensorsFile reads them without a copy.
/// Throws Error for a repeated or reserved (`__metadata__`) name or a dtype
/// outside the ten.
std::string safetensors_bytes(const NamedTensors& tensors);

/// Writes safetensors_bytes(tensors) to `path` atomically, from each
/// tensor's memory as it goes (never the whole file in memory; a crash leaves
/// the old file or the new one; see train::write_file_atomically).
void save_safetensors(const std::string& path, const NamedTensors& tensors);

} // namespace hotloop::interop
