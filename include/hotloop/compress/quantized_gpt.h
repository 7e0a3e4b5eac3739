#pragma once

#include "hotloop/models/gpt.h"

#include <cstdint>
#include <string>

namespace hotloop::compress {

/// torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, qint8,
/// inplace=True) of a Gpt: each Linear layer, lm_head included (as in
/// nanoGPT, where it is an nn.Linear sharing wte's weight), becomes a
/// DynamicLinear; the embeddings and LayerNorms stay float. Selects the
/// quantized engine (quantized_engine.h: "auto" or a name) and returns its
/// name. The model then runs forward, decode, token_loss and
/// models::generate on the CPU, for inference. Throws Error for a model
/// that is not on the CPU.
std::string quantize_dynamic_inplace(
    models::GptImpl& model, const std::string& engine = "auto");

/// The same as a new model (torch.ao's quantize_dynamic with inplace=False):
/// an int8 Gpt of `model`'s options and values (a pruned layer's masked
/// ones), `model` left as it is.
models::Gpt quantize_dynamic(
    models::GptImpl& model, const std::string& engine = "auto");

/// Whether the model's Linear layers are int8 (quantize_dynamic_inplace).
bool is_quantized(const models::GptImpl& model);

/// Bytes of the model's tensors as stored: its float parameters and
/// buffers, and the int8 layers' weights.
int64_t stored_bytes(const models::GptImpl& model);

/// Writes an int8 Gpt as a checkpoint: sealed and verified like every
/// checkpoint (train/checkpoint.h), marked as an int8 model so that a float
/// model refuses it, with `extra` (callback states as JSON text) beside it.
/// Throws Error when the model is not int8. Atomic.
void save_quantized(
    const std::string& path,
    models::GptImpl& model,
    const std::string& extra = "");

/// Loads what save_quantized wrote into `model`, a Gpt of the same options
/// (float or int8): its Linear layers become int8 ones holding the file's
/// values. The file's names and shapes are checked first: Error naming the
/// file for a float checkpoint, another kind of int8 model, or a tensor
/// whose name or shape differs from the model's, the model left as it was.
/// The weights are packed for the engine selected when the model first
/// runs (quantized_engine.h).
void load_quantized(const std::string& path, models::GptImpl& model);

} // namespace hotloop::compress
