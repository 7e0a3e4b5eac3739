#pragma once

#include "hotloop/cli/config.h"

#include <torch/nn/module.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace hotloop::cli {

/// The model section's keys for starting from weights made elsewhere.
struct InitFromConfig {
  /// model.init_from: a safetensors file, a PyTorch state_dict (.pt) or a
  /// hotloop checkpoint whose weights the model starts from; "": none.
  std::string path;
  /// model.init_strict: every entry of the model loaded and every tensor
  /// of the file used, or an error (false: what matches loads, the rest is
  /// listed).
  bool strict = true;
  /// model.init_skip: entries not to load (glob patterns, comma-separated:
  /// `fc` for a new classifier head).
  std::vector<std::string> skip;
  /// model.freeze: parameters trained no further (glob patterns,
  /// comma-separated: `conv1,bn1,layer1,layer2`).
  std::vector<std::string> freeze;
};

/// Adds model.init_from, model.init_strict, model.init_skip and
/// model.freeze to `schema` (fit_schema calls it).
void add_init_from_options(ConfigSchema& schema);

/// Reads them out of `config`; ConfigError for an empty pattern.
InitFromConfig read_init_from(const Config& config);

/// What apply_init_from loaded.
struct InitFromResult {
  /// Whether model.init_from named a file.
  bool loaded = false;
  /// A GPT-2 in Hugging Face's layout padded to the model's vocabulary:
  /// the file's vocabulary, which generation keeps to; 0 otherwise.
  int64_t file_vocab_size = 0;
};

/// Loads init.path into `module` (the command's task module, which holds
/// its network as `network`: the file's names and the patterns are the
/// network's own; a Hugging Face GPT-2
/// converted to hotloop's layout first), as strict as init.strict says,
/// prints the table of loaded, missing, unexpected, mismatched, skipped and
/// ignored entries to `out`, then freezes init.freeze. Does nothing when
/// neither is set. Throws Error naming the file.
InitFromResult apply_init_from(
    const InitFromConfig& init, torch::nn::Module& module, std::ostream& out);

} // namespace hotloop::cli
