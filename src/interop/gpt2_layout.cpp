#include "hotloop/interop/gpt2_layout.h"

#include "hotloop/core/error.h"

#include <ATen/ATen.h>

namespace hotloop::interop {
namespace {

using hotloop::detail::str_cat;

bool ends_with(const std::string& name, const std::string& suffix) {
  return name.size() >= suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The weights GPT-2 keeps in Conv1D's [in, out] layout.
bool is_conv1d_weight(const std::string& name) {
  return ends_with(name, "attn.c_attn.weight") ||
         ends_with(name, "attn.c_proj.weight") ||
         ends_with(name, "mlp.c_fc.weight") ||
         ends_with(name, "mlp.c_proj.weight");
}

} // namespace

bool is_hf_gpt2(const NamedTensors& weights) {
  for (const char* name :
       {"h.0.attn.c_attn.weight", "transformer.h.0.attn.c_attn.weight"}) {
    if (const at::Tensor* w = weights.find(name)) {
      return w->dim() == 2 && w->size(1) == 3 * w->size(0);
    }
  }
  return false;
}

NamedTensors from_hf_gpt2(
    const NamedTensors& weights,
    int64_t vocab_size,
    const std::string& source) {
  NamedTensors out;
  out.metadata = weights.metadata;
  const at::Tensor* wte = nullptr;
  const at::Tensor* head = nullptr;
  for (const auto& [name, tensor] : weights.tensors) {
    const std::string key =
        name.rfind("transformer.", 0) == 0 ? name : "transformer." + name;
    if (name == "lm_head.weight") {
      head = &tensor;
      continue;
    }
    if (key == "transformer.wte.weight") {
      wte = &tensor;
      const int64_t rows = tensor.size(0);
      HOTLOOP_CHECK(
          vocab_size == 0 || rows <= vocab_size,
          source,
          ": 'wte.weight' holds ",
          rows,
          " tokens, more than model.vocab_size=",
          vocab_size);
      if (vocab_size > rows) {
        // Rows no tokenizer id reaches (nanoGPT pads GPT-2's 50257 to
        // 50304 for faster matrix products).
        out.add(
            key,
            at::cat(
                {tensor,
                 at::zeros(
                     {vocab_size - rows, tensor.size(1)}, tensor.options())}));
        continue;
      }
    }
    out.add(key, is_conv1d_weight(key) ? tensor.t() : tensor);
  }
  if (head != nullptr) {
    HOTLOOP_CHECK(
        wte != nullptr && head->sizes() == wte->sizes() &&
            at::equal(*head, *wte),
        source,
        ": 'lm_head.weight' differs from 'wte.weight'; hotloop's GPT ties "
        "them, as GPT-2 does");
  }
  return out;
}

NamedTensors to_hf_gpt2(const NamedTensors& weights, int64_t vocab_size) {
  NamedTensors out;
  out.metadata = weights.metadata;
  HOTLOOP_CHECK(
      weights.find("transformer.wte.weight") != nullptr &&
          weights.find("transformer.h.0.attn.c_attn.weight") != nullptr,
      "export to Hugging Face's GPT-2 layout: not a GPT (no "
      "transformer.wte.weight and transformer.h.0.attn.c_attn.weight)");
  for (const auto& [name, tensor] : weights.tensors) {
    if (name == "lm_head.weight") {
      continue; // tied to wte
    }
    HOTLOOP_CHECK(
        name.rfind("transformer.", 0) == 0,
        "export to Hugging Face's GPT-2 layout: '",
        name,
        "' is not an entry of hotloop's GPT");
    const std::string key = name.substr(std::string("transformer.").size());
    if (key == "wte.weight" && vocab_size > 0) {
      HOTLOOP_CHECK(
          vocab_size <= tensor.size(0),
          "export: --vocab_size=",
          vocab_size,
          " is more than the model's ",
          tensor.size(0),
          " tokens");
      out.add(key, tensor.narrow(0, 0, vocab_size));
      continue;
    }
    out.add(key, is_conv1d_weight(key) ? tensor.t() : tensor);
  }
  return out;
}

} // namespace hotloop::interop
