#include "hotloop/interop/detail/pickle.h"

#include "hotloop/core/error.h"
#include "hotloop/interop/detail/text.h"

#include <ATen/ATen.h>

#include <cstring>
#include <limits>
#include <unordered_map>

namespace hotloop::interop::detail {
namespace {

using hotloop::detail::str_cat;
using Kind = PickleObject::Kind;

// Opcodes of Python's pickle (Lib/pickletools.py), binary protocols.
enum Op : uint8_t {
  kMark = '(',
  kStop = '.',
  kPop = '0',
  kPopMark = '1',
  kDup = '2',
  kBinFloat = 'G',
  kBinInt = 'J',
  kBinInt1 = 'K',
  kBinInt2 = 'M',
  kNone = 'N',
  kBinPersId = 'Q',
  kReduce = 'R',
  kBinUnicode = 'X',
  kBinBytes = 'B',
  kShortBinBytes = 'C',
  kEmptyList = ']',
  kAppend = 'a',
  kBuild = 'b',
  kGlobal = 'c',
  kDict = 'd',
  kEmptyDict = '}',
  kAppends = 'e',
  kBinGet = 'h',
  kLongBinGet = 'j',
  kList = 'l',
  kBinPut = 'q',
  kLongBinPut = 'r',
  kSetItem = 's',
  kTuple = 't',
  kEmptyTuple = ')',
  kSetItems = 'u',
  kProto = 0x80,
  kNewObj = 0x81,
  kTuple1 = 0x85,
  kTuple2 = 0x86,
  kTuple3 = 0x87,
  kNewTrue = 0x88,
  kNewFalse = 0x89,
  kLong1 = 0x8a,
  kShortBinUnicode = 0x8c,
  kBinUnicode8 = 0x8d,
  kBinBytes8 = 0x8e,
  kEmptySet = 0x8f,
  kAddItems = 0x90,
  kFrozenSet = 0x91,
  kStackGlobal = 0x93,
  kMemoize = 0x94,
  kFrame = 0x95,
};

class Unpickler {
 public:
  Unpickler(
      const uint8_t* data,
      size_t size,
      PickleHeap& heap,
      const PersistentLoad& load,
      const std::string& where)
      : data_(data), size_(size), heap_(heap), load_(load), where_(where) {}

  PickleObject* run() {
    while (true) {
      HOTLOOP_CHECK(
          at_ < size_,
          where_,
          ": the pickle ends before its STOP opcode "
          "(truncated?)");
      op_at_ = at_;
      const uint8_t op = data_[at_++];
      if (op == kStop) {
        HOTLOOP_CHECK(
            stack_.size() == 1 && marks_.empty(),
            where_,
            ": the pickle stops with ",
            stack_.size(),
            " values on its stack, not 1");
        return stack_.back();
      }
      step(op);
    }
  }

 private:
  template <typename... Args>
  [[noreturn]] void fail(Args&&... args) const {
    throw Error(str_cat(
        where_,
        ": ",
        std::forward<Args>(args)...,
        " (pickle byte ",
        op_at_,
        ")"));
  }

  const uint8_t* take(uint64_t n) {
    if (n > size_ - at_) {
      fail("the pickle ends inside an opcode's argument (truncated?)");
    }
    const uint8_t* p = data_ + at_;
    at_ += n;
    return p;
  }
  uint64_t unsigned_le(int bytes) {
    const uint8_t* p = take(bytes);
    uint64_t value = 0;
    for (int i = bytes - 1; i >= 0; --i) {
      value = (value << 8) | p[i];
    }
    return value;
  }
  std::string bytes(uint64_t n) {
    const uint8_t* p = take(n);
    return std::string(reinterpret_cast<const char*>(p), n);
  }
  // Text up to a newline (GLOBAL's module and name).
  std::string line() {
    const size_t start = at_;
    while (at_ < size_ && data_[at_] != '\n') {
      ++at_;
    }
    if (at_ == size_) {
      fail("the pickle ends inside a GLOBAL name (truncated?)");
    }
    return std::string(
        reinterpret_cast<const char*>(data_ + start), at_++ - start);
  }

  PickleObject* pop() {
    if (stack_.empty() || (!marks_.empty() && marks_.back() == stack_.size())) {
      fail("the pickle takes a value from an empty stack");
    }
    PickleObject* top = stack_.back();
    stack_.pop_back();
    return top;
  }
  PickleObject* top() {
    if (stack_.empty() || (!marks_.empty() && marks_.back() == stack_.size())) {
      fail("the pickle reads a value from an empty stack");
    }
    return stack_.back();
  }
  // The values since the last MARK, which is removed.
  std::vector<PickleObject*> pop_mark() {
    if (marks_.empty()) {
      fail("the pickle has no MARK where it needs one");
    }
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<PickleObject*> items(stack_.begin() + mark, stack_.end());
    stack_.resize(mark);
    return items;
  }
  void push(PickleObject* object) {
    stack_.push_back(object);
  }
  PickleObject* make(Kind kind) {
    return heap_.make(kind);
  }
  PickleObject* tuple(std::vector<PickleObject*> items) {
    PickleObject* t = make(Kind::kTuple);
    t->items = std::move(items);
    return t;
  }
  PickleObject* integer(int64_t value) {
    PickleObject* i = make(Kind::kInt);
    i->integer = value;
    return i;
  }
  PickleObject* text(Kind kind, std::string value) {
    PickleObject* s = make(kind);
    s->text = std::move(value);
    return s;
  }
  void memo_put(uint64_t key) {
    memo_[key] = top();
  }
  PickleObject* memo_get(uint64_t key) {
    const auto it = memo_.find(key);
    if (it == memo_.end()) {
      fail("the pickle refers to memo entry ", key, ", which it never set");
    }
    return it->second;
  }

  void set_items(PickleObject* dict, const std::vector<PickleObject*>& items) {
    if (items.size() % 2 != 0) {
      fail("SETITEMS with an odd number of values");
    }
    if (dict->kind == Kind::kOpaque) {
      return; // a dict subclass hotloop does not build
    }
    if (dict->kind != Kind::kDict) {
      fail("the pickle sets items of ", describe(*dict));
    }
    for (size_t i = 0; i < items.size(); i += 2) {
      dict->entries.emplace_back(items[i], items[i + 1]);
    }
  }
  void append(PickleObject* list, const std::vector<PickleObject*>& items) {
    if (list->kind == Kind::kOpaque) {
      return;
    }
    if (list->kind != Kind::kList) {
      fail("the pickle appends to ", describe(*list));
    }
    list->items.insert(list->items.end(), items.begin(), items.end());
  }

  int64_t int_arg(const PickleObject& value, const char* what) {
    if (value.kind != Kind::kInt) {
      fail(what, " is ", describe(value), ", not an integer");
    }
    return value.integer;
  }
  std::vector<int64_t> ints(const PickleObject& value, const char* what) {
    if (value.kind != Kind::kTuple && value.kind != Kind::kList) {
      fail(what, " is ", describe(value), ", not a tuple of integers");
    }
    std::vector<int64_t> out;
    for (const PickleObject* item : value.items) {
      const int64_t v = int_arg(*item, what);
      if (v < 0) {
        fail(what, " holds ", v);
      }
      out.push_back(v);
    }
    return out;
  }

  // torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride,
  // requires_grad, backward_hooks[, metadata]): a view of the storage,
  // checked to lie inside it.
  PickleObject* rebuild_tensor(const std::vector<PickleObject*>& args) {
    if (args.size() < 4 || args[0]->kind != Kind::kStorage) {
      fail("_rebuild_tensor_v2 without a storage and its view");
    }
    const at::Tensor& storage = args[0]->tensor;
    const int64_t offset = int_arg(*args[1], "a tensor's storage offset");
    const std::vector<int64_t> sizes = ints(*args[2], "a tensor's size");
    const std::vector<int64_t> strides = ints(*args[3], "a tensor's stride");
    if (sizes.size() != strides.size()) {
      fail(
          "a tensor has ",
          sizes.size(),
          " sizes but ",
          strides.size(),
          " strides");
    }
    if (offset < 0) {
      fail("a tensor's storage offset is ", offset);
    }
    // The last element it reaches, without overflow.
    uint64_t last = static_cast<uint64_t>(offset);
    bool empty = false;
    constexpr auto kMax =
        static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    uint64_t numel = 1;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] == 0) {
        empty = true;
        continue;
      }
      const auto extent = static_cast<uint64_t>(sizes[i] - 1);
      const auto stride = static_cast<uint64_t>(strides[i]);
      if (stride != 0 && extent > (kMax - last) / stride) {
        fail("a tensor's sizes and strides reach past 2^63 elements");
      }
      last += extent * stride;
      if (static_cast<uint64_t>(sizes[i]) > kMax / numel) {
        fail("a tensor's sizes hold more than 2^63 elements");
      }
      numel *= static_cast<uint64_t>(sizes[i]);
    }
    if (!empty && last >= static_cast<uint64_t>(storage.numel())) {
      fail(
          "a tensor of size ",
          at::IntArrayRef(sizes),
          " and stride ",
          at::IntArrayRef(strides),
          " at offset ",
          offset,
          " reaches past its storage of ",
          storage.numel(),
          " elements");
    }
    PickleObject* t = make(Kind::kTensor);
    t->tensor = empty ? at::empty(sizes, storage.options())
                      : storage.as_strided(sizes, strides, offset);
    return t;
  }

  PickleObject* call(PickleObject* callable, const PickleObject& args) {
    if (args.kind != Kind::kTuple) {
      fail("REDUCE's arguments are ", describe(args), ", not a tuple");
    }
    if (callable->kind != Kind::kGlobal) {
      // A call on an object made by an earlier call: nothing hotloop
      // builds.
      return text(Kind::kOpaque, "the result of a call");
    }
    const std::string& name = callable->text;
    if (name == "collections.OrderedDict" || name == "builtins.dict") {
      if (!args.items.empty()) {
        fail(printable(name), " with arguments");
      }
      return make(Kind::kDict);
    }
    if (name == "torch._utils._rebuild_tensor_v2" ||
        name == "torch._utils._rebuild_tensor") {
      return rebuild_tensor(args.items);
    }
    if (name == "torch._utils._rebuild_parameter" ||
        name == "torch._utils._rebuild_parameter_with_state") {
      if (args.items.empty() || args.items[0]->kind != Kind::kTensor) {
        fail(printable(name), " without a tensor");
      }
      return args.items[0];
    }
    return text(Kind::kOpaque, name);
  }

  void step(uint8_t op) {
    switch (op) {
      case kProto: {
        const uint64_t version = unsigned_le(1);
        if (version < 2 || version > 5) {
          fail("pickle protocol ", version, " (hotloop reads 2 to 5)");
        }
        return;
      }
      case kFrame:
        take(8);
        return;
      case kMark:
        marks_.push_back(stack_.size());
        return;
      case kPop:
        pop();
        return;
      case kPopMark:
        pop_mark();
        return;
      case kDup:
        push(top());
        return;
      case kNone:
        push(make(Kind::kNone));
        return;
      case kNewTrue:
      case kNewFalse: {
        PickleObject* b = make(Kind::kBool);
        b->boolean = op == kNewTrue;
        push(b);
        return;
      }
      case kBinInt1:
        push(integer(static_cast<int64_t>(unsigned_le(1))));
        return;
      case kBinInt2:
        push(integer(static_cast<int64_t>(unsigned_le(2))));
        return;
      case kBinInt:
        push(integer(static_cast<int32_t>(unsigned_le(4))));
        return;
      case kLong1: {
        const uint64_t n = unsigned_le(1);
        if (n > 8) {
          fail("an integer of ", n, " bytes (hotloop reads up to 8)");
        }
        uint64_t value = n == 0 ? 0 : unsigned_le(static_cast<int>(n));
        if (n > 0 && n < 8 && (value >> (8 * n - 1)) != 0) {
          value |= ~uint64_t{0} << (8 * n); // negative: sign-extend
        }
        push(integer(static_cast<int64_t>(value)));
        return;
      }
      case kBinFloat: {
        const uint8_t* p = take(8); // big-endian
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) {
          bits = (bits << 8) | p[i];
        }
        PickleObject* f = make(Kind::kFloat);
        std::memcpy(&f->real, &bits, 8);
        push(f);
        return;
      }
      case kShortBinUnicode:
        push(text(Kind::kString, bytes(unsigned_le(1))));
        return;
      case kBinUnicode:
        push(text(Kind::kString, bytes(unsigned_le(4))));
        return;
      case kBinUnicode8:
        push(text(Kind::kString, bytes(unsigned_le(8))));
        return;
      case kShortBinBytes:
        push(text(Kind::kBytes, bytes(unsigned_le(1))));
        return;
      case kBinBytes:
        push(text(Kind::kBytes, bytes(unsigned_le(4))));
        return;
      case kBinBytes8:
        push(text(Kind::kBytes, bytes(unsigned_le(8))));
        return;
      case kEmptyTuple:
        push(tuple({}));
        return;
      case kTuple:
        push(tuple(pop_mark()));
        return;
      case kTuple1:
      case kTuple2:
      case kTuple3: {
        std::vector<PickleObject*> items(op - kTuple1 + 1);
        for (auto it = items.rbegin(); it != items.rend(); ++it) {
          *it = pop();
        }
        push(tuple(std::move(items)));
        return;
      }
      case kEmptyList:
        push(make(Kind::kList));
        return;
      case kList: {
        PickleObject* list = make(Kind::kList);
        list->items = pop_mark();
        push(list);
        return;
      }
      case kAppend: {
        PickleObject* item = pop();
        append(top(), {item});
        return;
      }
      case kAppends: {
        const std::vector<PickleObject*> items = pop_mark();
        append(top(), items);
        return;
      }
      case kEmptySet:
        push(make(Kind::kList)); // a set's items, as a list
        return;
      case kAddItems: {
        const std::vector<PickleObject*> items = pop_mark();
        append(top(), items);
        return;
      }
      case kFrozenSet: {
        PickleObject* set = make(Kind::kList);
        set->items = pop_mark();
        push(set);
        return;
      }
      case kEmptyDict:
        push(make(Kind::kDict));
        return;
      case kDict: {
        PickleObject* dict = make(Kind::kDict);
        set_items(dict, pop_mark());
        push(dict);
        return;
      }
      case kSetItem: {
        PickleObject* value = pop();
        PickleObject* key = pop();
        set_items(top(), {key, value});
        return;
      }
      case kSetItems: {
        const std::vector<PickleObject*> items = pop_mark();
        set_items(top(), items);
        return;
      }
      case kBinPut:
        memo_put(unsigned_le(1));
        return;
      case kLongBinPut:
        memo_put(unsigned_le(4));
        return;
      case kMemoize:
        memo_put(memo_.size());
        return;
      case kBinGet:
        push(memo_get(unsigned_le(1)));
        return;
      case kLongBinGet:
        push(memo_get(unsigned_le(4)));
        return;
      case kGlobal: {
        std::string module = line();
        std::string name = line();
        push(text(Kind::kGlobal, module + "." + name));
        return;
      }
      case kStackGlobal: {
        PickleObject* name = pop();
        PickleObject* module = pop();
        if (module->kind != Kind::kString || name->kind != Kind::kString) {
          fail("STACK_GLOBAL without a module and a name");
        }
        push(text(Kind::kGlobal, module->text + "." + name->text));
        return;
      }
      case kReduce:
      case kNewObj: {
        PickleObject* args = pop();
        PickleObject* callable = pop();
        push(call(callable, *args));
        return;
      }
      case kBuild: {
        pop(); // the state: OrderedDict's _metadata, a subclass's fields
        top();
        return;
      }
      case kBinPersId: {
        PickleObject* id = pop();
        push(load_(*id, heap_));
        return;
      }
      default:
        fail(
            "unknown or unsupported pickle opcode ",
            static_cast<int>(op),
            " (hotloop reads the binary protocols 2 to 5)");
    }
  }

  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
  size_t op_at_ = 0;
  PickleHeap& heap_;
  const PersistentLoad& load_;
  const std::string& where_;
  std::vector<PickleObject*> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, PickleObject*> memo_;
};

} // namespace

std::string describe(const PickleObject& object) {
  switch (object.kind) {
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return "a bool";
    case Kind::kInt:
      return "an integer";
    case Kind::kFloat:
      return "a float";
    case Kind::kString:
      return "a string";
    case Kind::kBytes:
      return "bytes";
    case Kind::kTuple:
      return "a tuple";
    case Kind::kList:
      return "a list";
    case Kind::kDict:
      return "a dict";
    case Kind::kGlobal:
      return "the class or function " + printable(object.text);
    case Kind::kTensor:
      return "a tensor";
    case Kind::kStorage:
      return "a storage";
    case Kind::kOpaque:
      return "an object of " + printable(object.text);
  }
  return "a value";
}

PickleObject* unpickle(
    const uint8_t* data,
    size_t size,
    PickleHeap& heap,
    const PersistentLoad& load,
    const std::string& where) {
  return Unpickler(data, size, heap, load, where).run();
}

StateDictPickler::StateDictPickler() {
  op(kProto);
  op(2);
  global("collections", "OrderedDict");
  op(kEmptyTuple);
  op(kReduce);
  op(kMark);
}

void StateDictPickler::global(
    const std::string& module, const std::string& name) {
  op(kGlobal);
  out_ += module + "\n" + name + "\n";
}

void StateDictPickler::string(const std::string& text) {
  op(kBinUnicode);
  const auto n = static_cast<uint32_t>(text.size());
  for (int i = 0; i < 4; ++i) {
    out_.push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
  }
  out_ += text;
}

void StateDictPickler::integer(int64_t value) {
  if (value >= 0 && value < 256) {
    op(kBinInt1);
    op(static_cast<uint8_t>(value));
  } else if (
      value >= std::numeric_limits<int32_t>::min() &&
      value <= std::numeric_limits<int32_t>::max()) {
    op(kBinInt);
    const auto v = static_cast<uint32_t>(static_cast<int32_t>(value));
    for (int i = 0; i < 4; ++i) {
      out_.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
    }
  } else {
    op(kLong1);
    op(8);
    const auto v = static_cast<uint64_t>(value);
    for (int i = 0; i < 8; ++i) {
      out_.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
    }
  }
}

void StateDictPickler::add(
    const std::string& name,
    const std::string& storage_type,
    const std::string& key,
    int64_t storage_numel,
    int64_t storage_offset,
    at::IntArrayRef sizes,
    at::IntArrayRef strides) {
  string(name);
  global("torch._utils", "_rebuild_tensor_v2");
  op(kMark);
  // The persistent id of the storage.
  op(kMark);
  string("storage");
  global("torch", storage_type);
  string(key);
  string("cpu");
  integer(storage_numel);
  op(kTuple);
  op(kBinPersId);
  integer(storage_offset);
  op(kMark);
  for (const int64_t size : sizes) {
    integer(size);
  }
  op(kTuple);
  op(kMark);
  for (const int64_t stride : strides) {
    integer(stride);
  }
  op(kTuple);
  op(kNewFalse);                        // requires_grad
  global("collections", "OrderedDict"); // backward hooks
  op(kEmptyTuple);
  op(kReduce);
  op(kTuple);
  op(kReduce);
}

std::string StateDictPickler::finish() {
  op(kSetItems);
  op(kStop);
  return std::move(out_);
}

} // namespace hotloop::interop::detail
