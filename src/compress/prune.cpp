#include "hotloop/compress/prune.h"

#include "detail/module_access.h"
#include "hotloop/core/error.h"

#include <ATen/ATen.h>

namespace hotloop::compress {
namespace {

constexpr const char* kOrig = "_orig";

void names_under(
    torch::nn::Module& module,
    const std::string& prefix,
    std::vector<std::string>& out) {
  for (const auto& item : module.named_parameters(/*recurse=*/false)) {
    const std::string& key = item.key();
    const size_t suffix = std::string(kOrig).size();
    if (key.size() > suffix &&
        key.compare(key.size() - suffix, suffix, kOrig) == 0 &&
        is_pruned(module, key.substr(0, key.size() - suffix))) {
      out.push_back(prefix + key.substr(0, key.size() - suffix));
    } else {
      out.push_back(prefix + key);
    }
  }
}

std::string joined(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) {
    text += (text.empty() ? "" : ", ") + name;
  }
  return text.empty() ? "none" : text;
}

// The tensor as its forward sees it now: the masked value of a pruned one.
at::Tensor current_value(const ParameterRef& ref) {
  if (is_pruned(*ref.module, ref.name)) {
    return masked_tensor(*ref.module, ref.name);
  }
  return ref.module->named_parameters(false)[ref.name];
}

template <typename Body>
void naming(const ParameterRef& ref, const PruningMethod& method, Body&& body) {
  try {
    body();
  } catch (const ConfigError& e) {
    throw ConfigError(hotloop::detail::str_cat(
        "pruning '", ref.path, "' (", method.name(), "): ", e.what()));
  }
}

} // namespace

std::vector<std::string> parameter_names(torch::nn::Module& root) {
  std::vector<std::string> names;
  names_under(root, "", names);
  for (const auto& item : root.named_modules("", /*include_self=*/false)) {
    names_under(*item.value(), item.key() + ".", names);
  }
  return names;
}

ParameterRef find_parameter(torch::nn::Module& root, const std::string& path) {
  const size_t dot = path.rfind('.');
  ParameterRef ref;
  ref.path = path;
  ref.name = dot == std::string::npos ? path : path.substr(dot + 1);
  ref.module = detail::module_at(
      root, dot == std::string::npos ? "" : path.substr(0, dot));
  const bool found =
      ref.module != nullptr && !ref.name.empty() &&
      (is_pruned(*ref.module, ref.name) ||
       (ref.module->named_parameters(false).find(ref.name) != nullptr &&
        ref.module->named_parameters(false)[ref.name].defined()));
  HOTLOOP_CHECK_AS(
      ConfigError,
      found,
      "no parameter '",
      path,
      "' in the model; its parameters: ",
      joined(parameter_names(root)));
  return ref;
}

void prune(
    torch::nn::Module& module,
    const std::string& name,
    const PruningMethod& method,
    const at::Tensor& importance) {
  prune(find_parameter(module, name), method, importance);
}

void prune(
    const ParameterRef& ref,
    const PruningMethod& method,
    const at::Tensor& importance) {
  at::Tensor mask;
  naming(ref, method, [&] {
    const at::NoGradGuard no_grad;
    const bool pruned = is_pruned(*ref.module, ref.name);
    const at::Tensor current = current_value(ref);
    at::Tensor scores = current;
    if (importance.defined()) {
      HOTLOOP_CHECK_AS(
          ConfigError,
          importance.sizes() == current.sizes(),
          "importance_scores should have the same shape as the parameter ",
          current.sizes(),
          ", got ",
          importance.sizes());
      scores = importance.to(current.device());
    }
    mask = pruned ? combine_masks(
                        method,
                        scores,
                        mask_of(*ref.module, ref.name).detach().clone())
                  : method.compute_mask(scores, at::ones_like(current));
  });
  naming(ref, method, [&] { set_mask(*ref.module, ref.name, mask); });
}

void identity(torch::nn::Module& module, const std::string& name) {
  prune(module, name, Identity());
}

void l1_unstructured(
    torch::nn::Module& module,
    const std::string& name,
    PruningAmount amount,
    const at::Tensor& importance) {
  prune(module, name, L1Unstructured(amount), importance);
}

void random_unstructured(
    torch::nn::Module& module, const std::string& name, PruningAmount amount) {
  prune(module, name, RandomUnstructured(amount));
}

void ln_structured(
    torch::nn::Module& module,
    const std::string& name,
    PruningAmount amount,
    double n,
    int64_t dim,
    const at::Tensor& importance) {
  prune(module, name, LnStructured(amount, n, dim), importance);
}

void random_structured(
    torch::nn::Module& module,
    const std::string& name,
    PruningAmount amount,
    int64_t dim) {
  prune(module, name, RandomStructured(amount, dim));
}

void custom_from_mask(
    torch::nn::Module& module,
    const std::string& name,
    const at::Tensor& mask) {
  prune(module, name, CustomFromMask(mask));
}

void global_unstructured(
    const std::vector<ParameterRef>& parameters,
    const PruningMethod& method,
    const std::vector<at::Tensor>& importance) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      method.type() == PruningType::kUnstructured,
      "global pruning needs an unstructured method (L1Unstructured, "
      "RandomUnstructured), got ",
      method.name(),
      " (",
      method.type() == PruningType::kStructured ? "structured" : "global",
      ")");
  HOTLOOP_CHECK_AS(
      ConfigError,
      importance.empty() || importance.size() == parameters.size(),
      "global pruning: ",
      importance.size(),
      " importance tensors for ",
      parameters.size(),
      " parameters");
  if (parameters.empty()) {
    return;
  }
  at::Tensor final_mask;
  {
    const at::NoGradGuard no_grad;
    std::vector<at::Tensor> scores;
    std::vector<at::Tensor> masks;
    for (size_t i = 0; i < parameters.size(); ++i) {
      const ParameterRef& ref = parameters[i];
      const at::Tensor current = current_value(ref);
      const bool given = !importance.empty() && importance[i].defined();
      if (given) {
        HOTLOOP_CHECK_AS(
            ConfigError,
            importance[i].sizes() == current.sizes(),
            "global pruning: the importance of '",
            ref.path,
            "' has shape ",
            importance[i].sizes(),
            ", the parameter ",
            current.sizes());
      }
      scores.push_back((given ? importance[i] : current).reshape(-1));
      masks.push_back(
          is_pruned(*ref.module, ref.name)
              ? mask_of(*ref.module, ref.name).reshape(-1)
              : at::ones_like(current).reshape(-1));
    }
    try {
      final_mask = combine_masks(method, at::cat(scores), at::cat(masks));
    } catch (const ConfigError& e) {
      throw ConfigError(hotloop::detail::str_cat(
          "global pruning (", method.name(), "): ", e.what()));
    }
  }
  int64_t offset = 0;
  for (const ParameterRef& ref : parameters) {
    const at::Tensor current = current_value(ref);
    const int64_t n = current.numel();
    prune(
        ref,
        CustomFromMask(final_mask.narrow(0, offset, n).view(current.sizes())));
    offset += n;
  }
}

} // namespace hotloop::compress
