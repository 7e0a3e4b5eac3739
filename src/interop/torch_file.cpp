#include "hotloop/interop/torch_file.h"

#include "hotloop/core/error.h"
#include "hotloop/interop/detail/mapped_file.h"
#include "hotloop/interop/detail/pickle.h"
#include "hotloop/interop/detail/text.h"
#include "hotloop/interop/safetensors.h"
#include "hotloop/train/checkpoint.h"
#include "hotloop/train/detail/zip_archive.h"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>

#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>

namespace hotloop::interop {
namespace {

using detail::PickleObject;
using hotloop::detail::str_cat;
using Kind = PickleObject::Kind;

// torch.<Name>Storage, the classes torch.save names for each dtype.
struct StorageType {
  const char* name;
  at::ScalarType dtype;
};
constexpr StorageType kStorageTypes[] = {
    {"DoubleStorage", at::kDouble},
    {"FloatStorage", at::kFloat},
    {"HalfStorage", at::kHalf},
    {"BFloat16Storage", at::kBFloat16},
    {"LongStorage", at::kLong},
    {"IntStorage", at::kInt},
    {"ShortStorage", at::kShort},
    {"CharStorage", at::kChar},
    {"ByteStorage", at::kByte},
    {"BoolStorage", at::kBool},
};

// The first bytes of torch.save's legacy format (PyTorch before 1.6, or
// _use_new_zipfile_serialization=False): a pickled magic number.
constexpr char kLegacyMagic[] =
    "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8";

// A state_dict: a dict of string keys and tensor values (empty allowed).
bool is_state_dict(const PickleObject& object) {
  if (object.kind != Kind::kDict) {
    return false;
  }
  for (const auto& [key, value] : object.entries) {
    if (key->kind != Kind::kString || value->kind != Kind::kTensor) {
      return false;
    }
  }
  return true;
}

const PickleObject* entry_of(
    const PickleObject& dict, const std::string& name) {
  for (const auto& [key, value] : dict.entries) {
    if (key->kind == Kind::kString && key->text == name) {
      return value;
    }
  }
  return nullptr;
}

std::string keys_of(const PickleObject& dict) {
  std::string keys;
  int shown = 0;
  for (const auto& [key, value] : dict.entries) {
    if (shown++ == 8) {
      return keys + ", ...";
    }
    keys +=
        (keys.empty() ? "" : ", ") +
        (key->kind == Kind::kString ? "'" + detail::printable(key->text) + "'"
                                    : describe(*key));
  }
  return keys;
}

// The state_dict in what the pickle built (see the header).
const PickleObject& find_state_dict(
    const PickleObject& root, const std::string& path) {
  if (is_state_dict(root)) {
    return root;
  }
  HOTLOOP_CHECK(
      root.kind == Kind::kDict,
      path,
      ": holds ",
      describe(root),
      ", not a state_dict (a dict of tensors)");
  for (const char* nested : {"state_dict", "model"}) {
    const PickleObject* value = entry_of(root, nested);
    if (value != nullptr && is_state_dict(*value)) {
      return *value;
    }
  }
  // A dict of mostly tensors names its odd entry; anything else is some
  // other dict.
  for (const auto& [key, value] : root.entries) {
    if (key->kind != Kind::kString) {
      throw Error(str_cat(
          path,
          ": a key of its dict is ",
          describe(*key),
          ", not a string: not a state_dict"));
    }
    if (value->kind != Kind::kTensor) {
      throw Error(str_cat(
          path,
          ": '",
          key->text,
          "' is ",
          describe(*value),
          ", not a tensor: not a state_dict, and no 'state_dict' or 'model' "
          "entry of it is one (its keys: ",
          keys_of(root),
          ")"));
    }
  }
  throw Error(str_cat(path, ": not a state_dict")); // unreachable
}

// "" for a dtype without one hotloop writes.
std::string storage_type_name(at::ScalarType dtype) {
  for (const StorageType& s : kStorageTypes) {
    if (s.dtype == dtype) {
      return s.name;
    }
  }
  return "";
}

} // namespace

NamedTensors load_torch_state_dict(const std::string& path) {
  auto file = std::make_shared<detail::MappedFile>(path);
  HOTLOOP_CHECK(
      file->size() < sizeof(kLegacyMagic) - 1 ||
          std::memcmp(file->data(), kLegacyMagic, sizeof(kLegacyMagic) - 1) !=
              0,
      path,
      ": written in torch.save's legacy format (PyTorch before 1.6, or "
      "_use_new_zipfile_serialization=False); load and save it again with "
      "a current PyTorch");
  std::vector<train::detail::ZipRecord> records;
  std::string problem;
  {
    std::ifstream in(path, std::ios::binary);
    train::detail::ZipEnd end;
    try {
      end = train::detail::find_zip_end(in, file->size(), path);
    } catch (const Error&) {
      throw Error(str_cat(
          path,
          ": not a PyTorch file (torch.save's zip), or truncated: no "
          "zip end record at its end"));
    }
    problem = train::detail::check_zip_records(path, end, &records);
  }
  HOTLOOP_CHECK(
      problem.empty(), path, ": corrupted PyTorch file (", problem, ")");
  // Every record of torch.save's zip lies in one folder, named after the
  // file it first wrote: <folder>/data.pkl, <folder>/data/<key>, ...
  std::map<std::string, const train::detail::ZipRecord*> by_name;
  std::string folder;
  for (const auto& record : records) {
    by_name[record.name] = &record;
    const size_t slash = record.name.find('/');
    if (folder.empty() && slash != std::string::npos &&
        record.name.compare(slash, std::string::npos, "/data.pkl") == 0) {
      folder = record.name.substr(0, slash);
    }
  }
  HOTLOOP_CHECK(
      !folder.empty(),
      path,
      ": a zip without the data.pkl record of torch.save (not a PyTorch "
      "file)");
  HOTLOOP_CHECK(
      by_name.count(folder + "/constants.pkl") == 0,
      path,
      ": a TorchScript archive or a hotloop checkpoint, not a state_dict "
      "that torch.save wrote");
  const auto bytes_of = [&](const train::detail::ZipRecord& record) {
    HOTLOOP_CHECK(
        record.stored,
        path,
        ": record '",
        record.name,
        "' is compressed (torch.save stores every record as is)");
    return file->data() + record.offset;
  };
  const std::string where =
      path + ": " + detail::printable(folder) + "/data.pkl";
  std::unordered_map<std::string, PickleObject*> storages;
  const detail::PersistentLoad load =
      [&](PickleObject& id, detail::PickleHeap& heap) -> PickleObject* {
    HOTLOOP_CHECK(
        id.kind == Kind::kTuple && id.items.size() == 5 &&
            id.items[0]->kind == Kind::kString &&
            id.items[0]->text == "storage" &&
            id.items[1]->kind == Kind::kGlobal &&
            id.items[2]->kind == Kind::kString &&
            id.items[4]->kind == Kind::kInt,
        where,
        ": a persistent id that is not ('storage', type, key, location, "
        "numel)");
    const std::string& key = id.items[2]->text;
    const std::string shown = detail::printable(key);
    if (const auto it = storages.find(key); it != storages.end()) {
      return it->second;
    }
    const std::string& type = id.items[1]->text;
    const StorageType* storage_type = nullptr;
    for (const StorageType& s : kStorageTypes) {
      if (type == std::string("torch.") + s.name) {
        storage_type = &s;
      }
    }
    HOTLOOP_CHECK(
        storage_type != nullptr,
        where,
        ": storage '",
        shown,
        "' is a ",
        detail::printable(type),
        ", a dtype hotloop cannot hold (it holds float64, float32, "
        "float16, bfloat16, int64, int32, int16, int8, uint8 and bool)");
    const auto record = by_name.find(folder + "/data/" + key);
    HOTLOOP_CHECK(
        record != by_name.end(),
        where,
        ": storage '",
        shown,
        "' has no record ",
        detail::printable(folder),
        "/data/",
        shown);
    const int64_t numel = id.items[4]->integer;
    const size_t element = c10::elementSize(storage_type->dtype);
    HOTLOOP_CHECK(
        numel >= 0 &&
            static_cast<uint64_t>(numel) <= record->second->size / element &&
            static_cast<uint64_t>(numel) * element == record->second->size,
        where,
        ": storage '",
        shown,
        "' says ",
        numel,
        " elements of ",
        element,
        " bytes, but its record holds ",
        record->second->size,
        " bytes");
    uint8_t* bytes = bytes_of(*record->second);
    const auto options = at::TensorOptions().dtype(storage_type->dtype);
    at::Tensor storage;
    if (reinterpret_cast<uintptr_t>(bytes) % element == 0 && numel > 0) {
      std::shared_ptr<detail::MappedFile> keep = file;
      storage = at::from_blob(
          bytes, {numel}, [keep](void*) mutable { keep.reset(); }, options);
    } else {
      storage = at::empty({numel}, options);
      if (numel > 0) {
        std::memcpy(storage.data_ptr(), bytes, record->second->size);
      }
    }
    if (storage_type->dtype == at::kBool && numel > 0) {
      const auto* b = static_cast<const uint8_t*>(storage.data_ptr());
      for (int64_t i = 0; i < numel; ++i) {
        HOTLOOP_CHECK(
            b[i] <= 1,
            where,
            ": bool storage '",
            shown,
            "' holds byte ",
            static_cast<int>(b[i]),
            " at ",
            i);
      }
    }
    PickleObject* object = heap.make(Kind::kStorage);
    object->tensor = storage;
    storages[key] = object;
    return object;
  };
  const auto pickle = by_name.at(folder + "/data.pkl");
  detail::PickleHeap heap;
  const PickleObject* root =
      detail::unpickle(bytes_of(*pickle), pickle->size, heap, load, where);
  const PickleObject& state_dict = find_state_dict(*root, path);
  NamedTensors out;
  std::set<std::string> seen;
  for (const auto& [key, value] : state_dict.entries) {
    HOTLOOP_CHECK(
        seen.insert(key->text).second,
        path,
        ": '",
        detail::printable(key->text),
        "' twice");
    out.add(key->text, value->tensor);
  }
  return out;
}

namespace {

// Hands the bytes of torch_state_dict_bytes(tensors) to `write` in order,
// each storage's from its own memory. LibTorch's zip writer calls `write`
// from C (miniz), which an exception must not cross, and 1.13's writer
// ends the process when told of a short write: so the first exception
// `write` throws is kept, the rest of the file is dropped, and it is
// rethrown once the writer is done.
void write_torch_state_dict(
    const NamedTensors& tensors,
    const std::function<void(const char*, size_t)>& write) {
  struct Storage {
    std::string key;
    at::Tensor flat; // the whole storage, 1-D, on the CPU
  };
  std::vector<Storage> storages;
  std::map<std::pair<const void*, at::ScalarType>, size_t> index;
  std::set<std::string> names;
  detail::StateDictPickler pickler;
  for (const auto& [name, tensor] : tensors.tensors) {
    HOTLOOP_CHECK(
        names.insert(name).second,
        "state_dict: tensor '",
        name,
        "' is given twice");
    HOTLOOP_CHECK(
        tensor.defined() && tensor.layout() == at::kStrided,
        "state_dict: tensor '",
        name,
        "' is not a dense tensor");
    const at::Tensor t = tensor.detach();
    const std::string type = storage_type_name(t.scalar_type());
    HOTLOOP_CHECK(
        !type.empty(),
        "state_dict: tensor '",
        name,
        "' is ",
        c10::toString(t.scalar_type()),
        "; hotloop writes float64, float32, float16, bfloat16, int64, int32, "
        "int16, int8, uint8 and bool");
    const int64_t numel =
        static_cast<int64_t>(t.storage().nbytes()) / t.element_size();
    const auto impl = std::make_pair(
        static_cast<const void*>(t.storage().unsafeGetStorageImpl()),
        t.scalar_type());
    auto [it, added] = index.emplace(impl, storages.size());
    if (added) {
      // Python writes whole storages too, so views keep their offsets.
      at::Tensor flat =
          at::empty({0}, t.options()).set_(t.storage(), 0, {numel}, {1});
      storages.push_back({std::to_string(storages.size()), flat.to(at::kCPU)});
    }
    pickler.add(
        name,
        type,
        storages[it->second].key,
        numel,
        t.storage_offset(),
        t.sizes(),
        t.strides());
  }
  const std::string pickle = pickler.finish();
  std::exception_ptr failure;
  caffe2::serialize::PyTorchStreamWriter writer(
      [&](const void* data, size_t size) {
        if (!failure) {
          try {
            write(static_cast<const char*>(data), size);
          } catch (...) {
            failure = std::current_exception();
          }
        }
        return size;
      });
  static const char kNothing = 0;
  writer.writeRecord("data.pkl", pickle.data(), pickle.size());
  writer.writeRecord("byteorder", "little", 6);
  for (const Storage& s : storages) {
    const auto bytes =
        static_cast<size_t>(s.flat.numel() * s.flat.element_size());
    writer.writeRecord(
        "data/" + s.key, bytes > 0 ? s.flat.data_ptr() : &kNothing, bytes);
  }
  writer.writeEndOfFile();
  if (failure) {
    std::rethrow_exception(failure);
  }
}

} // namespace

std::string torch_state_dict_bytes(const NamedTensors& tensors) {
  std::string bytes;
  write_torch_state_dict(tensors, [&](const char* data, size_t size) {
    bytes.append(data, size);
  });
  return bytes;
}

void save_torch_state_dict(
    const std::string& path, const NamedTensors& tensors) {
  train::write_file_atomically(path, [&](std::ostream& out) {
    write_torch_state_dict(tensors, [&](const char* data, size_t size) {
      out.write(data, static_cast<std::streamsize>(size));
    });
  });
}

} // namespace hotloop::interop
