#pragma once

#include "hotloop/interop/named_tensors.h"

#include <torch/arg.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <map>
#include <string>

namespace hotloop::interop {

/// How export_weights writes.
struct ExportOptions {
  using Metadata = std::map<std::string, std::string>;

  /// Floating point tensors cast to "bfloat16" or "float16" (integer and
  /// bool buffers as they are); "": as they are.
  TORCH_ARG(std::string, dtype) = "";
  /// "hotloop": the names the model has, which are its Python twin's
  /// (nanoGPT's, torchvision's); "hf-gpt2": a GPT in the layout of Hugging
  /// Face's transformers (to_hf_gpt2).
  TORCH_ARG(std::string, layout) = "hotloop";
  /// hf-gpt2: the embedding rows kept (GPT-2's 50257 of nanoGPT's 50304);
  /// 0: all.
  TORCH_ARG(int64_t, vocab_size) = 0;
  /// safetensors: `__metadata__` (besides "format": "pt", which
  /// transformers expects). Ignored for .pt.
  TORCH_ARG(Metadata, metadata) = {};
};

/// The format `path`'s extension names: "safetensors" for .safetensors,
/// "pt" for .pt, .pth and .bin; throws ConfigError naming the path for any
/// other.
std::string export_format(const std::string& path);

/// Writes `weights` (state_dict names: see interop::state_dict) to
/// `output`, atomically, as safetensors or as a PyTorch state_dict by its
/// extension (export_format), after validating the options (ConfigError
/// naming the option) so that nothing is written for a bad one. In a .pt of
/// the hotloop layout, a GPT's tied head is written as nanoGPT's state_dict
/// has it: `lm_head.weight`, the same storage as `transformer.wte.weight`;
/// safetensors, which has no shared tensors, leaves it out (as
/// transformers does). Returns the tensors written.
NamedTensors export_weights(
    NamedTensors weights,
    const std::string& output,
    const ExportOptions& options = {});

/// export_weights(state_dict(module), output, options).
NamedTensors export_module(
    const torch::nn::Module& module,
    const std::string& output,
    const ExportOptions& options = {});

} // namespace hotloop::interop
