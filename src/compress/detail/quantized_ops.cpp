#include "quantized_ops.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <map>
#include <mutex>
#include <string>

namespace hotloop::compress::detail {

c10::IValue call_quantized(
    const char* name, const char* overload, std::vector<c10::IValue> args) {
  static std::mutex mutex;
  static std::map<std::string, c10::OperatorHandle> handles;
  const std::string key = std::string(name) + "." + overload;
  c10::OperatorHandle* handle = nullptr;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    auto found = handles.find(key);
    if (found == handles.end()) {
      found = handles
                  .emplace(
                      key,
                      c10::Dispatcher::singleton().findSchemaOrThrow(
                          name, overload))
                  .first;
    }
    handle = &found->second;
  }
  torch::jit::Stack stack(std::move(args));
  handle->callBoxed(&stack);
  return std::move(stack.at(0));
}

} // namespace hotloop::compress::detail
