#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <vector>

namespace hotloop::train::detail {

/// The zip layout of LibTorch's archives, read by hotloop before LibTorch
/// is given a checkpoint: the end record, whose comment carries the seal,
/// and the CRC-32 of every record, which LibTorch's reader does not check
/// (PyTorch builds its miniz with MINIZ_DISABLE_ZIP_READER_CRC32_CHECKS).

/// Size of the end-of-central-directory record without its comment.
inline constexpr uint64_t kZipEndRecordSize = 22;

/// Where a zip's end record lies, and the comment that follows it.
struct ZipEnd {
  uint64_t offset = 0;
  std::string comment;
};

/// Finds the end record of the zip in `in` (`size` bytes): the last one
/// whose comment runs exactly to the end of the file. Throws Error naming
/// `path`, "corrupted or truncated checkpoint (no zip end record at its
/// end)", when there is none, or when the file cannot be read.
ZipEnd find_zip_end(std::istream& in, uint64_t size, const std::string& path);

/// The CRC-32 of the `n` bytes at `offset` of `in`, read a MiB at a time.
/// Throws Error naming `path` when they cannot be read.
uint32_t crc32_of(
    std::istream& in, uint64_t offset, uint64_t n, const std::string& path);

/// `value` as eight lowercase hex digits, as seals and messages show CRCs.
std::string hex32(uint32_t value);

/// One record of a zip, where its bytes lie.
struct ZipRecord {
  std::string name;
  /// Offset of its (stored or deflated) bytes in the file.
  uint64_t offset = 0;
  /// Bytes at `offset`.
  uint64_t size = 0;
  /// Stored uncompressed (as LibTorch and PyTorch write every record).
  bool stored = true;
};

/// Walks the central directory of the zip at `path`, whose end record
/// find_zip_end gave as `end`, and checks each record
/// against it: its local header (signature and name), its bytes inside the
/// file's data area, stored uncompressed on one disk without encryption (as
/// LibTorch writes them) and their CRC-32. Returns the first problem in one
/// phrase ("record 'archive/data.pkl' fails its CRC-32 check (…)"), or ""
/// when every record checks. With `records`, appends each record that
/// checks, in directory order. Throws Error naming `path` when it cannot
/// be read.
std::string check_zip_records(
    const std::string& path,
    const ZipEnd& end,
    std::vector<ZipRecord>* records = nullptr);

} // namespace hotloop::train::detail
