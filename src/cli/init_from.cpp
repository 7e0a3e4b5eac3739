#include "hotloop/cli/init_from.h"

#include "hotloop/core/error.h"
#include "hotloop/interop/gpt2_layout.h"
#include "hotloop/interop/load_weights.h"

#include <ATen/ATen.h>

namespace hotloop::cli {
namespace {

std::vector<std::string> patterns(
    const Config& config, const std::string& key) {
  std::vector<std::string> out;
  const std::string text = config.get_string(key);
  size_t start = 0;
  while (start < text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    std::string item = text.substr(start, comma - start);
    const size_t first = item.find_first_not_of(' ');
    item = first == std::string::npos
               ? ""
               : item.substr(first, item.find_last_not_of(' ') - first + 1);
    HOTLOOP_CHECK_AS(
        ConfigError,
        !item.empty(),
        key,
        ": an empty pattern in '",
        text,
        "' (expected names or globs separated by commas)");
    out.push_back(item);
    start = comma + 1;
  }
  return out;
}

} // namespace

void add_init_from_options(ConfigSchema& schema) {
  const auto add = [&](const char* key,
                       OptionType type,
                       const char* value,
                       const char* help) {
    OptionSpec spec;
    spec.key = key;
    spec.type = type;
    spec.default_value = value;
    spec.help = help;
    schema.add(spec);
  };
  add("model.init_from",
      OptionType::kString,
      "",
      "start from these weights: a .safetensors file, a PyTorch state_dict "
      "(torch.save) or a hotloop checkpoint; a Hugging Face GPT-2 is "
      "converted");
  add("model.init_strict",
      OptionType::kBool,
      "true",
      "model.init_from must fill every entry of the model and use every "
      "tensor of the file (false: load what matches, list the rest)");
  add("model.init_skip",
      OptionType::kString,
      "",
      "entries not loaded from model.init_from, comma-separated globs "
      "(fc: a new classifier head)");
  add("model.freeze",
      OptionType::kString,
      "",
      "parameters not trained, comma-separated globs over their names "
      "(conv1,bn1,layer1)");
}

InitFromConfig read_init_from(const Config& config) {
  InitFromConfig init;
  init.path = config.get_string("model.init_from");
  init.strict = config.get_bool("model.init_strict");
  init.skip = patterns(config, "model.init_skip");
  init.freeze = patterns(config, "model.freeze");
  return init;
}

InitFromResult apply_init_from(
    const InitFromConfig& init, torch::nn::Module& module, std::ostream& out) {
  InitFromResult result;
  if (!init.path.empty()) {
    interop::NamedTensors weights = interop::read_weights(init.path);
    const interop::NamedTensors model = interop::state_dict(module);
    std::string source = init.path;
    // The model's vocabulary: its embedding's rows, whatever its prefix.
    int64_t vocab = 0;
    if (interop::is_hf_gpt2(weights)) {
      for (const auto& [name, tensor] : model.tensors) {
        const std::string suffix = "transformer.wte.weight";
        if (name.size() >= suffix.size() &&
            name.compare(name.size() - suffix.size(), suffix.size(), suffix) ==
                0) {
          vocab = tensor.size(0);
        }
      }
      for (const char* wte : {"wte.weight", "transformer.wte.weight"}) {
        if (const at::Tensor* t = weights.find(wte)) {
          result.file_vocab_size = t->size(0) < vocab ? t->size(0) : 0;
        }
      }
      weights = interop::from_hf_gpt2(weights, vocab, init.path);
      source += " (Hugging Face GPT-2 layout)";
    }
    interop::LoadReport report = interop::load_weights(
        module,
        weights,
        init.path,
        interop::LoadOptions()
            .strict(init.strict)
            .skip(init.skip)
            .model_prefix("network."));
    report.source = source;
    report.print(out);
    if (result.file_vocab_size > 0) {
      out << "  padded         wte rows " << result.file_vocab_size << " to "
          << vocab << " with zeros; generation keeps to the file's "
          << result.file_vocab_size << " tokens\n";
    }
    result.loaded = true;
  }
  if (!init.freeze.empty()) {
    const std::vector<std::string> frozen =
        interop::freeze_parameters(module, init.freeze, "network.");
    int64_t numel = 0;
    for (const auto& p : module.named_parameters()) {
      numel += p.value().requires_grad() ? 0 : p.value().numel();
    }
    out << "freeze: " << frozen.size() << " parameters (" << numel
        << " values) trained no further\n";
  }
  return result;
}

} // namespace hotloop::cli
