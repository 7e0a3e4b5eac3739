#pragma once

// Renaming a parameter in place and deleting a buffer, which pruning needs
// (PyTorch deletes `weight` from `_parameters` and `weight_mask` from
// `_buffers`) and LibTorch's Module offers no call for. Its parameter
// dictionary is protected (reached from a derived class); its buffer
// dictionary is private and reached through an explicit instantiation,
// which the standard exempts from access checks ([temp.spec]/6). Both
// members have kept their names and types from LibTorch 1.13 to 2.x.

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/ordered_dict.h>

#include <string>

namespace hotloop::compress::detail {

using TensorDict = torch::OrderedDict<std::string, at::Tensor>;

struct ParameterAccess : torch::nn::Module {
  static TensorDict& of(torch::nn::Module& module) {
    return module.*(&ParameterAccess::parameters_);
  }
};

/// The module's buffer dictionary (see module_access.cpp).
TensorDict& buffers_of(torch::nn::Module& module);

/// Renames `from` to `to` in `dict`, keeping every entry's place.
inline void rename_entry(
    TensorDict& dict, const std::string& from, const std::string& to) {
  TensorDict renamed(dict.key_description());
  for (const auto& item : dict) {
    renamed.insert(item.key() == from ? to : item.key(), item.value());
  }
  dict = std::move(renamed);
}

/// The module at dotted `path` below `root` ("" is `root`), or null.
inline torch::nn::Module* module_at(
    torch::nn::Module& root, const std::string& path) {
  torch::nn::Module* module = &root;
  size_t start = 0;
  while (start < path.size()) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(
        start, dot == std::string::npos ? std::string::npos : dot - start);
    std::shared_ptr<torch::nn::Module> child;
    for (const auto& item : module->named_children()) {
      if (item.key() == part) {
        child = item.value();
        break;
      }
    }
    if (child == nullptr) {
      return nullptr;
    }
    module = child.get();
    start = dot == std::string::npos ? path.size() : dot + 1;
  }
  return module;
}

} // namespace hotloop::compress::detail
