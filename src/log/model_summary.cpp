#include "hotloop/log/model_summary.h"

#include "hotloop/core/error.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <c10/core/GradMode.h>
#include <torch/nn/modules/container/sequential.h>

#include <algorithm>
#include <iomanip>
#include <map>
#include <sstream>
#include <stdexcept>

namespace hotloop::log {
namespace {

// "torch::nn::Conv2dImpl" -> "Conv2d", "hotloop::models::FashionCnnImpl" ->
// "FashionCnn": the names a user wrote.
std::string short_type(const torch::nn::Module& module) {
  std::string name = module.name();
  const size_t colon = name.rfind("::");
  if (colon != std::string::npos) {
    name = name.substr(colon + 2);
  }
  if (name.size() > 4 && name.compare(name.size() - 4, 4, "Impl") == 0) {
    name.resize(name.size() - 4);
  }
  return name;
}

int64_t count_params(const torch::nn::Module& module) {
  int64_t count = 0;
  for (const auto& parameter : module.parameters()) {
    count += parameter.numel();
  }
  return count;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  if (shape.empty()) {
    return "?";
  }
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    out << (i ? ", " : "") << shape[i];
  }
  out << "]";
  return out.str();
}

std::string count_text(int64_t count) {
  std::ostringstream out;
  if (count >= 1000000) {
    out << std::fixed << std::setprecision(1) << count / 1e6 << " M";
  } else if (count >= 1000) {
    out << std::fixed << std::setprecision(1) << count / 1e3 << " K";
  } else {
    out << count;
  }
  return out.str();
}

// Runs `input` through every Sequential under `module`, in registration
// order, recording each step's output shape by the step's full name.
at::Tensor trace_sequentials(
    torch::nn::Module& module,
    const std::string& prefix,
    at::Tensor input,
    std::map<std::string, std::vector<int64_t>>& shapes) {
  if (auto* sequential = dynamic_cast<torch::nn::SequentialImpl*>(&module)) {
    size_t index = 0;
    for (auto& child : *sequential) {
      input = child.forward(input);
      shapes[prefix + std::to_string(index++)] = input.sizes().vec();
    }
    return input;
  }
  const auto children = module.named_children();
  if (children.is_empty()) {
    // A layer outside any Sequential: how the model applies it is unknown.
    throw std::runtime_error("not a chain of Sequentials");
  }
  for (const auto& child : children) {
    input = trace_sequentials(
        *child.value(), prefix + child.key() + ".", input, shapes);
    shapes[prefix + child.key()] = input.sizes().vec();
  }
  return input;
}

// What the op observer below fills in while the model runs its example:
// the leaf module owning each parameter's storage, and each one's output
// shape in the order they ran.
struct OpShapes {
  std::map<const c10::StorageImpl*, std::string> owner;
  std::map<std::string, int> open; // ops of the module in progress
  std::map<std::string, std::vector<int64_t>> shapes;
  std::vector<std::string> order;
};
thread_local OpShapes* active_shapes = nullptr;

struct OwnerContext : at::ObserverContext {
  explicit OwnerContext(std::string name) : name(std::move(name)) {}
  std::string name;
};

const c10::StorageImpl* storage_of(const c10::IValue& value) {
  if (!value.isTensor()) {
    return nullptr;
  }
  const at::Tensor& tensor = value.toTensor();
  return tensor.defined() && tensor.has_storage()
             ? tensor.storage().unsafeGetStorageImpl()
             : nullptr;
}

// An op that reads a module's parameter (or a view of it: LibTorch's
// Linear passes weight.t() to addmm) works for that module. Of such ops,
// the outermost one that makes a new tensor gives the module's output:
// aten::addmm, aten::conv2d, aten::embedding, aten::layer_norm, not the
// aten::t view before them nor the ops inside them.
std::unique_ptr<at::ObserverContext> on_op_start(const at::RecordFunction& fn) {
  OpShapes* state = active_shapes;
  if (state == nullptr) {
    return nullptr;
  }
  for (const c10::IValue& input : fn.inputs()) {
    const auto found = state->owner.find(storage_of(input));
    if (found != state->owner.end() && !state->shapes.count(found->second)) {
      ++state->open[found->second];
      return std::make_unique<OwnerContext>(found->second);
    }
  }
  return nullptr;
}

void on_op_end(const at::RecordFunction& fn, at::ObserverContext* context) {
  OpShapes* state = active_shapes;
  if (state == nullptr || context == nullptr) {
    return;
  }
  const std::string& name = static_cast<OwnerContext*>(context)->name;
  const bool outermost = --state->open[name] == 0;
  const auto& outputs = fn.outputs();
  if (!outermost || state->shapes.count(name) || outputs.empty() ||
      !outputs[0].isTensor() || state->owner.count(storage_of(outputs[0]))) {
    return; // an inner op, already known, or a view of a parameter
  }
  state->shapes[name] = outputs[0].toTensor().sizes().vec();
  state->order.push_back(name);
}

// Output shapes from the ops that use each module's parameters, for models
// whose forward is code rather than a chain of Sequentials (the MLP, the
// GPT): every layer with parameters gets its own, and a module holding
// layers the shape of the last of them to run (a residual block's, a
// transformer stack's).
std::map<std::string, std::vector<int64_t>> shapes_from_ops(
    torch::nn::Module& model,
    const at::Tensor& example,
    const std::function<at::Tensor(const at::Tensor&)>& forward) {
  OpShapes state;
  for (const auto& item : model.named_modules(
           /*name_prefix=*/"", /*include_self=*/false)) {
    for (const auto& parameter : item.value()->named_parameters(false)) {
      // A tied weight (the GPT's wte and lm head) belongs to its first owner.
      if (parameter.value().has_storage()) {
        state.owner.emplace(
            parameter.value().storage().unsafeGetStorageImpl(), item.key());
      }
    }
  }
  active_shapes = &state;
  const at::CallbackHandle handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(on_op_start, on_op_end)
          .needsInputs(true)
          .needsOutputs(true));
  try {
    forward(example);
  } catch (...) {
    at::removeCallback(handle);
    active_shapes = nullptr;
    throw;
  }
  at::removeCallback(handle);
  active_shapes = nullptr;
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const std::string& name : state.order) {
    shapes[name] = state.shapes[name];
    // Every enclosing module: the last of its layers to run.
    for (size_t dot = name.find('.'); dot != std::string::npos;
         dot = name.find('.', dot + 1)) {
      shapes[name.substr(0, dot)] = state.shapes[name];
    }
  }
  return shapes;
}

} // namespace

ModelSummary summarize_model(
    torch::nn::Module& model,
    int64_t max_depth,
    const at::Tensor& example,
    const std::function<at::Tensor(const at::Tensor&)>& forward) {
  HOTLOOP_CHECK(max_depth >= 1, "max_depth must be >= 1, got ", max_depth);
  ModelSummary summary;
  std::map<std::string, std::vector<int64_t>> shapes;
  if (example.defined() && forward) {
    const bool was_training = model.is_training();
    model.eval();
    const at::NoGradGuard no_grad;
    try {
      const at::Tensor chained = trace_sequentials(model, "", example, shapes);
      if (chained.sizes() != forward(example).sizes()) {
        shapes.clear(); // the forward is not the chain of its Sequentials
      }
    } catch (const std::exception&) {
      shapes.clear();
    }
    if (shapes.empty()) {
      try {
        shapes = shapes_from_ops(model, example, forward);
      } catch (const std::exception&) {
        shapes.clear();
      }
    }
    model.train(was_training);
  }
  for (const auto& item : model.named_modules(
           /*name_prefix=*/"",
           /*include_self=*/false)) {
    const std::string& name = item.key();
    const int64_t depth =
        1 + static_cast<int64_t>(std::count(name.begin(), name.end(), '.'));
    if (depth > max_depth) {
      continue;
    }
    LayerSummary layer;
    layer.name = name;
    layer.depth = depth;
    layer.type = short_type(*item.value());
    layer.params = count_params(*item.value());
    const auto shape = shapes.find(name);
    if (shape != shapes.end()) {
      layer.output_shape = shape->second;
    }
    summary.layers.push_back(std::move(layer));
  }
  double bytes = 0;
  for (const auto& parameter : model.parameters()) {
    (parameter.requires_grad() ? summary.trainable_params
                               : summary.frozen_params) += parameter.numel();
    bytes += static_cast<double>(parameter.numel() * parameter.element_size());
  }
  for (const auto& buffer : model.buffers()) {
    bytes += static_cast<double>(buffer.numel() * buffer.element_size());
  }
  summary.size_mb = bytes / 1e6;
  return summary;
}

void ModelSummary::print(std::ostream& out) const {
  size_t name_width = 4;
  size_t type_width = 4;
  for (const auto& layer : layers) {
    name_width = std::max(name_width, layer.name.size());
    type_width = std::max(type_width, layer.type.size());
  }
  out << std::left << "  " << std::setw(static_cast<int>(name_width)) << "name"
      << "  " << std::setw(static_cast<int>(type_width)) << "type"
      << "  " << std::right << std::setw(9) << "params"
      << "  out shape\n";
  for (const auto& layer : layers) {
    out << std::left << "  " << std::setw(static_cast<int>(name_width))
        << layer.name << "  " << std::setw(static_cast<int>(type_width))
        << layer.type << "  " << std::right << std::setw(9)
        << count_text(layer.params) << "  " << shape_text(layer.output_shape)
        << "\n";
  }
  out << "  " << count_text(trainable_params) << " trainable params, "
      << count_text(frozen_params) << " frozen, " << count_text(total_params())
      << " total, " << std::fixed << std::setprecision(3) << size_mb << " MB\n"
      << std::defaultfloat;
}

} // namespace hotloop::log
