// `hotloop export`: a checkpoint's (or a run folder's) model as a
// safetensors file or a PyTorch state_dict, with the config that rebuilds
// it beside it.
#include "commands.h"

#include "hotloop/core/error.h"
#include "hotloop/interop/export.h"
#include "hotloop/interop/load_weights.h"
#include "hotloop/train/checkpoint.h"
#include "hotloop/version.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace hotloop::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kExportHelp =
    "usage: hotloop export CHECKPOINT|RUN_DIR [--output FILE] [--dtype "
    "bfloat16|float16]\n"
    "                      [--layout hotloop|hf-gpt2] [--vocab_size N]\n"
    "\n"
    "Writes the model of a checkpoint (of a run folder: its best checkpoint,\n"
    "else checkpoints/last.ckpt) as a file Python loads:\n"
    "  --output FILE    .safetensors (default: RUN_DIR/model.safetensors) or "
    ".pt\n"
    "                   (.pth, .bin): a state_dict for torch.load\n"
    "  --dtype          cast floating point weights to bfloat16 or float16\n"
    "  --layout         hotloop: the model's own names, its Python twin's\n"
    "                   (default); hf-gpt2: a GPT in Hugging Face's GPT-2 "
    "layout\n"
    "  --vocab_size N   hf-gpt2: keep the first N rows of the embedding "
    "(50257)\n"
    "The run's config goes into the safetensors metadata (hotloop.config) "
    "and,\nas JSON, into config.json beside the output.\n";

// The checkpoint a run folder's model is best read from.
std::string checkpoint_of_run(const fs::path& run) {
  std::ifstream summary(run / "summary.json");
  if (summary) {
    try {
      const nlohmann::json s = nlohmann::json::parse(summary);
      for (const char* key : {"best_checkpoint", "checkpoint"}) {
        if (s.contains(key) && s[key].is_string() &&
            fs::is_regular_file(s[key].get<std::string>())) {
          return s[key].get<std::string>();
        }
      }
    } catch (const nlohmann::json::exception&) {
    }
  }
  const fs::path last = run / "checkpoints" / "last.ckpt";
  HOTLOOP_CHECK(
      fs::is_regular_file(last),
      run.string(),
      ": a run folder without a checkpoint (no checkpoints/last.ckpt)");
  return last.string();
}

// {"model": {"name": "gpt", ...}, ...} from the flat dotted keys.
nlohmann::json nested(const std::map<std::string, std::string>& flat) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, value] : flat) {
    nlohmann::json* at = &out;
    size_t start = 0;
    for (size_t dot = key.find('.'); dot != std::string::npos;
         start = dot + 1, dot = key.find('.', start)) {
      at = &(*at)[key.substr(start, dot - start)];
    }
    (*at)[key.substr(start)] = value;
  }
  return out;
}

} // namespace

int run_export(const std::vector<std::string>& args, std::ostream& out) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    out << kExportHelp;
    return 0;
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      !args.empty() && args[0].rfind("--", 0) != 0,
      "hotloop export needs a checkpoint or a run folder: hotloop export "
      "CHECKPOINT|RUN_DIR [--output FILE]");
  std::map<std::string, std::string> flags;
  for (size_t i = 1; i < args.size(); ++i) {
    std::string flag = args[i];
    std::string value;
    HOTLOOP_CHECK_AS(
        ConfigError,
        flag.rfind("--", 0) == 0,
        "hotloop export: unexpected argument '",
        flag,
        "'");
    flag = flag.substr(2);
    if (const size_t eq = flag.find('='); eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    } else {
      HOTLOOP_CHECK_AS(
          ConfigError, i + 1 < args.size(), "--", flag, " needs a value");
      value = args[++i];
    }
    HOTLOOP_CHECK_AS(
        ConfigError,
        flag == "output" || flag == "dtype" || flag == "layout" ||
            flag == "vocab_size",
        "hotloop export: unknown option --",
        flag,
        " (expected --output, --dtype, --layout, --vocab_size)");
    flags[flag] = value;
  }
  const fs::path input(args[0]);
  std::error_code ec;
  const bool run_folder = fs::is_directory(input, ec);
  const std::string ckpt =
      run_folder ? checkpoint_of_run(input) : input.string();
  // The run folder: the given one, or the one whose checkpoints/ holds it.
  const fs::path run = run_folder ? input
                       : input.parent_path().filename() == "checkpoints"
                           ? input.parent_path().parent_path()
                           : fs::path();
  const std::string output =
      flags.count("output")
          ? flags.at("output")
          : ((run.empty() ? input.parent_path() : run) / "model.safetensors")
                .string();
  int64_t vocab_size = 0;
  if (flags.count("vocab_size")) {
    const std::string& text = flags.at("vocab_size");
    HOTLOOP_CHECK_AS(
        ConfigError,
        !text.empty() && text.size() < 12 &&
            text.find_first_not_of("0123456789") == std::string::npos,
        "--vocab_size: expected a number of tokens, got '",
        text,
        "'");
    vocab_size = std::stoll(text);
  }
  interop::ExportOptions options;
  options.dtype(flags.count("dtype") ? flags.at("dtype") : "")
      .layout(flags.count("layout") ? flags.at("layout") : "hotloop")
      .vocab_size(vocab_size);
  interop::export_format(output); // before anything is read
  prepare_output(output, "output");

  HOTLOOP_CHECK(
      interop::detect_weights_format(ckpt) ==
          interop::WeightsFormat::kCheckpoint,
      ckpt,
      ": not a hotloop checkpoint (export writes a checkpoint's model)");
  interop::NamedTensors weights = interop::read_weights(ckpt);
  // The command line's modules hold the network as `network`: its names
  // are the Python twin's below it.
  const std::string prefix = "network.";
  bool prefixed = !weights.tensors.empty();
  for (const auto& [name, tensor] : weights.tensors) {
    prefixed = prefixed && name.rfind(prefix, 0) == 0;
  }
  if (prefixed) {
    for (auto& [name, tensor] : weights.tensors) {
      name = name.substr(prefix.size());
    }
  }
  std::string yaml;
  nlohmann::json config = nlohmann::json::object();
  if (!run.empty() && fs::is_regular_file(run / "config.yaml")) {
    std::ifstream in(run / "config.yaml");
    std::stringstream text;
    text << in.rdbuf();
    yaml = text.str();
    Config parsed(fit_schema());
    parsed.merge_yaml_string(yaml, (run / "config.yaml").string());
    config = nested(parsed.flat());
  }
  std::map<std::string, std::string> metadata = {
      {"hotloop.version", HOTLOOP_VERSION},
      {"hotloop.source", fs::path(ckpt).filename().string()}};
  if (!yaml.empty()) {
    metadata["hotloop.config"] = yaml;
  }
  options.metadata(metadata);
  // The output's folder, as save_pretrained makes its own, once the input
  // has been read.
  if (const fs::path parent = fs::path(output).parent_path(); !parent.empty()) {
    fs::create_directories(parent);
  }
  const interop::NamedTensors written =
      interop::export_weights(std::move(weights), output, options);
  nlohmann::json json = nlohmann::json::object();
  json["hotloop_version"] = HOTLOOP_VERSION;
  json["source"] = ckpt;
  json["layout"] = options.layout();
  json["config"] = config;
  if (options.layout() == "hf-gpt2") {
    // transformers' GPT2Config for these weights; the activation is the
    // exact GELU hotloop's (and nanoGPT's) GPT computes, where GPT-2's own
    // is gelu_new.
    const at::Tensor& wte = *written.find("wte.weight");
    const at::Tensor& wpe = *written.find("wpe.weight");
    int64_t layers = 0;
    while (written.find("h." + std::to_string(layers) + ".ln_1.weight") !=
           nullptr) {
      ++layers;
    }
    json["model_type"] = "gpt2";
    json["architectures"] = {"GPT2LMHeadModel"};
    json["vocab_size"] = wte.size(0);
    json["n_embd"] = wte.size(1);
    json["n_positions"] = wpe.size(0);
    json["n_ctx"] = wpe.size(0);
    json["n_layer"] = layers;
    if (config.contains("model") && config["model"].contains("n_head")) {
      json["n_head"] = std::stoll(config["model"]["n_head"].get<std::string>());
    }
    json["activation_function"] = "gelu";
    json["tie_word_embeddings"] = true;
  }
  const fs::path json_path = fs::path(output).parent_path() / "config.json";
  train::write_file_atomically(json_path.string(), [&](std::ostream& file) {
    file << json.dump(2) << "\n";
  });
  int64_t values = 0;
  for (const auto& [name, tensor] : written.tensors) {
    values += tensor.numel();
  }
  out << "export: " << written.size() << " tensors (" << values
      << " values) of " << ckpt << " written to " << output << " ("
      << interop::export_format(output) << ", " << options.layout()
      << " layout); config in " << json_path.string() << "\n";
  return 0;
}

} // namespace hotloop::cli
