#include "int8_checkpoint.h"

#include "hotloop/core/error.h"

namespace hotloop::compress::detail {

void save_int8_checkpoint(
    const std::string& path,
    torch::nn::Module& model,
    const nlohmann::json& record,
    const std::string& extra) {
  nlohmann::json callbacks =
      extra.empty() ? nlohmann::json::object() : nlohmann::json::parse(extra);
  callbacks[train::kInt8ModelKey] = record;
  train::CheckpointState state;
  state.callbacks = callbacks.dump();
  train::save_checkpoint(path, model, state);
}

Int8File read_int8_file(
    const std::string& path, const std::string& quantize_command) {
  Int8File file;
  file.summary = train::describe_checkpoint(path);
  HOTLOOP_CHECK(
      file.summary.content_read,
      path,
      ": corrupted checkpoint (",
      file.summary.seal.problem,
      ")");
  const nlohmann::json callbacks =
      file.summary.callback_states.empty()
          ? nlohmann::json::object()
          : nlohmann::json::parse(file.summary.callback_states);
  HOTLOOP_CHECK(
      callbacks.contains(train::kInt8ModelKey),
      path,
      ": a float model's checkpoint, not an int8 one: quantize it first (",
      quantize_command,
      " --ckpt_path ",
      path,
      ")");
  file.record = callbacks.at(train::kInt8ModelKey);
  return file;
}

} // namespace hotloop::compress::detail
