#include "commands.h"

#include "hotloop/cli/init_from.h"
#include "hotloop/compress/quantized_engine.h"
#include "hotloop/compress/quantized_gpt.h"
#include "hotloop/compress/quantized_net.h"
#include "hotloop/core/error.h"
#include "hotloop/models/gpt.h"
#include "hotloop/models/gpt_generate.h"
#include "hotloop/train/checkpoint.h"
#include "hotloop/train/device.h"
#include "hotloop/train/language_model.h"
#include "hotloop/train/trainer.h"

#include <ATen/ATen.h>

#include <chrono>
#include <cstdlib>
#include <iomanip>
#include <sstream>
#include <vector>

namespace hotloop::cli {

const char* const kGenerateFlags[] = {
    "ckpt_path",
    "prompt",
    "max_new_tokens",
    "temperature",
    "top_k",
    "seed",
    "num_samples",
    "kv_cache",
    nullptr};

namespace {

// --flag, --flag=true or --flag=false.
bool bool_flag(const ParsedArgs& args, const std::string& flag, bool fallback) {
  const auto it = args.extra.find(flag);
  if (it == args.extra.end()) {
    return fallback;
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      it->second.empty() || it->second == "true" || it->second == "false",
      "--",
      flag,
      ": expected true or false, got '",
      it->second,
      "'");
  return it->second != "false";
}

// Byte-level vocabularies (data.token_bytes=1) take the prompt's bytes;
// token files take it as token ids separated by spaces or commas.
std::vector<int64_t> prompt_tokens(
    const std::string& prompt, const FitConfig& config) {
  std::vector<int64_t> ids;
  if (config.data.token_bytes == 1) {
    for (const char c : prompt) {
      ids.push_back(static_cast<unsigned char>(c));
    }
  } else {
    std::string text = prompt;
    for (char& c : text) {
      c = c == ',' ? ' ' : c;
    }
    std::istringstream in(text);
    int64_t id = 0;
    while (in >> id) {
      ids.push_back(id);
    }
    HOTLOOP_CHECK_AS(
        ConfigError,
        in.eof() && !ids.empty(),
        "--prompt: with data.token_bytes=",
        config.data.token_bytes,
        " the prompt is token ids (for example --prompt '50256 464'), got '",
        prompt,
        "'");
  }
  HOTLOOP_CHECK_AS(
      ConfigError, !ids.empty(), "--prompt: the prompt must not be empty");
  for (const int64_t id : ids) {
    HOTLOOP_CHECK_AS(
        ConfigError,
        id >= 0 && id < config.gpt.vocab_size(),
        "--prompt: token id ",
        id,
        " is outside the vocabulary [0, ",
        config.gpt.vocab_size(),
        ")");
  }
  return ids;
}

// Bytes as text; token ids as a space-separated line.
void write_tokens(
    std::ostream& out, const at::Tensor& tokens, const FitConfig& config) {
  const at::Tensor cpu = tokens.cpu();
  const auto* ids = cpu.data_ptr<int64_t>();
  for (int64_t i = 0; i < cpu.numel(); ++i) {
    if (config.data.token_bytes == 1) {
      out << static_cast<char>(ids[i]);
    } else {
      out << (i > 0 ? " " : "") << ids[i];
    }
  }
}

} // namespace

int run_generate(const ParsedArgs& args, std::ostream& out, std::ostream& err) {
  const FitConfig config = one_process_config(args.config, "generate", err);
  // Threads and memory as a fit or test of the same config has them.
  train::apply_host_settings(config.trainer, /*num_workers=*/0);
  HOTLOOP_CHECK_AS(
      ConfigError,
      args.extra.count("ckpt_path") || !config.init_from.path.empty(),
      "hotloop generate needs --ckpt_path PATH (or last), or "
      "--model.init_from=FILE");
  HOTLOOP_CHECK_AS(
      ConfigError,
      config.model_name == "gpt",
      "hotloop generate samples from a GPT: it needs model.name=gpt, not ",
      config.model_name);
  auto options =
      models::GenerateOptions()
          .max_new_tokens(number_flag<int64_t>(args, "max_new_tokens", 500))
          .temperature(number_flag<double>(args, "temperature", 0.8))
          .top_k(number_flag<int64_t>(args, "top_k", 200))
          .seed(number_flag<uint64_t>(args, "seed", 1337))
          .kv_cache(bool_flag(args, "kv_cache", true));
  const int64_t samples = number_flag<int64_t>(args, "num_samples", 1);
  HOTLOOP_CHECK_AS(
      ConfigError,
      samples >= 1,
      "--num_samples must be at least 1, got ",
      samples);
  const std::vector<int64_t> prompt = prompt_tokens(
      args.extra.count("prompt") ? args.extra.at("prompt") : "\n", config);

  models::Gpt gpt(config.gpt);
  train::LanguageModel module(
      torch::nn::AnyModule(gpt), config.optimizer, config.scheduler);
  // The table goes to stderr with the timing: stdout is the text.
  const InitFromResult init = apply_init_from(config.init_from, module, err);
  if (init.file_vocab_size > 0) {
    options.vocab_limit(init.file_vocab_size);
  }
  const c10::Device device = train::resolve_device(
      config.trainer.accelerator(), config.trainer.devices());
  if (args.extra.count("ckpt_path")) {
    const std::string path =
        resolve_ckpt_path(args.extra.at("ckpt_path"), config);
    // hotloop quantize --mode dynamic's file: the GPT with int8 Linear
    // layers, on the CPU.
    if (compress::is_quantized_checkpoint(path)) {
      require_cpu_for_int8(device, path);
      compress::select_quantized_engine("auto");
      compress::load_quantized(path, *gpt);
    } else {
      train::load_checkpoint(path, module);
    }
  }
  module.to(device);

  int64_t generated = 0;
  double seconds = 0;
  for (int64_t s = 0; s < samples; ++s) {
    const at::Tensor idx =
        at::tensor(prompt, at::kLong).view({1, -1}).to(device);
    const auto start = std::chrono::steady_clock::now();
    // Sample k draws from seed + k, so that each can be had alone.
    models::GenerateOptions sample = options;
    sample.seed(options.seed() + static_cast<uint64_t>(s));
    const at::Tensor tokens = models::generate(*gpt, idx, sample);
    seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    generated += options.max_new_tokens();
    write_tokens(out, tokens.select(0, 0), config);
    out << "\n---------------\n";
  }
  err << std::fixed << std::setprecision(1) << "generate: " << generated
      << " tokens in " << std::setprecision(2) << seconds << " s, "
      << std::setprecision(0) << (seconds > 0 ? generated / seconds : 0.0)
      << " tokens/s (" << (options.kv_cache() ? "KV cache" : "no KV cache")
      << ", " << device << ")\n";
  return 0;
}

} // namespace hotloop::cli
