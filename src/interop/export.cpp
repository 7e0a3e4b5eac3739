#include "hotloop/interop/export.h"

#include "hotloop/core/error.h"
#include "hotloop/interop/gpt2_layout.h"
#include "hotloop/interop/load_weights.h"
#include "hotloop/interop/safetensors.h"
#include "hotloop/interop/torch_file.h"

#include <ATen/ATen.h>

#include <filesystem>

namespace hotloop::interop {

std::string export_format(const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".safetensors") {
    return "safetensors";
  }
  if (ext == ".pt" || ext == ".pth" || ext == ".bin") {
    return "pt";
  }
  throw ConfigError(hotloop::detail::str_cat(
      path,
      ": the output's extension says its format: .safetensors, or .pt "
      "(.pth, .bin) for a PyTorch state_dict"));
}

NamedTensors export_weights(
    NamedTensors weights,
    const std::string& output,
    const ExportOptions& options) {
  const std::string format = export_format(output);
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.dtype().empty() || options.dtype() == "float32" ||
          options.dtype() == "bfloat16" || options.dtype() == "float16",
      "--dtype: expected float32, bfloat16 or float16, got '",
      options.dtype(),
      "'");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.layout() == "hotloop" || options.layout() == "hf-gpt2",
      "--layout: expected hotloop or hf-gpt2, got '",
      options.layout(),
      "'");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.vocab_size() >= 0,
      "--vocab_size must be >= 0, got ",
      options.vocab_size());
  const bool gpt =
      weights.find("transformer.wte.weight") != nullptr &&
      weights.find("transformer.h.0.attn.c_attn.weight") != nullptr;
  if (!options.dtype().empty()) {
    const at::ScalarType dtype = options.dtype() == "bfloat16"  ? at::kBFloat16
                                 : options.dtype() == "float16" ? at::kHalf
                                                                : at::kFloat;
    for (auto& [name, tensor] : weights.tensors) {
      if (at::isFloatingType(tensor.scalar_type())) {
        tensor = tensor.to(dtype);
      }
    }
  }
  if (options.layout() == "hf-gpt2") {
    weights = to_hf_gpt2(weights, options.vocab_size());
  } else if (
      gpt && format == "pt" && weights.find("lm_head.weight") == nullptr) {
    weights.add("lm_head.weight", *weights.find("transformer.wte.weight"));
  }
  if (format == "safetensors") {
    weights.metadata = options.metadata();
    weights.metadata["format"] = "pt";
    save_safetensors(output, weights);
  } else {
    save_torch_state_dict(output, weights);
  }
  return weights;
}

NamedTensors export_module(
    const torch::nn::Module& module,
    const std::string& output,
    const ExportOptions& options) {
  return export_weights(state_dict(module), output, options);
}

} // namespace hotloop::interop
