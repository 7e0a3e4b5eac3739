#include "quantized_weights.h"

#include "hotloop/compress/parametrization.h"
#include "hotloop/core/error.h"
#include "module_access.h"

#include <ATen/ATen.h>

namespace hotloop::compress::detail {

at::Tensor forward_value(torch::nn::Module& module, const std::string& name) {
  if (is_pruned(module, name)) {
    return masked_tensor(module, name).detach();
  }
  const auto parameters = module.named_parameters(false);
  const at::Tensor* found = parameters.find(name);
  return found != nullptr && found->defined() ? found->detach() : at::Tensor();
}

at::Tensor buffer_value(torch::nn::Module& module, const std::string& name) {
  const auto buffers = module.named_buffers(false);
  const at::Tensor* found = buffers.find(name);
  return found != nullptr ? found->detach() : at::Tensor();
}

torch::nn::Module& child(torch::nn::Module& root, const std::string& path) {
  torch::nn::Module* module = module_at(root, path);
  HOTLOOP_CHECK(module != nullptr, "quantize: the model has no '", path, "'");
  return *module;
}

at::Tensor quantize_weight(const at::Tensor& weight, const QParams& q) {
  if (q.axis >= 0) {
    return at::quantize_per_channel(
        weight.to(at::kFloat),
        q.scale.to(at::kDouble),
        q.zero_point.to(at::kLong),
        q.axis,
        at::kQInt8);
  }
  return at::quantize_per_tensor(
      weight.to(at::kFloat),
      q.scale.item<double>(),
      q.zero_point.item<int64_t>(),
      at::kQInt8);
}

} // namespace hotloop::compress::detail
