#include "hotloop/train/callback.h"

#include <c10/util/Type.h>

#include <nlohmann/json.hpp>

#include <typeinfo>

namespace hotloop::train {

std::string Callback::state_key() const {
  return c10::demangle(typeid(*this).name());
}

nlohmann::json Callback::summary() const {
  return nullptr;
}

nlohmann::json Callback::state_dict() const {
  return nullptr;
}

void Callback::load_state_dict(const nlohmann::json& state) {}

std::vector<at::Tensor> Callback::state_tensors() const {
  return {};
}

void Callback::load_state_tensors(std::vector<at::Tensor> tensors) {}

} // namespace hotloop::train
