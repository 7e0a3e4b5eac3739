#include "hotloop/train/detail/zip_archive.h"

#include "hotloop/core/error.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <vector>

namespace hotloop::train::detail {
namespace {

using hotloop::detail::str_cat;

// The records of the zip format (PKWARE's APPNOTE.TXT, 4.3), by signature
// and fixed size.
constexpr uint32_t kEndSignature = 0x06054b50;
constexpr uint32_t kZip64EndSignature = 0x06064b50;
constexpr uint64_t kZip64EndSize = 56;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr uint64_t kZip64LocatorSize = 20;
constexpr uint32_t kCentralSignature = 0x02014b50;
constexpr uint64_t kCentralSize = 46;
constexpr uint32_t kLocalSignature = 0x04034b50;
constexpr uint64_t kLocalSize = 30;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint64_t kStored = 0;
constexpr uint64_t kDeflated = 8;
// General purpose flags a reader must understand to read the bytes:
// encryption (bit 0), patch data (bit 5), strong encryption (bit 6),
// masked local headers (bit 13).
constexpr uint16_t kUnreadableFlags = 0x0001 | 0x0020 | 0x0040 | 0x2000;

uint64_t le(const char* p, int bytes) {
  uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i) {
    value = (value << 8) | static_cast<unsigned char>(p[i]);
  }
  return value;
}

// Calls `use(bytes, size)` on the `n` bytes at `offset` of `in`, a MiB at
// a time, until it returns false.
template <typename Use>
void for_each_chunk(
    std::istream& in, uint64_t offset, uint64_t n, const std::string& path,
    Use use) {
  std::vector<char> buffer(std::min<uint64_t>(n, 1 << 20));
  in.seekg(static_cast<std::streamoff>(offset));
  for (uint64_t done = 0; done < n;) {
    const auto chunk = static_cast<std::streamsize>(
        std::min<uint64_t>(buffer.size(), n - done));
    in.read(buffer.data(), chunk);
    HOTLOOP_CHECK(in.good(), path, ": cannot read the checkpoint");
    if (!use(buffer.data(), static_cast<size_t>(chunk))) {
      return;
    }
    done += static_cast<uint64_t>(chunk);
  }
}

// Reads byte ranges of one file, with errors that name it.
class File {
 public:
  explicit File(const std::string& path)
      : path_(path), in_(path, std::ios::binary) {
    HOTLOOP_CHECK(in_.is_open(), "checkpoint '", path, "' cannot be opened");
  }

  // `n` bytes at `offset`; the caller has checked that they lie inside.
  std::string read(uint64_t offset, uint64_t n) {
    std::string bytes(n, '\0');
    in_.seekg(static_cast<std::streamoff>(offset));
    in_.read(bytes.data(), static_cast<std::streamsize>(n));
    HOTLOOP_CHECK(in_.good(), path_, ": cannot read the checkpoint");
    return bytes;
  }

  // The CRC-32 of `n` stored bytes at `offset`.
  uint32_t crc32(uint64_t offset, uint64_t n) {
    return crc32_of(in_, offset, n, path_);
  }

  // Inflates the `n` deflated bytes at `offset` and sets `crc` to the
  // CRC-32 of what they give; returns "" or what is wrong with them. Never
  // produces more than `expected` bytes.
  std::string inflated_crc32(
      uint64_t offset, uint64_t n, uint64_t expected, uint32_t& crc) {
    z_stream stream{};
    HOTLOOP_CHECK(
        inflateInit2(&stream, -MAX_WBITS) == Z_OK,
        path_, ": cannot start zlib's inflate");
    std::vector<unsigned char> out(1 << 16);
    uLong sum = ::crc32_z(0, nullptr, 0);
    uint64_t produced = 0;
    int status = Z_OK;
    std::string problem;
    for_each_chunk(in_, offset, n, path_, [&](const char* bytes, size_t size) {
      stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes));
      stream.avail_in = static_cast<uInt>(size);
      while (stream.avail_in > 0 && status == Z_OK) {
        stream.next_out = out.data();
        stream.avail_out = static_cast<uInt>(out.size());
        status = inflate(&stream, Z_NO_FLUSH);
        const size_t got = out.size() - stream.avail_out;
        produced += got;
        if (status != Z_OK && status != Z_STREAM_END) {
          problem = "does not inflate";
        } else if (produced > expected) {
          problem = str_cat("inflates to more than ", expected, " bytes");
        } else {
          sum = ::crc32_z(sum, out.data(), got);
          continue;
        }
        status = Z_DATA_ERROR;
      }
      return status == Z_OK;
    });
    inflateEnd(&stream);
    if (problem.empty() && status != Z_STREAM_END) {
      problem = "ends before its deflate stream does";
    } else if (problem.empty() && produced != expected) {
      problem = str_cat("inflates to ", produced, " bytes, not ", expected);
    }
    crc = static_cast<uint32_t>(sum);
    return problem;
  }

 private:
  std::string path_;
  std::ifstream in_;
};

// The central directory as the end records describe it.
struct Directory {
  uint64_t entries = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  // Where the directory must end: the (zip64) end record.
  uint64_t limit = 0;
};

// Reads the end record at `end` and, where its fields overflow, the zip64
// end record. Returns "" or the problem.
std::string read_directory(File& file, uint64_t end, Directory& dir) {
  const std::string record = file.read(end, kZipEndRecordSize);
  const uint64_t disk = le(record.data() + 4, 2);
  const uint64_t directory_disk = le(record.data() + 6, 2);
  const uint64_t disk_entries = le(record.data() + 8, 2);
  dir.entries = le(record.data() + 10, 2);
  dir.size = le(record.data() + 12, 4);
  dir.offset = le(record.data() + 16, 4);
  dir.limit = end;
  if (disk != 0 || directory_disk != 0 || disk_entries != dir.entries) {
    return "its end record describes a zip split over several disks";
  }
  if (dir.entries != 0xFFFF && dir.size != 0xFFFFFFFF &&
      dir.offset != 0xFFFFFFFF) {
    return "";
  }
  if (end < kZip64LocatorSize) {
    return "its zip64 end record locator is missing";
  }
  const std::string locator =
      file.read(end - kZip64LocatorSize, kZip64LocatorSize);
  if (le(locator.data(), 4) != kZip64LocatorSignature) {
    return "its zip64 end record locator is missing";
  }
  const uint64_t at = le(locator.data() + 8, 8);
  if (at > end - kZip64LocatorSize ||
      end - kZip64LocatorSize - at < kZip64EndSize) {
    return "its zip64 end record lies outside the file";
  }
  const std::string record64 = file.read(at, kZip64EndSize);
  if (le(record64.data(), 4) != kZip64EndSignature) {
    return "its zip64 end record is damaged";
  }
  if (le(record64.data() + 16, 4) != 0 || le(record64.data() + 20, 4) != 0 ||
      le(record64.data() + 24, 8) != le(record64.data() + 32, 8)) {
    return "its zip64 end record describes a zip split over several disks";
  }
  dir.entries = le(record64.data() + 32, 8);
  dir.size = le(record64.data() + 40, 8);
  dir.offset = le(record64.data() + 48, 8);
  dir.limit = at;
  return "";
}

// The sizes and offset of one central directory entry, from its fixed
// fields and, where those say 0xFFFFFFFF, its zip64 extra field.
struct Entry {
  std::string name;
  uint64_t flags = 0;
  uint64_t method = 0;
  uint64_t crc = 0;
  uint64_t compressed = 0;
  uint64_t uncompressed = 0;
  uint64_t local = 0;
};

std::string read_zip64_extra(const std::string& extra, Entry& entry) {
  for (size_t at = 0; at + 4 <= extra.size();) {
    const uint64_t id = le(extra.data() + at, 2);
    const uint64_t size = le(extra.data() + at + 2, 2);
    if (at + 4 + size > extra.size()) {
      break;
    }
    if (id == kZip64ExtraId) {
      size_t field = at + 4;
      for (uint64_t* value :
           {&entry.uncompressed, &entry.compressed, &entry.local}) {
        if (*value != 0xFFFFFFFF) {
          continue;
        }
        if (field + 8 > at + 4 + size) {
          return str_cat(
              "record '", entry.name, "' has a short zip64 extra field");
        }
        *value = le(extra.data() + field, 8);
        field += 8;
      }
      return "";
    }
    at += 4 + size;
  }
  if (entry.uncompressed == 0xFFFFFFFF || entry.compressed == 0xFFFFFFFF ||
      entry.local == 0xFFFFFFFF) {
    return str_cat("record '", entry.name, "' lacks its zip64 extra field");
  }
  return "";
}

// Checks one record's local header and bytes against its entry; sets
// `data` to where its bytes start.
std::string check_record(
    File& file, const Entry& entry, uint64_t data_end, uint64_t& data) {
  if ((entry.flags & kUnreadableFlags) != 0) {
    return str_cat("record '", entry.name, "' is encrypted");
  }
  if (entry.method != kStored && entry.method != kDeflated) {
    return str_cat(
        "record '", entry.name, "' uses compression method ", entry.method,
        " (LibTorch reads stored and deflated records)");
  }
  if (entry.method == kStored && entry.compressed != entry.uncompressed) {
    return str_cat(
        "record '", entry.name, "' is stored with two sizes (",
        entry.compressed, " and ", entry.uncompressed, " bytes)");
  }
  if (entry.local > data_end || data_end - entry.local < kLocalSize) {
    return str_cat("record '", entry.name, "' starts outside the file");
  }
  const std::string header = file.read(entry.local, kLocalSize);
  const uint64_t name_size = le(header.data() + 26, 2);
  const uint64_t extra_size = le(header.data() + 28, 2);
  data = entry.local + kLocalSize + name_size + extra_size;
  if (le(header.data(), 4) != kLocalSignature || data > data_end ||
      file.read(entry.local + kLocalSize, name_size) != entry.name) {
    return str_cat("record '", entry.name, "' has a damaged local header");
  }
  if (entry.compressed > data_end - data) {
    return str_cat(
        "record '", entry.name, "' runs past the end of the records");
  }
  uint32_t crc = 0;
  if (entry.method == kStored) {
    crc = file.crc32(data, entry.compressed);
  } else if (std::string problem = file.inflated_crc32(
                 data, entry.compressed, entry.uncompressed, crc);
             !problem.empty()) {
    return str_cat("record '", entry.name, "' ", problem);
  }
  if (crc != entry.crc) {
    return str_cat(
        "record '", entry.name, "' fails its CRC-32 check (the directory says ",
        hex32(static_cast<uint32_t>(entry.crc)), ", its bytes give ",
        hex32(crc), ")");
  }
  return "";
}

} // namespace

ZipEnd find_zip_end(std::istream& in, uint64_t size, const std::string& path) {
  // The end record, with its comment of at most 65535 bytes, is last.
  const uint64_t tail_size = std::min<uint64_t>(size, kZipEndRecordSize + 65535);
  std::string tail(tail_size, '\0');
  in.seekg(static_cast<std::streamoff>(size - tail_size));
  in.read(tail.data(), static_cast<std::streamsize>(tail_size));
  HOTLOOP_CHECK(in.good(), path, ": cannot read the checkpoint");
  for (int64_t i = static_cast<int64_t>(tail_size) -
           static_cast<int64_t>(kZipEndRecordSize);
       i >= 0;
       --i) {
    const char* record = tail.data() + i;
    if (le(record, 4) == kEndSignature &&
        i + kZipEndRecordSize + le(record + 20, 2) == tail_size) {
      return {size - tail_size + static_cast<uint64_t>(i),
              tail.substr(static_cast<size_t>(i) + kZipEndRecordSize)};
    }
  }
  throw Error(str_cat(
      path,
      ": corrupted or truncated checkpoint (no zip end record at its end)"));
}

uint32_t crc32_of(
    std::istream& in, uint64_t offset, uint64_t n, const std::string& path) {
  uLong crc = ::crc32_z(0, nullptr, 0);
  for_each_chunk(in, offset, n, path, [&](const char* bytes, size_t size) {
    crc = ::crc32_z(crc, reinterpret_cast<const Bytef*>(bytes), size);
    return true;
  });
  return static_cast<uint32_t>(crc);
}

std::string hex32(uint32_t value) {
  char text[9];
  std::snprintf(text, sizeof(text), "%08x", value);
  return text;
}

std::string check_zip_records(
    const std::string& path,
    const ZipEnd& end,
    std::vector<ZipRecord>* records) {
  File file(path);
  Directory dir;
  if (std::string problem = read_directory(file, end.offset, dir);
      !problem.empty()) {
    return problem;
  }
  if (dir.offset > dir.limit || dir.size > dir.limit - dir.offset ||
      dir.entries > dir.size / kCentralSize) {
    return "its central directory does not fit the file";
  }
  const std::string directory = file.read(dir.offset, dir.size);
  uint64_t at = 0;
  for (uint64_t i = 0; i < dir.entries; ++i) {
    const char* fixed = directory.data() + at;
    if (directory.size() - at < kCentralSize ||
        le(fixed, 4) != kCentralSignature) {
      return str_cat("its central directory is damaged at entry ", i + 1);
    }
    const uint64_t name_size = le(fixed + 28, 2);
    const uint64_t extra_size = le(fixed + 30, 2);
    const uint64_t comment_size = le(fixed + 32, 2);
    if (directory.size() - at - kCentralSize <
        name_size + extra_size + comment_size) {
      return str_cat("its central directory is damaged at entry ", i + 1);
    }
    Entry entry;
    entry.name = directory.substr(at + kCentralSize, name_size);
    entry.flags = le(fixed + 8, 2);
    entry.method = le(fixed + 10, 2);
    entry.crc = le(fixed + 16, 4);
    entry.compressed = le(fixed + 20, 4);
    entry.uncompressed = le(fixed + 24, 4);
    entry.local = le(fixed + 42, 4);
    const uint64_t disk = le(fixed + 34, 2);
    if (std::string problem = read_zip64_extra(
            directory.substr(at + kCentralSize + name_size, extra_size),
            entry);
        !problem.empty()) {
      return problem;
    }
    if (disk != 0 && disk != 0xFFFF) {
      return str_cat("record '", entry.name, "' lies on another disk");
    }
    uint64_t data = 0;
    if (std::string problem = check_record(file, entry, dir.offset, data);
        !problem.empty()) {
      return problem;
    }
    if (records != nullptr) {
      records->push_back(
          {entry.name, data, entry.compressed, entry.method == kStored});
    }
    at += kCentralSize + name_size + extra_size + comment_size;
  }
  return "";
}

} // namespace hotloop::train::detail
