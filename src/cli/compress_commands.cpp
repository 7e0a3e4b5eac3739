// hotloop quantize and hotloop shrink: a trained checkpoint made smaller or
// faster; and the int8 module that test and predict run for an int8
// checkpoint.

#include "commands.h"

#include "hotloop/cli/session.h"
#include "hotloop/cli/trained_data.h"
#include "hotloop/compress/qat.h"
#include "hotloop/compress/quantization_aware_training.h"
#include "hotloop/compress/quantize.h"
#include "hotloop/compress/quantized_engine.h"
#include "hotloop/compress/quantized_gpt.h"
#include "hotloop/compress/quantized_net.h"
#include "hotloop/compress/shrink.h"
#include "hotloop/core/error.h"
#include "hotloop/data/dataloader.h"
#include "hotloop/models/gpt.h"
#include "hotloop/models/gpt_generate.h"
#include "hotloop/train/checkpoint.h"
#include "hotloop/train/classifier.h"
#include "hotloop/train/device.h"
#include "hotloop/train/language_model.h"
#include "hotloop/train/network_module.h"
#include "hotloop/train/trainer.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <iomanip>

namespace hotloop::cli {

const char* const kQuantizeFlags[] = {
    "output", "mode", "calibration_batches", "engine", "observer", nullptr};
const char* const kShrinkFlags[] = {"output", nullptr};

namespace {

namespace fs = std::filesystem;

// The network inside the session's task module (NetworkModule's child).
std::shared_ptr<torch::nn::Module> network_of(train::Module& module) {
  for (const auto& item : module.named_children()) {
    if (item.key() == "network") {
      return item.value();
    }
  }
  throw ConfigError("this model has no network to compress");
}

std::string flag(
    const ParsedArgs& args,
    const std::string& name,
    const std::string& fallback) {
  const auto it = args.extra.find(name);
  return it == args.extra.end() ? fallback : it->second;
}

// The callback states of the float checkpoint that the compressed one keeps
// (the CLI's TrainedData, under "data").
std::string kept_states(const std::string& ckpt_path) {
  const std::optional<TrainedData> trained = read_trained_data(ckpt_path);
  if (!trained) {
    return "";
  }
  return nlohmann::json{{"data", TrainedDataCallback(*trained).state_dict()}}
      .dump();
}

// What a model is judged by over a batch: the sum over its units (samples,
// tokens) of something per unit (correct predictions, a loss).
using Measure = std::function<double(const data::Batch&)>;
using Units = std::function<int64_t(const data::Batch&)>;

struct Evaluation {
  double mean = 0;        ///< per unit, over the loader
  double units_per_s = 0; ///< inference speed, the median of the passes
};

// Two models (or more) compared over `passes` walks of `loader`, their
// turns interleaved batch by batch so that the machine's moods fall on
// them alike: each one's mean per unit of its measure (the first pass), and
// the median over the passes of its units per second (the first batch of
// the first pass a warm-up, timed only where it is the only batch).
std::vector<Evaluation> compare(
    const std::vector<Measure>& models,
    const Units& units,
    data::DataLoader& loader,
    int passes = 3) {
  using Clock = std::chrono::steady_clock;
  const c10::InferenceMode inference;
  const size_t n = models.size();
  std::vector<double> sums(n, 0);
  std::vector<std::vector<double>> rates(n);
  int64_t counted = 0;
  for (int pass = 0; pass < passes; ++pass) {
    std::vector<double> seconds(n, 0);
    int64_t timed = 0;
    bool first = pass == 0;
    for (const data::Batch& batch : loader) {
      for (size_t m = 0; m < n; ++m) {
        const auto start = Clock::now();
        const double value = models[m](batch);
        if (!first) {
          seconds[m] +=
              std::chrono::duration<double>(Clock::now() - start).count();
        }
        if (pass == 0) {
          sums[m] += value;
        }
      }
      if (pass == 0) {
        counted += units(batch);
      }
      timed += first ? 0 : units(batch);
      first = false;
    }
    for (size_t m = 0; m < n && timed > 0; ++m) {
      rates[m].push_back(
          seconds[m] > 0 ? static_cast<double>(timed) / seconds[m] : 0);
    }
  }
  std::vector<Evaluation> results(n);
  for (size_t m = 0; m < n; ++m) {
    results[m].mean = counted > 0 ? sums[m] / static_cast<double>(counted) : 0;
    std::sort(rates[m].begin(), rates[m].end());
    results[m].units_per_s =
        rates[m].empty() ? 0 : rates[m][rates[m].size() / 2];
  }
  return results;
}

// A classifier's correct predictions, one unit a sample.
Measure correct(const std::function<at::Tensor(const at::Tensor&)>& forward) {
  return [forward](const data::Batch& batch) {
    return static_cast<double>(
        (forward(batch.input).argmax(1) == batch.target).sum().item<int64_t>());
  };
}
int64_t samples(const data::Batch& batch) {
  return batch.input.size(0);
}

// A GPT's summed next-token loss, one unit a token.
Measure summed_loss(models::GptImpl& gpt) {
  return [&gpt](const data::Batch& batch) {
    return gpt.token_loss(batch.input, batch.target).item<double>() *
           static_cast<double>(batch.input.numel());
  };
}
int64_t tokens(const data::Batch& batch) {
  return batch.input.numel();
}

// Tokens per second of models::generate for each model: 32 new tokens
// after a one-token prompt, the models' turns interleaved, the median of 3.
std::vector<double> generation_rates(
    const std::vector<models::GptImpl*>& models) {
  using Clock = std::chrono::steady_clock;
  const c10::InferenceMode inference;
  const int64_t new_tokens =
      std::min<int64_t>(32, models.front()->options().block_size() - 1);
  const at::Tensor prompt = at::zeros({1, 1}, at::kLong);
  std::vector<std::vector<double>> rates(models.size());
  for (int pass = 0; pass < 4; ++pass) {
    for (size_t m = 0; m < models.size(); ++m) {
      const auto start = Clock::now();
      models::generate(
          *models[m],
          prompt,
          models::GenerateOptions().max_new_tokens(new_tokens).seed(pass));
      const double s =
          std::chrono::duration<double>(Clock::now() - start).count();
      if (pass > 0) { // the first a warm-up
        rates[m].push_back(static_cast<double>(new_tokens) / s);
      }
    }
  }
  std::vector<double> medians;
  for (auto& r : rates) {
    std::sort(r.begin(), r.end());
    medians.push_back(r[r.size() / 2]);
  }
  return medians;
}

// A warning where the int8 model is the slower at `what` ("infers",
// "generates"); nothing where a speed is unknown (0).
void warn_if_slower(
    std::ostream& out,
    const char* what,
    double int8_rate,
    double float_rate,
    const char* keep_for) {
  if (int8_rate <= 0 || float_rate <= 0 || int8_rate >= float_rate) {
    return;
  }
  out << "warning: the int8 model " << what
      << " slower than the float one on this machine (" << std::fixed
      << std::setprecision(2) << int8_rate / float_rate
      << "x): keep the float model for " << keep_for << std::defaultfloat
      << "\n";
}

// "<a>: <metric> x, N <unit>/s; <b>: <metric> y, M <unit>/s (M/N x)", then
// `extra`, and with `warn` a warning where b is the slower.
void print_comparison(
    std::ostream& out,
    const char* a,
    const char* b,
    const char* metric,
    const char* unit,
    const std::vector<Evaluation>& e,
    const std::string& extra,
    bool warn) {
  const double ratio =
      e[0].units_per_s > 0 ? e[1].units_per_s / e[0].units_per_s : 0;
  out << std::fixed << std::setprecision(4) << a << ": " << metric << " "
      << e[0].mean << ", " << std::setprecision(0) << e[0].units_per_s << " "
      << unit << "/s; " << b << ": " << metric << " " << std::setprecision(4)
      << e[1].mean << ", " << std::setprecision(0) << e[1].units_per_s << " "
      << unit << "/s (" << std::setprecision(2) << ratio << "x)" << extra
      << "\n"
      << std::defaultfloat;
  if (warn) {
    warn_if_slower(out, "infers", e[1].units_per_s, e[0].units_per_s, "speed");
  }
}

// hotloop quantize --mode dynamic of a GPT: an int8 copy (its Linear layers
// int8), the float and int8 models' validation loss, tokens/s and
// generation speed side by side.
int quantize_gpt(
    const ParsedArgs& args,
    const FitConfig& config,
    Session& session,
    models::GptImpl& gpt,
    const std::string& ckpt_path,
    const std::string& output,
    std::ostream& out) {
  data::DataLoader val_loader(
      session.val_set, loader_options(config, session, false));
  // The int8 model is a copy, so that both run side by side.
  models::Gpt int8 =
      compress::quantize_dynamic(gpt, flag(args, "engine", "auto"));
  const std::string engine = compress::quantized_engine();
  out << "quantize: dynamic int8 (the GPT's Linear layers, lm_head "
         "included) on the "
      << engine << " engine\n";
  const std::vector<Evaluation> e =
      compare({summed_loss(gpt), summed_loss(*int8)}, tokens, val_loader);
  compress::save_quantized(output, *int8, kept_states(ckpt_path));
  print_comparison(
      out,
      "fp32",
      "int8",
      "val_loss",
      "tokens",
      e,
      "; weights " + std::to_string(compress::stored_bytes(*int8) / 1024) +
          " KB, float " + std::to_string(compress::stored_bytes(gpt) / 1024) +
          " KB",
      /*warn=*/true);
  // Generation feeds one token at a time: int8 kernels that win on
  // batches can lose there (each call quantizes a single row).
  const std::vector<double> rates = generation_rates({&gpt, int8.get()});
  out << std::fixed << std::setprecision(0) << "generate (one sequence, KV "
      << "cache): fp32 " << rates[0] << " tokens/s; int8 " << rates[1]
      << " tokens/s (" << std::setprecision(2)
      << rates[1] / std::max(rates[0], 1e-9) << "x)\n"
      << std::defaultfloat;
  warn_if_slower(out, "generates", rates[1], rates[0], "hotloop generate");
  out << "wrote " << output << " (" << fs::file_size(output)
      << " bytes; the float checkpoint " << fs::file_size(ckpt_path)
      << "); hotloop test or generate --ckpt_path " << output << " runs it\n";
  return 0;
}

// The checkpoint loaded into the session's module, in eval mode; the
// process set up as the Trainer sets it (threads, memory), so that the
// timings are those test and fit would see.
Session loaded_session(
    const FitConfig& config, const std::string& ckpt_path, bool with_train) {
  train::apply_host_settings(config.trainer, config.data.num_workers);
  const std::optional<TrainedData> trained = read_trained_data(ckpt_path);
  Session session =
      build_session(config, with_train, trained ? &*trained : nullptr);
  // A QAT run's checkpoint holds the QAT network.
  prepare_quantization(config, session);
  train::load_checkpoint(ckpt_path, *session.module);
  session.module->eval();
  return session;
}

std::string require_ckpt(const ParsedArgs& args, const char* command) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      args.extra.count("ckpt_path"),
      "hotloop ",
      command,
      " needs --ckpt_path PATH (or last): the trained model to compress");
  return args.extra.at("ckpt_path");
}

} // namespace

int run_quantize(const ParsedArgs& args, std::ostream& out) {
  FitConfig config = one_process_config(args.config, "quantize", out);
  const std::string ckpt_path =
      resolve_ckpt_path(require_ckpt(args, "quantize"), config);
  const std::string mode = flag(args, "mode", "static");
  HOTLOOP_CHECK_AS(
      ConfigError,
      mode == "static" || mode == "dynamic",
      "--mode: expected static or dynamic, got '",
      mode,
      "'");
  HOTLOOP_CHECK_AS(
      ConfigError,
      config.model_name != "gpt" || mode == "dynamic",
      "hotloop quantize: a GPT quantizes dynamically (--mode=dynamic: its "
      "Linear layers int8); static int8 needs quantized attention, "
      "LayerNorm and GELU kernels, which hotloop does not have");
  const auto batches =
      number_flag<int64_t>(args, "calibration_batches", 32, 1, 1000000);
  const std::string output = flag(
      args,
      "output",
      (fs::path(ckpt_path).parent_path() /
       (fs::path(ckpt_path).stem().string() + ".int8.ckpt"))
          .string());
  prepare_output(output, "output");
  Session session = loaded_session(config, ckpt_path, mode == "static");
  std::shared_ptr<torch::nn::Module> network = network_of(*session.module);
  network->eval();
  if (auto* gpt = dynamic_cast<models::GptImpl*>(network.get())) {
    return quantize_gpt(args, config, session, *gpt, ckpt_path, output, out);
  }
  compress::QuantizedNet net{nullptr};
  if (auto* qat = dynamic_cast<compress::QatNetImpl*>(network.get())) {
    HOTLOOP_CHECK_AS(
        ConfigError,
        mode == "static",
        ckpt_path,
        ": a quantization-aware checkpoint converts to static int8, not "
        "--mode=",
        mode);
    net = compress::convert_qat(*qat);
    out << "quantize: the quantization-aware model converted to int8 on the "
        << net->engine() << " engine (its observers' scales, no "
        << "calibration)\n";
  } else if (mode == "static") {
    data::DataLoader train_loader(
        session.train_set, loader_options(config, session, true));
    std::vector<at::Tensor> calibration;
    for (const data::Batch& batch : train_loader) {
      if (static_cast<int64_t>(calibration.size()) == batches) {
        break;
      }
      calibration.push_back(batch.input.clone());
    }
    net = compress::quantize_static(
        *network,
        calibration,
        compress::StaticQuantizationOptions()
            .engine(flag(args, "engine", "auto"))
            .observer(flag(args, "observer", "minmax")));
    out << "quantize: static int8 on the " << net->engine()
        << " engine, calibrated on " << calibration.size()
        << " training batches\n";
  } else {
    net = compress::quantize_dynamic(*network, flag(args, "engine", "auto"));
    out << "quantize: dynamic int8 (Linear layers) on the " << net->engine()
        << " engine\n";
  }
  data::DataLoader val_loader(
      session.val_set, loader_options(config, session, false));
  const std::vector<Evaluation> e = compare(
      {correct([&](const at::Tensor& x) {
         return session.module->predict_step({x, {}}, 0);
       }),
       correct([&](const at::Tensor& x) { return net->forward(x); })},
      samples,
      val_loader);
  compress::save_quantized(output, *net, kept_states(ckpt_path));
  print_comparison(
      out, "fp32", "int8", "val_acc", "samples", e, "", /*warn=*/true);
  out << "wrote " << output << " (" << fs::file_size(output)
      << " bytes; the float checkpoint " << fs::file_size(ckpt_path)
      << "); hotloop test --ckpt_path " << output << " runs it\n";
  return 0;
}

int run_shrink(const ParsedArgs& args, std::ostream& out) {
  FitConfig config = one_process_config(args.config, "shrink", out);
  const std::string ckpt_path =
      resolve_ckpt_path(require_ckpt(args, "shrink"), config);
  const std::string output = flag(
      args,
      "output",
      (fs::path(ckpt_path).parent_path() /
       (fs::path(ckpt_path).stem().string() + ".shrunk.ckpt"))
          .string());
  prepare_output(output, "output");
  Session session = loaded_session(config, ckpt_path, false);
  std::shared_ptr<torch::nn::Module> network = network_of(*session.module);
  compress::ShrinkReport report;
  torch::nn::AnyModule shrunk;
  std::string options;
  if (auto* cnn = network->as<models::FashionCnn>()) {
    models::FashionCnn small = compress::shrink(*cnn, &report);
    options = "--model.channels=[";
    for (size_t i = 0; i < small->options().channels.size(); ++i) {
      options +=
          (i > 0 ? ", " : "") + std::to_string(small->options().channels[i]);
    }
    options += "] --model.hidden=" + std::to_string(small->options().hidden);
    shrunk = torch::nn::AnyModule(small);
  } else if (auto* mlp = network->as<models::Mlp>()) {
    models::Mlp small = compress::shrink(*mlp, &report);
    options = "--model.mlp_hidden=[";
    for (size_t i = 0; i < small->options().hidden().size(); ++i) {
      options +=
          (i > 0 ? ", " : "") + std::to_string(small->options().hidden()[i]);
    }
    options += "]";
    shrunk = torch::nn::AnyModule(small);
  } else {
    throw ConfigError(hotloop::detail::str_cat(
        "hotloop shrink: cannot shrink model.name=",
        config.model_name,
        " (it shrinks fashion_cnn and mlp)"));
  }
  auto module = std::make_shared<train::ImageClassifier>(
      shrunk, config.optimizer, config.scheduler, config.top_k);
  train::CheckpointState state;
  state.callbacks = kept_states(ckpt_path);
  train::save_checkpoint(output, *module, state);
  data::DataLoader val_loader(
      session.val_set, loader_options(config, session, false));
  module->eval();
  const std::vector<Evaluation> e = compare(
      {correct([&](const at::Tensor& x) {
         return session.module->predict_step({x, {}}, 0);
       }),
       correct([&](const at::Tensor& x) {
         return module->predict_step({x, {}}, 0);
       })},
      samples,
      val_loader);
  out << "shrink: " << report.describe() << "\n";
  print_comparison(
      out, "before", "after", "val_acc", "samples", e, "", /*warn=*/false);
  out << "wrote " << output << "; use it with the run's config and " << options
      << "\n";
  return 0;
}

void require_cpu_for_int8(
    const c10::Device& device, const std::string& ckpt_path) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      device.is_cpu(),
      ckpt_path,
      ": an int8 model runs on the CPU, not ",
      device,
      " (--trainer.accelerator=cpu)");
}

std::shared_ptr<train::Module> int8_module(
    const FitConfig& config, const std::string& ckpt_path) {
  // The quantized kernels are LibTorch's CPU ones, in float32.
  const std::string& precision = config.trainer.precision();
  HOTLOOP_CHECK_AS(
      ConfigError,
      precision == "32-true" || precision == "32",
      ckpt_path,
      ": an int8 model runs in float32 around its int8 layers, not "
      "trainer.precision=",
      precision,
      " (--trainer.precision=32-true)");
  require_cpu_for_int8(
      train::resolve_device(
          config.trainer.accelerator(), config.trainer.devices()),
      ckpt_path);
  compress::select_quantized_engine("auto");
  if (config.model_name == "gpt") {
    models::Gpt gpt(config.gpt);
    compress::load_quantized(ckpt_path, *gpt);
    return std::make_shared<train::LanguageModel>(
        torch::nn::AnyModule(gpt), config.optimizer, config.scheduler);
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      config.task == "classification",
      ckpt_path,
      ": an int8 checkpoint runs classifiers here, not model.task=",
      config.task);
  compress::QuantizedNet net = compress::load_quantized(ckpt_path);
  return std::make_shared<train::ImageClassifier>(
      torch::nn::AnyModule(net),
      config.optimizer,
      config.scheduler,
      config.top_k);
}

void prepare_quantization(const FitConfig& config, Session& session) {
  if (!config.quantization) {
    return;
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      config.task == "classification",
      "quantization.qat trains classifiers here, not model.task=",
      config.task);
  const std::string& precision = config.trainer.precision();
  HOTLOOP_CHECK_AS(
      ConfigError,
      precision == "32-true" || precision == "32",
      "quantization.qat trains in float32 (the fake quantizers observe "
      "float32 ranges): set trainer.precision=32-true, not ",
      precision);
  auto* module = dynamic_cast<train::NetworkModule*>(session.module.get());
  HOTLOOP_CHECK_AS(
      ConfigError,
      module != nullptr,
      "quantization.qat: this model has no network to prepare");
  compress::QatNet net =
      compress::prepare_qat(*module->network(), config.quantization->qat);
  auto classifier = std::make_shared<train::ImageClassifier>(
      torch::nn::AnyModule(net),
      config.optimizer,
      config.scheduler,
      classifier_options(config));
  classifier->set_flops_per_sample(module->flops_per_sample());
  session.module = classifier;
}

void add_quantization_callback(
    train::Trainer& trainer,
    const FitConfig& config,
    const Session& session,
    const std::string& run_dir) {
  if (!config.quantization) {
    return;
  }
  compress::QuantizationAwareTrainingOptions options =
      config.quantization->callback;
  if (options.quantize_on_fit_end() && !run_dir.empty()) {
    options.output((fs::path(run_dir) / "int8.ckpt").string());
    if (!session.data.empty()) {
      options.extra(nlohmann::json{
          {"data", TrainedDataCallback(session.data).state_dict()}}
                        .dump());
    }
  }
  trainer.add_callback(
      std::make_shared<compress::QuantizationAwareTraining>(options));
}

void evaluate_quantization_aware(
    const FitConfig& config,
    Session& session,
    const std::string& stage,
    std::string& load) {
  if (!config.quantization) {
    return;
  }
  auto* module = dynamic_cast<train::NetworkModule*>(session.module.get());
  if (module == nullptr ||
      dynamic_cast<compress::QatNetImpl*>(module->network().get()) == nullptr) {
    return; // an int8 checkpoint's module
  }
  if (!load.empty()) {
    train::load_checkpoint(load, *session.module);
    load.clear();
  }
  const auto& stages = config.quantization->callback.observer_enabled_stages();
  compress::QuantizationAwareTraining::network_of(*session.module)
      .enable_observers(
          std::find(stages.begin(), stages.end(), stage) != stages.end());
}

} // namespace hotloop::cli
