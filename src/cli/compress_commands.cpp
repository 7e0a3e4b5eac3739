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
#include "hotloop/train/checkpoint.h"
#include "hotloop/train/classifier.h"
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

// One pass of `loader`: the mean per unit (a sample, a token) of what
// `measure` sums over a batch (correct predictions, a loss), and the units
// per second of inference, timed after a warm-up batch (the warm-up itself
// where it is the only one).
struct Evaluation {
  double mean = 0;
  double units_per_s = 0;
};

Evaluation evaluate(
    const std::function<double(const data::Batch&)>& measure,
    const std::function<int64_t(const data::Batch&)>& units,
    data::DataLoader& loader) {
  const c10::InferenceMode inference;
  int64_t counted = 0, timed = 0;
  double sum = 0, seconds = 0, warm_up = 0;
  for (const data::Batch& batch : loader) {
    const auto start = std::chrono::steady_clock::now();
    sum += measure(batch);
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    if (counted > 0) {
      seconds += elapsed;
      timed += units(batch);
    } else {
      warm_up = elapsed;
    }
    counted += units(batch);
  }
  if (timed == 0) {
    seconds = warm_up;
    timed = counted;
  }
  Evaluation result;
  result.mean = counted > 0 ? sum / static_cast<double>(counted) : 0;
  result.units_per_s = seconds > 0 ? timed / seconds : 0;
  return result;
}

// Validation accuracy and samples/s of a classifier's `forward`.
Evaluation evaluate(
    const std::function<at::Tensor(const at::Tensor&)>& forward,
    data::DataLoader& loader) {
  return evaluate(
      [&](const data::Batch& batch) {
        return static_cast<double>(
            (forward(batch.input).argmax(1) == batch.target)
                .sum()
                .item<int64_t>());
      },
      [](const data::Batch& batch) { return batch.input.size(0); },
      loader);
}

// Validation loss and tokens/s of a GPT.
Evaluation evaluate(models::GptImpl& gpt, data::DataLoader& loader) {
  return evaluate(
      [&](const data::Batch& batch) {
        return gpt.token_loss(batch.input, batch.target).item<double>() *
               static_cast<double>(batch.input.numel());
      },
      [](const data::Batch& batch) { return batch.input.numel(); },
      loader);
}

// hotloop quantize --mode dynamic of a GPT: its Linear layers int8 in place,
// the validation loss and tokens/s before and after.
int quantize_gpt(
    const ParsedArgs& args,
    const FitConfig& config,
    Session& session,
    models::GptImpl& gpt,
    const std::string& ckpt_path,
    const std::string& output,
    std::ostream& out) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      flag(args, "mode", "static") == "dynamic",
      "hotloop quantize: a GPT quantizes dynamically (--mode=dynamic: its "
      "Linear layers int8); static int8 needs quantized attention, "
      "LayerNorm and GELU kernels, which hotloop does not have");
  data::DataLoader val_loader(
      session.val_set, loader_options(config, session, false));
  const int64_t float_bytes = compress::stored_bytes(gpt);
  const Evaluation fp32 = evaluate(gpt, val_loader);
  const std::string engine =
      compress::quantize_dynamic_inplace(gpt, flag(args, "engine", "auto"));
  out << "quantize: dynamic int8 (the GPT's Linear layers, lm_head "
         "included) on the "
      << engine << " engine\n";
  const Evaluation int8 = evaluate(gpt, val_loader);
  compress::save_quantized(output, gpt, kept_states(ckpt_path));
  const double ratio = int8.units_per_s / std::max(fp32.units_per_s, 1e-9);
  out << std::fixed << std::setprecision(4) << "fp32: val_loss " << fp32.mean
      << ", " << std::setprecision(0) << fp32.units_per_s
      << " tokens/s; int8: val_loss " << std::setprecision(4) << int8.mean
      << ", " << std::setprecision(0) << int8.units_per_s << " tokens/s ("
      << std::setprecision(2) << ratio << "x); weights "
      << compress::stored_bytes(gpt) / 1024 << " KB, float "
      << float_bytes / 1024 << " KB\n"
      << std::defaultfloat;
  if (ratio < 1) {
    out << "warning: the int8 model infers slower than the float one on "
           "this machine ("
        << std::setprecision(2) << std::fixed << ratio
        << "x): keep the float model for speed" << std::defaultfloat << "\n";
  }
  out << "wrote " << output << " (" << fs::file_size(output)
      << " bytes; the float checkpoint " << fs::file_size(ckpt_path)
      << "); hotloop test or generate --ckpt_path " << output
      << " runs it\n";
  return 0;
}

// The checkpoint loaded into the session's module, in eval mode.
Session loaded_session(
    const FitConfig& config, const std::string& ckpt_path, bool with_train) {
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
  const auto batches =
      number_flag<int64_t>(args, "calibration_batches", 32, 1, 1000000);
  const std::string output = flag(
      args,
      "output",
      (fs::path(ckpt_path).parent_path() /
       (fs::path(ckpt_path).stem().string() + ".int8.ckpt"))
          .string());
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
  const Evaluation fp32 = evaluate(
      [&](const at::Tensor& x) {
        return session.module->predict_step({x, {}}, 0);
      },
      val_loader);
  const Evaluation int8 = evaluate(
      [&](const at::Tensor& x) { return net->forward(x); }, val_loader);
  compress::save_quantized(output, *net, kept_states(ckpt_path));
  out << std::fixed << std::setprecision(4) << "fp32: val_acc " << fp32.mean
      << ", " << std::setprecision(0) << fp32.units_per_s
      << " samples/s; int8: val_acc " << std::setprecision(4) << int8.mean
      << ", " << std::setprecision(0) << int8.units_per_s << " samples/s ("
      << std::setprecision(2)
      << int8.units_per_s / std::max(fp32.units_per_s, 1e-9) << "x)\n"
      << std::defaultfloat;
  if (int8.units_per_s < fp32.units_per_s) {
    out << "warning: the int8 model infers slower than the float one on "
           "this machine ("
        << std::setprecision(2) << std::fixed
        << int8.units_per_s / std::max(fp32.units_per_s, 1e-9)
        << "x): keep the float model for speed" << std::defaultfloat << "\n";
  }
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
  const Evaluation before = evaluate(
      [&](const at::Tensor& x) {
        return session.module->predict_step({x, {}}, 0);
      },
      val_loader);
  const Evaluation after = evaluate(
      [&](const at::Tensor& x) {
        return module->predict_step({x, {}}, 0);
      },
      val_loader);
  out << "shrink: " << report.describe() << "\n"
      << std::fixed << std::setprecision(4) << "before: val_acc "
      << before.mean << ", " << std::setprecision(0) << before.units_per_s
      << " samples/s; after: val_acc " << std::setprecision(4) << after.mean
      << ", " << std::setprecision(0) << after.units_per_s << " samples/s ("
      << std::setprecision(2)
      << after.units_per_s / std::max(before.units_per_s, 1e-9) << "x)\n"
      << std::defaultfloat << "wrote " << output
      << "; use it with the run's config and " << options << "\n";
  return 0;
}

std::shared_ptr<train::Module> int8_module(
    const FitConfig& config, const std::string& ckpt_path) {
  if (config.model_name == "gpt") {
    compress::select_quantized_engine("auto");
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
  compress::select_quantized_engine("auto");
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
      config.top_k);
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
