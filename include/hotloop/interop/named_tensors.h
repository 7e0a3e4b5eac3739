#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace hotloop::interop {

/// What a weights file holds: tensors by name in the file's order (a
/// state_dict), and string metadata (safetensors' `__metadata__`; empty for
/// formats without it).
struct NamedTensors {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  std::map<std::string, std::string> metadata;

  /// The tensor named `name`, or nullptr.
  const at::Tensor* find(const std::string& name) const {
    for (const auto& [key, tensor] : tensors) {
      if (key == name) {
        return &tensor;
      }
    }
    return nullptr;
  }
  void add(std::string name, at::Tensor tensor) {
    tensors.emplace_back(std::move(name), std::move(tensor));
  }
  size_t size() const {
    return tensors.size();
  }
};

} // namespace hotloop::interop
