#pragma once

#include "hotloop/interop/named_tensors.h"

#include <torch/arg.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace hotloop::interop {

/// What a weights file is, told by its content (not its name).
enum class WeightsFormat {
  /// safetensors: an 8-byte header length, then a JSON header.
  kSafetensors,
  /// A torch.save state_dict (PyTorch's zip with data.pkl).
  kTorch,
  /// A hotloop checkpoint (LibTorch's TorchScript archive).
  kCheckpoint,
};

/// "safetensors", "PyTorch state_dict", "hotloop checkpoint".
std::string to_string(WeightsFormat format);

/// The format of `path`; throws Error naming it when it is missing or none
/// of the three.
WeightsFormat detect_weights_format(const std::string& path);

/// The tensors of any of the three formats, by name: a safetensors file's
/// (SafetensorsFile, with its metadata), a state_dict's
/// (load_torch_state_dict), or the model of a hotloop checkpoint (verified
/// first; named as the checkpoint's module names them, such as
/// `network.fc.weight` for the command line's modules). Throws Error
/// naming the file.
NamedTensors read_weights(const std::string& path);

/// The module's parameters and buffers as Python's `Module.state_dict()`
/// orders and names them: each module's own parameters, then its own
/// buffers, then its children's, depth first. The tensors are the
/// module's own (detached, not copied).
NamedTensors state_dict(const torch::nn::Module& module);

/// How load_weights matches a file to a model.
struct LoadOptions {
  /// Every entry of the model must be loaded, and every tensor of the file
  /// used (except those `skip` names and the known buffers below), each of
  /// the model's shape: otherwise Error, and the model is left untouched.
  /// Not strict: what matches loads, the rest is reported.
  TORCH_ARG(bool, strict) = true;
  /// Model entries not to load, kept as initialised (a classifier head to
  /// learn again): glob patterns (`*`, `?`) over the model's names, a bare
  /// name also matching everything under it (`fc` is `fc.*`).
  TORCH_ARG(std::vector<std::string>, skip) = {};
  /// What the module's names have before the network's own, which the
  /// file's names and the `skip` patterns leave out: the command line's
  /// task modules hold their network as "network.". "": none.
  TORCH_ARG(std::string, model_prefix) = "";
};

/// What load_weights did, entry by entry.
struct LoadReport {
  /// An entry whose shape (or dtype: an integer tensor against a floating
  /// point one) differs.
  struct Mismatch {
    std::string name;
    std::vector<int64_t> file_shape;
    std::vector<int64_t> model_shape;
    at::ScalarType file_dtype = at::kFloat;
    at::ScalarType model_dtype = at::kFloat;
  };
  /// The file whose tensors were loaded.
  std::string source;
  /// How the file's names were mapped to the model's ("" when they match
  /// as they are), such as "'network.' added".
  std::string renamed;
  /// Model entries loaded.
  std::vector<std::string> loaded;
  /// Model entries the file lacks (kept as initialised).
  std::vector<std::string> missing;
  /// File tensors the model has no entry for.
  std::vector<std::string> unexpected;
  /// Entries of another shape (kept as initialised).
  std::vector<Mismatch> mismatched;
  /// Entries `skip` named (kept as initialised).
  std::vector<std::string> skipped;
  /// File tensors left out on purpose: nanoGPT's and Hugging Face's causal
  /// masks (`attn.bias` of rank 4, `attn.masked_bias`) and a
  /// `lm_head.weight` equal to the tied embedding the model already loads.
  std::vector<std::string> ignored;

  /// Everything of the model loaded, nothing of the file unused.
  bool complete() const {
    return missing.empty() && unexpected.empty() && mismatched.empty();
  }
  /// A table: one line per kind of entry with its count and names (the
  /// first few), and the shapes of mismatched entries.
  void print(std::ostream& out) const;
};

/// Copies the file's tensors into the module's parameters and buffers of
/// the same name (on the module's device and in its dtype: floating point
/// tensors are cast between float64, float32, float16 and bfloat16; other
/// dtypes must match). Names are matched as they are, or with a prefix
/// that all of the file's names share removed (`model.`, `module.`,
/// `_orig_mod.`, `network.`) and/or LoadOptions::model_prefix added,
/// whichever matches most; the report names entries without
/// model_prefix. Throws Error
/// naming `weights_source` and what does not match when `strict` and the
/// load is not complete (see LoadOptions), before changing anything.
LoadReport load_weights(
    torch::nn::Module& module,
    const NamedTensors& weights,
    const std::string& weights_source,
    const LoadOptions& options = {});

/// Stops gradients of the parameters whose names, `model_prefix` dropped
/// (as in LoadOptions), match one of the glob `patterns` (as
/// LoadOptions::skip matches); returns the names frozen, without the
/// prefix. Throws ConfigError naming a pattern that matches no parameter.
std::vector<std::string> freeze_parameters(
    torch::nn::Module& module,
    const std::vector<std::string>& patterns,
    const std::string& model_prefix = "");

/// Whether `name` matches the glob `pattern` as LoadOptions::skip says.
bool name_matches(const std::string& pattern, const std::string& name);

} // namespace hotloop::interop
