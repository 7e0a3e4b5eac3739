#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace hotloop::interop::detail {

/// A value of a Python pickle as far as a state_dict file needs: what
/// PyTorch's `weights_only` unpickler accepts, plus an opaque value for
/// objects of any other class, which are never constructed (nothing named
/// in the file is imported or called).
struct PickleObject {
  enum class Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kBytes,
    kTuple,
    kList,
    kDict,
    /// A class or function named by GLOBAL: `text` is "module.name".
    kGlobal,
    /// torch._utils._rebuild_tensor_v2's result.
    kTensor,
    /// A storage from the file's persistent load: `tensor` is 1-D.
    kStorage,
    /// An object of a class hotloop does not build: `text` names it.
    kOpaque,
  };
  Kind kind = Kind::kNone;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0;
  std::string text;
  /// Tuple and list items; a dict's keys and values in order.
  std::vector<PickleObject*> items;
  std::vector<std::pair<PickleObject*, PickleObject*>> entries;
  at::Tensor tensor;
};

/// "a dict", "a tensor", "an object of collections.Counter", for messages.
std::string describe(const PickleObject& object);

/// Owns every object of one unpickling (a pickle may reference an object
/// from inside itself, so objects are kept here, not by each other).
class PickleHeap {
 public:
  PickleObject* make(PickleObject::Kind kind) {
    objects_.emplace_back();
    objects_.back().kind = kind;
    return &objects_.back();
  }

 private:
  std::deque<PickleObject> objects_;
};

/// Gives the object a persistent id stands for (BINPERSID); throws Error
/// for an id it does not know.
using PersistentLoad =
    std::function<PickleObject*(PickleObject& id, PickleHeap& heap)>;

/// Runs the pickle in `data` (protocols 2 to 5, the binary opcodes) and
/// returns the object it builds. Builds dicts (OrderedDict too), lists,
/// tuples, strings, bytes, numbers, None and booleans, and tensors through
/// torch._utils._rebuild_tensor_v2 / _rebuild_tensor / _rebuild_parameter
/// from the storages `load` gives; an object of any other class becomes
/// kOpaque, and its arguments and state are dropped. Throws Error naming
/// `where` and the byte offset for malformed input (a truncated stream, a
/// stack underflow, an unknown opcode, a memo reference to nothing, a
/// tensor whose sizes and strides reach outside its storage).
PickleObject* unpickle(
    const uint8_t* data,
    size_t size,
    PickleHeap& heap,
    const PersistentLoad& load,
    const std::string& where);

/// Writes the pickle torch.save writes for an OrderedDict of tensors
/// (protocol 2): each tensor as torch._utils._rebuild_tensor_v2 of storage
/// ('storage', torch.<Type>Storage, key, 'cpu', numel), its storage offset,
/// sizes, strides, requires_grad False and empty backward hooks.
class StateDictPickler {
 public:
  StateDictPickler();
  /// `storage_type` such as "FloatStorage"; `key` the storage's record
  /// name under data/.
  void add(
      const std::string& name,
      const std::string& storage_type,
      const std::string& key,
      int64_t storage_numel,
      int64_t storage_offset,
      at::IntArrayRef sizes,
      at::IntArrayRef strides);
  /// The finished pickle.
  std::string finish();

 private:
  void op(uint8_t code) {
    out_.push_back(static_cast<char>(code));
  }
  void global(const std::string& module, const std::string& name);
  void string(const std::string& text);
  void integer(int64_t value);

  std::string out_;
};

} // namespace hotloop::interop::detail
