#include "hotloop/compress/parametrization.h"

#include "detail/module_access.h"
#include "hotloop/compress/forward_tensor.h"
#include "hotloop/core/error.h"

#include <ATen/ATen.h>
#include <c10/util/irange.h>

#include <atomic>
#include <set>

namespace hotloop::compress {
namespace {

constexpr const char* kOrig = "_orig";
constexpr const char* kMask = "_mask";

std::atomic<uint64_t> generation{0};

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() > suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The entry `key` of `dict` (a handle to the same tensor), or an undefined
// tensor.
at::Tensor find(
    const torch::OrderedDict<std::string, at::Tensor>& dict,
    const std::string& key) {
  const at::Tensor* found = dict.find(key);
  return found != nullptr ? *found : at::Tensor();
}

std::string names_of(const torch::nn::Module& module) {
  std::string names;
  for (const auto& item : module.named_parameters(/*recurse=*/false)) {
    names += (names.empty() ? "" : ", ") + item.key();
  }
  return names.empty() ? "none" : names;
}

// The module's forward tensor for `name`, or ConfigError saying how to
// make its type prunable.
at::Tensor& forward_member(torch::nn::Module& module, const std::string& name) {
  at::Tensor* member = forward_tensor(module, name);
  HOTLOOP_CHECK_AS(
      ConfigError,
      member != nullptr,
      "cannot prune '",
      name,
      "' of ",
      module.name(),
      ": hotloop does not know which member its forward reads (register it "
      "with compress::register_forward_tensor)");
  return *member;
}

void collect(
    torch::nn::Module& module,
    const std::string& prefix,
    std::vector<PrunedTensor>& out) {
  const auto buffers = module.named_buffers(/*recurse=*/false);
  for (const auto& item : buffers) {
    if (!ends_with(item.key(), kMask)) {
      continue;
    }
    const std::string name =
        item.key().substr(0, item.key().size() - std::string(kMask).size());
    if (is_pruned(module, name)) {
      out.push_back({prefix + name, &module, name});
    }
  }
}

} // namespace

bool is_pruned(const torch::nn::Module& module, const std::string& name) {
  return find(module.named_parameters(false), name + kOrig).defined() &&
         find(module.named_buffers(false), name + kMask).defined();
}

bool is_pruned(const torch::nn::Module& root) {
  auto& mutable_root = const_cast<torch::nn::Module&>(root);
  return !pruned_tensors(mutable_root).empty();
}

std::vector<PrunedTensor> pruned_tensors(torch::nn::Module& root) {
  std::vector<PrunedTensor> out;
  collect(root, "", out);
  for (const auto& item : root.named_modules("", /*include_self=*/false)) {
    collect(*item.value(), item.key() + ".", out);
  }
  return out;
}

void set_mask(
    torch::nn::Module& module,
    const std::string& name,
    const at::Tensor& mask) {
  at::Tensor& member = forward_member(module, name);
  const bool pruned = is_pruned(module, name);
  const at::Tensor parameter =
      find(module.named_parameters(false), pruned ? name + kOrig : name);
  HOTLOOP_CHECK_AS(
      ConfigError,
      parameter.defined(),
      "cannot prune '",
      name,
      "' of ",
      module.name(),
      ": no such parameter (its parameters: ",
      names_of(module),
      ")");
  HOTLOOP_CHECK_AS(
      ConfigError,
      mask.sizes() == parameter.sizes(),
      "the mask of '",
      name,
      "' of ",
      module.name(),
      " has shape ",
      mask.sizes(),
      ", the parameter ",
      parameter.sizes());
  const at::Tensor stored = mask.detach().to(
      parameter.options(), /*non_blocking=*/false, /*copy=*/true);
  if (!pruned) {
    // `weight` -> `weight_orig`, the same tensor in the same place.
    detail::rename_entry(
        detail::ParameterAccess::of(module), name, name + kOrig);
    module.register_buffer(name + kMask, stored);
  } else {
    detail::buffers_of(module)[name + kMask] = stored;
  }
  member = stored * parameter;
  ++generation;
}

at::Tensor mask_of(const torch::nn::Module& module, const std::string& name) {
  const at::Tensor mask = find(module.named_buffers(false), name + kMask);
  HOTLOOP_CHECK(
      mask.defined() && is_pruned(module, name),
      "'",
      name,
      "' of ",
      module.name(),
      " is not pruned");
  return mask;
}

at::Tensor masked_tensor(
    const torch::nn::Module& module, const std::string& name) {
  const at::Tensor mask = mask_of(module, name);
  const at::Tensor orig = find(module.named_parameters(false), name + kOrig);
  return mask.to(orig.scalar_type()) * orig;
}

void recompute_pruned(torch::nn::Module& root) {
  for (const PrunedTensor& pruned : pruned_tensors(root)) {
    forward_member(*pruned.module, pruned.name) =
        masked_tensor(*pruned.module, pruned.name);
  }
}

void remove(torch::nn::Module& module, const std::string& name) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      is_pruned(module, name),
      "Parameter '",
      name,
      "' of ",
      module.name(),
      " has to be pruned before pruning can be removed");
  at::Tensor& member = forward_member(module, name);
  const at::Tensor weight = masked_tensor(module, name);
  at::Tensor orig = find(module.named_parameters(false), name + kOrig);
  orig.set_data(weight.detach());
  detail::rename_entry(detail::ParameterAccess::of(module), name + kOrig, name);
  detail::buffers_of(module).erase(name + kMask);
  member = orig;
  ++generation;
}

int64_t make_pruning_permanent(torch::nn::Module& root) {
  const std::vector<PrunedTensor> tensors = pruned_tensors(root);
  for (const PrunedTensor& pruned : tensors) {
    remove(*pruned.module, pruned.name);
  }
  return static_cast<int64_t>(tensors.size());
}

uint64_t pruning_generation() {
  return generation.load();
}

int64_t match_pruning(
    torch::nn::Module& root, const std::vector<std::string>& saved_names) {
  const std::set<std::string> saved(saved_names.begin(), saved_names.end());
  int64_t matched = 0;
  for (const std::string& entry : saved_names) {
    if (!ends_with(entry, kMask)) {
      continue;
    }
    const std::string path =
        entry.substr(0, entry.size() - std::string(kMask).size());
    if (saved.count(path + kOrig) == 0) {
      continue;
    }
    const size_t dot = path.rfind('.');
    const std::string name =
        dot == std::string::npos ? path : path.substr(dot + 1);
    torch::nn::Module* module = detail::module_at(
        root, dot == std::string::npos ? "" : path.substr(0, dot));
    if (module == nullptr || is_pruned(*module, name)) {
      continue;
    }
    const at::Tensor parameter = find(module->named_parameters(false), name);
    if (!parameter.defined() || forward_tensor(*module, name) == nullptr) {
      continue; // the checkpoint comparison names the difference
    }
    const at::NoGradGuard no_grad;
    set_mask(*module, name, at::ones_like(parameter));
    ++matched;
  }
  return matched;
}

void PrunedForward::recompute(torch::nn::Module& root) {
  const uint64_t now = pruning_generation();
  if (now != generation_ || &root != root_) {
    tensors_.clear();
    for (const PrunedTensor& pruned : pruned_tensors(root)) {
      tensors_.emplace_back(pruned.module, pruned.name);
    }
    generation_ = now;
    root_ = &root;
  }
  for (const auto& [module, name] : tensors_) {
    forward_member(*module, name) = masked_tensor(*module, name);
  }
}

} // namespace hotloop::compress
