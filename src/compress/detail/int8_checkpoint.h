#pragma once

// What the int8 models' checkpoints share (QuantizedNet's, the int8 GPT's):
// a checkpoint marked by its record under train::kInt8ModelKey, which says
// what kind of int8 model it holds.

#include "hotloop/train/checkpoint.h"

#include <torch/nn/module.h>
#include <nlohmann/json.hpp>

#include <string>

namespace hotloop::compress::detail {

/// Writes `model` as a checkpoint marked int8 with `record` (at least its
/// "kind" and "engine"), `extra` (callback states as JSON text) beside it.
void save_int8_checkpoint(
    const std::string& path,
    torch::nn::Module& model,
    const nlohmann::json& record,
    const std::string& extra);

struct Int8File {
  train::CheckpointSummary summary;
  nlohmann::json record;
};

/// `path`'s summary and int8 record, read without a model. Throws Error
/// naming the file when it is damaged, or when it is a float model's
/// checkpoint ("quantize it first: <quantize_command> --ckpt_path PATH").
Int8File read_int8_file(
    const std::string& path, const std::string& quantize_command);

} // namespace hotloop::compress::detail
