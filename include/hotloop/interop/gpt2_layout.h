#pragma once

#include "hotloop/interop/named_tensors.h"

#include <cstdint>
#include <string>

namespace hotloop::interop {

/// Whether `weights` are a GPT-2 as Hugging Face's transformers stores it
/// (GPT2Model / GPT2LMHeadModel's save_pretrained): an
/// `h.0.attn.c_attn.weight`, with or without the `transformer.` prefix, in
/// Conv1D's [in, out] layout ([C, 3C]), where hotloop's (nanoGPT's
/// nn.Linear) is [3C, C].
bool is_hf_gpt2(const NamedTensors& weights);

/// transformers' GPT-2 in hotloop's GPT layout (nanoGPT's names): the
/// `transformer.` prefix added where it is missing, the Conv1D weights
/// (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) transposed,
/// lm_head.weight left out (tied to transformer.wte.weight, as in GPT-2; an
/// lm_head that differs from wte is refused, since hotloop's GPT ties
/// them), the causal mask buffers (attn.bias, attn.masked_bias) kept under
/// their new names for load_weights to ignore, and wte's rows
/// padded with zeros up to `vocab_size` when that is larger (nanoGPT's
/// 50304 for GPT-2's 50257; 0: as in the file). Throws Error naming
/// `source` for a vocabulary larger than `vocab_size`.
NamedTensors from_hf_gpt2(
    const NamedTensors& weights, int64_t vocab_size, const std::string& source);

/// hotloop's GPT state_dict (transformer.* names, Linear layout) in
/// transformers' GPT-2 layout: no prefix, Conv1D weights, no lm_head, wte
/// cut to its first `vocab_size` rows (0: all; GPT-2's 50257 after
/// nanoGPT's padding to 50304). Throws Error when a GPT entry is missing.
NamedTensors to_hf_gpt2(const NamedTensors& weights, int64_t vocab_size);

} // namespace hotloop::interop
