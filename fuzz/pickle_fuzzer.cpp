// The restricted unpickler of state_dict files on its own, fed the pickle's
// bytes (the state_dict target's inputs seldom get past the zip's CRC-32s):
// every opcode, the memo, marks, persistent ids, and _rebuild_tensor_v2's
// checks of a view against its storage (16 float32 values for any id).
#include "fuzz_input.h"

#include "hotloop/interop/detail/pickle.h"

#include <ATen/ATen.h>

namespace {

using hotloop::interop::detail::PickleHeap;
using hotloop::interop::detail::PickleObject;

void touch(const PickleObject& object) {
  if (object.kind == PickleObject::Kind::kTensor && object.tensor.numel() > 0 &&
      object.tensor.numel() < (1 << 20)) {
    (void)object.tensor.sum().item<float>();
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hotloop::fuzz::expect_clean([&] {
    PickleHeap heap;
    const at::Tensor storage = at::arange(16, at::kFloat);
    const hotloop::interop::detail::PersistentLoad load =
        [&](PickleObject& id, PickleHeap& objects) -> PickleObject* {
      HOTLOOP_CHECK(
          id.kind == PickleObject::Kind::kTuple, "input.pkl: a persistent id");
      PickleObject* s = objects.make(PickleObject::Kind::kStorage);
      s->tensor = storage;
      return s;
    };
    const PickleObject* root =
        hotloop::interop::detail::unpickle(data, size, heap, load, "input.pkl");
    touch(*root);
    for (const auto& [key, value] : root->entries) {
      touch(*value);
    }
    for (const PickleObject* item : root->items) {
      touch(*item);
    }
  });
  return 0;
}
