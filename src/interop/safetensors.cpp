#include "hotloop/interop/safetensors.h"

#include "hotloop/core/error.h"
#include "hotloop/interop/detail/mapped_file.h"
#include "hotloop/interop/detail/text.h"
#include "hotloop/train/checkpoint.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors files are little-endian; this code reads them in place"
#endif

namespace hotloop::interop {
namespace {

using hotloop::detail::str_cat;

// The safetensors library's limit on the header (MAX_HEADER_SIZE).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct Dtype {
  const char* name;
  at::ScalarType type;
};
constexpr Dtype kDtypes[] = {
    {"F64", at::kDouble},
    {"F32", at::kFloat},
    {"F16", at::kHalf},
    {"BF16", at::kBFloat16},
    {"I64", at::kLong},
    {"I32", at::kInt},
    {"I16", at::kShort},
    {"I8", at::kChar},
    {"U8", at::kByte},
    {"BOOL", at::kBool},
};
// The format's other dtypes, which hotloop cannot hold.
constexpr const char* kOtherDtypes[] = {
    "U16",
    "U32",
    "U64",
    "F8_E4M3",
    "F8_E5M2",
    "F8_E8M0",
    "F6_E2M3",
    "F6_E3M2",
    "F4",
    "E8M0",
    "C64"};

std::string held_dtypes() {
  std::string names;
  for (const Dtype& d : kDtypes) {
    names += names.empty() ? d.name : std::string(", ") + d.name;
  }
  return names;
}

std::string one_line(const std::string& text) {
  return detail::printable(text);
}

// A JSON value for a message: scalars and flat lists as written, anything
// nested by its size only (writing out a deeply nested value would recurse
// as deep as it is).
std::string brief(const nlohmann::json& value) {
  if (value.is_structured() &&
      !std::all_of(value.begin(), value.end(), [](const nlohmann::json& e) {
        return e.is_primitive();
      })) {
    return hotloop::detail::str_cat(
        value.is_array() ? "a list of " : "an object of ", value.size());
  }
  return one_line(value.dump());
}

// Parses the header, refusing a key repeated within any object (JSON
// parsers keep the last silently; the safetensors library refuses it).
nlohmann::json parse_header(const std::string& text, const std::string& path) {
  std::vector<std::set<std::string>> open;
  std::string repeated;
  const nlohmann::json::parser_callback_t check =
      [&](int /*depth*/,
          nlohmann::json::parse_event_t event,
          nlohmann::json& parsed) {
        using Event = nlohmann::json::parse_event_t;
        if (event == Event::object_start) {
          open.emplace_back();
        } else if (event == Event::object_end && !open.empty()) {
          open.pop_back();
        } else if (event == Event::key && !open.empty()) {
          const auto& key = parsed.get_ref<const std::string&>();
          if (!open.back().insert(key).second && repeated.empty()) {
            repeated = key;
          }
        }
        return true;
      };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, check);
  } catch (const nlohmann::json::exception& e) {
    throw Error(str_cat(
        path,
        ": the safetensors header is not valid UTF-8 JSON (",
        one_line(e.what()),
        ")"));
  }
  HOTLOOP_CHECK(
      repeated.empty(),
      path,
      ": the safetensors header names '",
      one_line(repeated),
      "' twice");
  return header;
}

// a * b, or nullopt past 2^63.
std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  if (a != 0 &&
      b > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / a) {
    return std::nullopt;
  }
  return a * b;
}

SafetensorsEntry parse_entry(
    const std::string& name,
    const nlohmann::json& value,
    const std::string& path) {
  const std::string where = str_cat(path, ": tensor '", one_line(name), "': ");
  HOTLOOP_CHECK(
      value.is_object(), where, "expected an object, got ", value.type_name());
  for (const auto& item : value.items()) {
    HOTLOOP_CHECK(
        item.key() == "dtype" || item.key() == "shape" ||
            item.key() == "data_offsets",
        where,
        "unexpected field '",
        one_line(item.key()),
        "' (expected dtype, shape and data_offsets)");
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    HOTLOOP_CHECK(value.contains(field), where, "no '", field, "' field");
  }
  SafetensorsEntry entry;
  entry.name = name;
  const nlohmann::json& dtype = value["dtype"];
  HOTLOOP_CHECK(dtype.is_string(), where, "dtype is not a string");
  const auto& dtype_name = dtype.get_ref<const std::string&>();
  const std::optional<at::ScalarType> type = safetensors_dtype(dtype_name);
  if (!type) {
    const bool known = std::any_of(
        std::begin(kOtherDtypes), std::end(kOtherDtypes), [&](auto n) {
          return dtype_name == n;
        });
    throw Error(str_cat(
        where,
        known ? "dtype " : "unknown dtype '",
        one_line(dtype_name),
        known ? " is not one hotloop can hold (" : "' (expected one of ",
        held_dtypes(),
        ")"));
  }
  entry.dtype = *type;

  const nlohmann::json& shape = value["shape"];
  HOTLOOP_CHECK(shape.is_array(), where, "shape is not a list");
  uint64_t numel = 1;
  for (const nlohmann::json& d : shape) {
    HOTLOOP_CHECK(
        d.is_number_unsigned(),
        where,
        "shape ",
        brief(shape),
        " holds ",
        brief(d),
        ", not a size");
    const auto size = d.get<uint64_t>();
    // Each size on its own too: a zero elsewhere in the shape makes any
    // product 0.
    const std::optional<uint64_t> product = checked_mul(numel, size);
    HOTLOOP_CHECK(
        product.has_value() &&
            size <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
        where,
        "shape ",
        brief(shape),
        " is too large");
    numel = *product;
    entry.shape.push_back(static_cast<int64_t>(size));
  }
  const nlohmann::json& offsets = value["data_offsets"];
  HOTLOOP_CHECK(
      offsets.is_array() && offsets.size() == 2 &&
          offsets[0].is_number_unsigned() && offsets[1].is_number_unsigned(),
      where,
      "data_offsets ",
      brief(offsets),
      " is not [begin, end]");
  entry.begin = offsets[0].get<uint64_t>();
  entry.end = offsets[1].get<uint64_t>();
  HOTLOOP_CHECK(
      entry.begin <= entry.end,
      where,
      "data_offsets [",
      entry.begin,
      ", ",
      entry.end,
      "] end before they begin");
  const std::optional<uint64_t> bytes =
      checked_mul(numel, c10::elementSize(entry.dtype));
  HOTLOOP_CHECK(
      bytes.has_value() && *bytes == entry.end - entry.begin,
      where,
      dtype_name,
      " ",
      brief(shape),
      " is ",
      bytes ? str_cat(*bytes, " bytes") : std::string("too large"),
      ", but data_offsets [",
      entry.begin,
      ", ",
      entry.end,
      "] hold ",
      entry.end - entry.begin);
  return entry;
}

} // namespace

std::optional<at::ScalarType> safetensors_dtype(const std::string& name) {
  for (const Dtype& d : kDtypes) {
    if (name == d.name) {
      return d.type;
    }
  }
  return std::nullopt;
}

std::string safetensors_dtype_name(at::ScalarType dtype) {
  for (const Dtype& d : kDtypes) {
    if (dtype == d.type) {
      return d.name;
    }
  }
  throw Error(str_cat(
      "safetensors has no dtype for ",
      c10::toString(dtype),
      " (hotloop writes ",
      held_dtypes(),
      ")"));
}

SafetensorsFile::SafetensorsFile(const std::string& path)
    : path_(path), file_(std::make_shared<detail::MappedFile>(path)) {
  const uint64_t size = file_->size();
  HOTLOOP_CHECK(
      size >= 8,
      path,
      ": ",
      size,
      " bytes, too short for a safetensors file (8-byte header length, "
      "then the header)");
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, file_->data(), 8); // little-endian host
  HOTLOOP_CHECK(
      header_bytes <= kMaxHeaderBytes,
      path,
      ": the safetensors header length says ",
      header_bytes,
      " bytes, over the format's limit of 100 MB (not a safetensors file?)");
  HOTLOOP_CHECK(
      header_bytes <= size - 8,
      path,
      ": the safetensors header length says ",
      header_bytes,
      " bytes, but only ",
      size - 8,
      " follow (truncated, or not a safetensors file)");
  data_offset_ = 8 + header_bytes;
  const std::string text(
      reinterpret_cast<const char*>(file_->data()) + 8, header_bytes);
  HOTLOOP_CHECK(
      !text.empty() && text[0] == '{',
      path,
      ": the safetensors header does not start with '{' (not a "
      "safetensors file?)");
  const nlohmann::json header = parse_header(text, path);
  HOTLOOP_CHECK(
      header.is_object(), path, ": the safetensors header is not an object");
  for (const auto& item : header.items()) {
    if (item.key() == "__metadata__") {
      HOTLOOP_CHECK(
          item.value().is_object(),
          path,
          ": __metadata__ is not a map of strings");
      for (const auto& field : item.value().items()) {
        HOTLOOP_CHECK(
            field.value().is_string(),
            path,
            ": __metadata__ '",
            one_line(field.key()),
            "' is not a string");
        metadata_[field.key()] = field.value().get<std::string>();
      }
      continue;
    }
    entries_.push_back(parse_entry(item.key(), item.value(), path));
  }
  // The bytes of the data section, each in exactly one tensor.
  std::stable_sort(
      entries_.begin(), entries_.end(), [](const auto& a, const auto& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
      });
  const uint64_t data_bytes = size - data_offset_;
  uint64_t expected = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry& e : entries_) {
    HOTLOOP_CHECK(
        e.begin >= expected,
        path,
        ": tensor '",
        one_line(e.name),
        "': data_offsets [",
        e.begin,
        ", ",
        e.end,
        "] overlap those of tensor '",
        previous != nullptr ? one_line(previous->name) : "",
        "' [",
        previous != nullptr ? previous->begin : 0,
        ", ",
        expected,
        "]");
    HOTLOOP_CHECK(
        e.begin == expected,
        path,
        ": tensor '",
        one_line(e.name),
        "': data_offsets begin at ",
        e.begin,
        ", leaving bytes ",
        expected,
        " to ",
        e.begin,
        " of the data in no tensor");
    HOTLOOP_CHECK(
        e.end <= data_bytes,
        path,
        ": tensor '",
        one_line(e.name),
        "': data_offsets [",
        e.begin,
        ", ",
        e.end,
        "] run past the end of the file (its data section holds ",
        data_bytes,
        " bytes; truncated?)");
    expected = e.end;
    previous = &e;
  }
  HOTLOOP_CHECK(
      expected == data_bytes,
      path,
      ": the tensors hold ",
      expected,
      " bytes of data, but ",
      data_bytes,
      " follow the header");
  for (size_t i = 0; i < entries_.size(); ++i) {
    index_.emplace(entries_[i].name, i);
  }
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  const auto it = index_.find(name);
  HOTLOOP_CHECK(
      it != index_.end(),
      path_,
      ": no tensor '",
      one_line(name),
      "' in the file");
  return entries_[it->second];
}

bool SafetensorsFile::zero_copy(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  return (data_offset_ + e.begin) % c10::elementSize(e.dtype) == 0;
}

at::Tensor SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  uint8_t* bytes = file_->data() + data_offset_ + e.begin;
  const uint64_t n = e.end - e.begin;
  if (e.dtype == at::kBool) {
    const uint8_t* bad =
        std::find_if(bytes, bytes + n, [](uint8_t b) { return b > 1; });
    HOTLOOP_CHECK(
        bad == bytes + n,
        path_,
        ": tensor '",
        one_line(name),
        "': BOOL byte ",
        bad - bytes,
        " is ",
        static_cast<int>(*bad),
        ", not 0 or 1");
  }
  const auto options = at::TensorOptions().dtype(e.dtype);
  if (zero_copy(name)) {
    // The mapping stays while the tensor (or any view of it) lives.
    std::shared_ptr<detail::MappedFile> keep = file_;
    return at::from_blob(
        bytes, e.shape, [keep](void*) mutable { keep.reset(); }, options);
  }
  at::Tensor copy = at::empty(e.shape, options);
  if (n > 0) {
    std::memcpy(copy.data_ptr(), bytes, n);
  }
  return copy;
}

NamedTensors SafetensorsFile::read_all() const {
  NamedTensors all;
  all.metadata = metadata_;
  for (const SafetensorsEntry& e : entries_) {
    all.add(e.name, tensor(e.name));
  }
  return all;
}

namespace {

// Hands the bytes of safetensors_bytes(tensors) to `write` in order: the
// header, then each tensor's bytes from its own memory.
void write_safetensors(
    const NamedTensors& tensors,
    const std::function<void(const char*, size_t)>& write) {
  std::vector<at::Tensor> cpu;
  std::set<std::string> names;
  for (const auto& [name, tensor] : tensors.tensors) {
    HOTLOOP_CHECK(
        name != "__metadata__",
        "safetensors: '__metadata__' is reserved, not a tensor name");
    HOTLOOP_CHECK(
        names.insert(name).second,
        "safetensors: tensor '",
        name,
        "' is given twice");
    HOTLOOP_CHECK(
        tensor.defined(), "safetensors: tensor '", name, "' is undefined");
    safetensors_dtype_name(tensor.scalar_type()); // throws for others
    cpu.push_back(tensor.detach().to(at::kCPU).contiguous());
  }
  // Largest elements first, so that every tensor starts aligned for its
  // dtype after a header padded to 8 bytes.
  std::vector<size_t> order(cpu.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return cpu[a].element_size() > cpu[b].element_size();
  });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!tensors.metadata.empty()) {
    header["__metadata__"] = tensors.metadata;
  }
  uint64_t offset = 0;
  for (const size_t i : order) {
    const at::Tensor& t = cpu[i];
    const auto bytes = static_cast<uint64_t>(t.numel() * t.element_size());
    header[tensors.tensors[i].first] = {
        {"dtype", safetensors_dtype_name(t.scalar_type())},
        {"shape", t.sizes().vec()},
        {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  char length[8];
  const uint64_t text_size = text.size();
  std::memcpy(length, &text_size, 8);
  write(length, 8);
  write(text.data(), text.size());
  for (const size_t i : order) {
    const at::Tensor& t = cpu[i];
    if (t.numel() > 0) {
      write(
          static_cast<const char*>(t.data_ptr()),
          static_cast<size_t>(t.numel() * t.element_size()));
    }
  }
}

} // namespace

std::string safetensors_bytes(const NamedTensors& tensors) {
  std::string bytes;
  write_safetensors(tensors, [&](const char* data, size_t size) {
    bytes.append(data, size);
  });
  return bytes;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors) {
  train::write_file_atomically(path, [&](std::ostream& out) {
    write_safetensors(tensors, [&](const char* data, size_t size) {
      out.write(data, static_cast<std::streamsize>(size));
    });
  });
}

} // namespace hotloop::interop
