#include "hotloop/cli/app.h"

#include "commands.h"

#include "hotloop/cli/config.h"
#include "hotloop/cli/fit_config.h"
#include "hotloop/cli/session.h"
#include "hotloop/cli/trained_data.h"
#include "hotloop/compress/quantized_net.h"
#include "hotloop/core/blas.h"
#include "hotloop/core/error.h"
#include "hotloop/data/fashion_mnist.h"
#include "hotloop/data/subset.h"
#include "hotloop/dist/ddp_strategy.h"
#include "hotloop/dist/environment.h"
#include "hotloop/dist/launcher.h"
#include "hotloop/log/confusion.h"
#include "hotloop/log/csv.h"
#include "hotloop/log/csv_logger.h"
#include "hotloop/log/report.h"
#include "hotloop/log/tensorboard_logger.h"
#include "hotloop/models/fashion_cnn.h"
#include "hotloop/train/checkpoint.h"
#include "hotloop/train/classifier.h"
#include "hotloop/train/device.h"
#include "hotloop/train/lr_monitor.h"
#include "hotloop/train/network_module.h"
#include "hotloop/train/trainer.h"
#include "hotloop/version.h"

#include <ATen/ATen.h>
#include <torch/version.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace hotloop::cli {
namespace {

namespace fs = std::filesystem;

// The commands that build a model and compute with it (the rest read or
// write files).
bool runs_models(const std::string& command) {
  static const std::set<std::string> kCommands = {
      "fit",
      "validate",
      "test",
      "predict",
      "generate",
      "tune",
      "quantize",
      "shrink"};
  return kCommands.count(command) > 0;
}

constexpr const char* kUsage =
    "usage: hotloop <command> [--config FILE.yaml] [--section.key=VALUE ...]\n"
    "\n"
    "commands:\n"
    "  fit        train a model (resume with --ckpt_path PATH|last|auto)\n"
    "  validate   evaluate a checkpoint on the validation split\n"
    "             (--ckpt_path PATH|last|best)\n"
    "  test       evaluate a checkpoint on the test split\n"
    "             (--ckpt_path PATH|last|best)\n"
    "  predict    write predicted classes (or values) to a CSV file: the\n"
    "             validation split, data.predict_root's images or\n"
    "             data.predict_path's rows (--ckpt_path, --output FILE.csv)\n"
    "  report     write RUN_DIR/report.html: loss, accuracy, learning rate\n"
    "             and step-time plots of a run (hotloop report RUN_DIR)\n"
    "  generate   sample text from a GPT checkpoint (--ckpt_path, --prompt,\n"
    "             --max_new_tokens, --temperature, --top_k, --seed,\n"
    "             --num_samples, --kv_cache=false)\n"
    "  tune       measure the run's speed-ups on this machine in short\n"
    "             windows and write tuned.yaml (--budget 5m, --output)\n"
    "  checkpoint what a checkpoint holds and whether its checksum verifies\n"
    "             (hotloop checkpoint PATH)\n"
    "  quantize   an int8 checkpoint from a trained one (--ckpt_path, --mode\n"
    "             static|dynamic, --calibration_batches 32, --engine auto,\n"
    "             --output); test and predict run it\n"
    "  shrink     a smaller model from a structurally pruned one\n"
    "             (--ckpt_path, --output)\n"
    "  export     write a checkpoint's model for Python: safetensors or a\n"
    "             PyTorch state_dict (hotloop export PATH --output FILE)\n"
    "\n"
    "  hotloop <command> --help   lists every option with its default\n"
    "  hotloop --version\n";

// The callbacks the config's sections ask for.
void add_callbacks(train::Trainer& trainer, const FitConfig& config) {
  if (config.trainer.enable_checkpointing()) {
    trainer.add_callback(
        std::make_shared<train::ModelCheckpoint>(config.checkpoint));
  }
  if (config.early_stopping) {
    trainer.add_callback(
        std::make_shared<train::EarlyStopping>(*config.early_stopping));
  }
  if (config.weight_averaging) {
    trainer.add_callback(
        std::make_shared<train::WeightAveraging>(*config.weight_averaging));
  }
  if (config.lr_monitor) {
    trainer.add_callback(std::make_shared<train::LearningRateMonitor>(
        config.lr_monitor_interval, config.lr_monitor_momentum));
  }
  if (config.pruning) {
    trainer.add_callback(
        std::make_shared<compress::ModelPruning>(*config.pruning));
  }
}

// Processes per node of a ddp run: trainer.devices as a count; auto is
// every visible GPU, or one process on the CPU.
int64_t ddp_processes(const FitConfig& config) {
  const std::string& devices = config.trainer.devices();
  if (devices == "auto") {
    return train::resolve_device(config.trainer.accelerator(), "auto").is_cuda()
               ? std::max<int64_t>(1, at::hasCUDA() ? at::getNumGPUs() : 1)
               : 1;
  }
  const bool count =
      !devices.empty() &&
      devices.find_first_not_of("0123456789") == std::string::npos &&
      devices.size() < 6;
  HOTLOOP_CHECK_AS(
      ConfigError,
      count && std::stoll(devices) > 0,
      "trainer.devices=",
      devices,
      ": with trainer.strategy=ddp it is the number of processes per node, "
      "such as 2");
  return std::stoll(devices);
}

} // namespace

FitConfig one_process_config(
    const Config& config, const char* command, std::ostream& out) {
  FitConfig f = to_fit_config(config);
  if (f.strategy != "ddp") {
    return f;
  }
  const std::string devices = f.trainer.devices();
  const bool one_index = devices.size() >= 2 && devices.front() == '[';
  f.strategy = "auto";
  f.num_nodes = 1;
  if (!one_index) {
    f.trainer.devices("1");
  }
  const c10::Device device =
      train::resolve_device(f.trainer.accelerator(), f.trainer.devices());
  out << "hotloop " << command << ": the config trains with "
      << "trainer.strategy=ddp (trainer.devices=" << devices << "); "
      << command << " runs in this one process, on " << device << "\n";
  return f;
}

namespace {

// Under a launcher, this process's share of the run: its device (its
// LOCAL_RANK's GPU, or the CPU), the process group, the checks that the
// launcher started what the config asks for.
std::shared_ptr<dist::ProcessGroup> join_group(
    FitConfig& config, const dist::ProcessEnvironment& env) {
  const bool cuda =
      train::resolve_device(config.trainer.accelerator(), "auto").is_cuda();
  if (config.strategy == "ddp" && config.trainer.devices() != "auto") {
    const int64_t expected = ddp_processes(config) * config.num_nodes;
    HOTLOOP_CHECK_AS(
        ConfigError,
        env.world_size == expected,
        "trainer.devices=",
        config.trainer.devices(),
        " x trainer.num_nodes=",
        config.num_nodes,
        " is ",
        expected,
        " processes, but the launcher (",
        env.launcher,
        ") started ",
        env.world_size);
  }
  config.trainer.devices(
      cuda ? "[" + std::to_string(env.local_rank) + "]" : "1");
  return dist::ProcessGroup::join(
      env, dist::ProcessGroupOptions(config.group).cuda(cuda));
}

void print_metrics(
    std::ostream& out, const std::map<std::string, double>& metrics) {
  out << std::fixed << std::setprecision(4);
  for (const auto& [name, value] : metrics) {
    out << name << " " << value << "\n";
  }
  out << std::defaultfloat;
}

int fit_in_process(
    const ParsedArgs& args,
    FitConfig config,
    const std::shared_ptr<dist::ProcessGroup>& group,
    std::ostream& out);

// With data.on_bad_sample=skip: how many files could not be read, and the
// first few, after the command that read them.
void report_bad_samples(std::ostream& out, const Session& session) {
  std::set<std::string> bad;
  for (const auto& folder : session.image_folders) {
    for (const auto& [index, what] : folder->bad_samples()) {
      bad.insert(what);
    }
  }
  if (bad.empty()) {
    return;
  }
  out << "data: skipped " << bad.size()
      << " unreadable file(s), each replaced by the next readable one";
  int shown = 0;
  for (const std::string& what : bad) {
    if (shown++ == 3) {
      out << "\n  ...";
      break;
    }
    out << "\n  " << what;
  }
  out << "\n";
}

// What the latest validation or test counted under `name` (an
// ImageClassifier's confusion); undefined when it counted none.
at::Tensor counted(const train::Trainer& trainer, const std::string& name) {
  const auto it = trainer.callback_counts().find(name);
  return it == trainer.callback_counts().end() ? at::Tensor() : it->second;
}

int run_fit(
    const ParsedArgs& args,
    const std::vector<std::string>& command_line,
    std::ostream& out,
    std::ostream& err) {
  FitConfig config = to_fit_config(args.config);
  const dist::ProcessEnvironment env = dist::read_environment();
  if (config.strategy == "ddp" && !env.distributed()) {
    // Lightning's launcher: this process starts the ranks and waits.
    dist::LaunchOptions launch = dist::launch_options_from_environment(
        ddp_processes(config), config.num_nodes);
    launch.grace_seconds = std::min(config.group.timeout(), 30.0);
    return dist::launch("/proc/self/exe", command_line, launch, err);
  }
  std::shared_ptr<dist::ProcessGroup> group;
  if (env.distributed()) {
    group = join_group(config, env);
  }
  try {
    return fit_in_process(args, config, group, out);
  } catch (const std::exception& error) {
    if (group != nullptr && dynamic_cast<const DistError*>(&error) == nullptr) {
      group->report_failure(error.what());
    }
    throw;
  }
}

// tuner.batch_size and tuner.lr_find, before a fresh fit: they set
// data.batch_size (with the train loader) and optimizer.lr in `config`,
// and in `resolved`, the run's config.yaml, which then runs the same fit
// without searching again. The range test's curve goes to the run folder.
void tune_before_fit(
    FitConfig& config,
    Session& session,
    std::unique_ptr<data::DataLoader>& train_loader,
    const std::string& run_dir,
    Config& resolved,
    std::ostream& out) {
  const TunerConfig& tuner = config.tuner;
  if (tuner.batch_size.empty() && !tuner.lr_find) {
    return;
  }
  if (config.trainer.fast_dev_run() > 0) {
    out << "tuner: skipped under trainer.fast_dev_run\n"; // as Lightning
    return;
  }
  auto* network = dynamic_cast<train::NetworkModule*>(session.module.get());
  HOTLOOP_CHECK_AS(
      ConfigError,
      network != nullptr,
      "tuner.batch_size and tuner.lr_find need a model whose optimizer "
      "hotloop builds (model.name=",
      config.model_name,
      " builds its own)");
  const auto set_lr = [&](double lr, const char* why) {
    network->set_learning_rate(lr);
    config.optimizer.lr = lr;
    std::ostringstream text;
    text << std::setprecision(17) << lr;
    resolved.set("optimizer.lr", text.str(), why);
  };
  if (!tuner.batch_size.empty()) {
    const train::BatchSizeSearch search = train::scale_batch_size(
        *session.module,
        [&](int64_t size) {
          FitConfig sized = config;
          sized.data.batch_size = size;
          return std::make_unique<data::DataLoader>(
              session.train_set, loader_options(sized, session, true));
        },
        config.trainer,
        tuner.batch_size_finder,
        &out);
    if (search.batch_size != config.data.batch_size) {
      const double lr = train::scale_learning_rate(
          network->learning_rate(),
          config.data.batch_size,
          search.batch_size,
          tuner.scale_lr);
      if (lr != network->learning_rate()) {
        out << "tuner: optimizer.lr " << network->learning_rate() << " -> "
            << lr << " (tuner.scale_lr=" << tuner.scale_lr << ")\n";
        set_lr(lr, "tuner.scale_lr");
      }
      config.data.batch_size = search.batch_size;
      resolved.set(
          "data.batch_size", std::to_string(search.batch_size), "tuner");
      train_loader = std::make_unique<data::DataLoader>(
          session.train_set, loader_options(config, session, true));
    }
  }
  if (tuner.lr_find) {
    const train::LrFinder finder = train::lr_find(
        *session.module, *train_loader, config.trainer, tuner.lr_finder, &out);
    if (!run_dir.empty()) {
      finder.write_csv((fs::path(run_dir) / "lr_find.csv").string());
    }
    if (const std::optional<double> lr = finder.suggestion()) {
      set_lr(*lr, "tuner.lr_find");
    }
  }
  // What was found is in the config now: it trains as is.
  resolved.set("tuner.batch_size", "", "tuner");
  resolved.set("tuner.lr_find", "false", "tuner");
}

int fit_in_process(
    const ParsedArgs& args,
    FitConfig config,
    const std::shared_ptr<dist::ProcessGroup>& group,
    std::ostream& out) {
  Session session = build_session(config, /*with_train=*/true);
  apply_init_from(config.init_from, *session.module, out);
  prepare_quantization(config, session);
  auto train_loader = std::make_unique<data::DataLoader>(
      session.train_set, loader_options(config, session, true));
  data::DataLoader val_loader(
      session.val_set, loader_options(config, session, false));
  train::Trainer trainer(config.trainer, out);
  if (group != nullptr) {
    trainer.set_strategy(
        std::make_shared<dist::DDPStrategy>(group, config.ddp));
  }
  add_callbacks(trainer, config);
  if (!session.data.empty()) {
    // Predict and test read the classes and the table's statistics back.
    trainer.add_callback(std::make_shared<TrainedDataCallback>(session.data));
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      !args.extra.count("ckpt_path") || args.extra.at("ckpt_path") != "best",
      "--ckpt_path=best is for validate, test and predict; a fit resumes "
      "from last, auto or a path");
  const std::string ckpt_path =
      args.extra.count("ckpt_path")
          ? resolve_ckpt_path(args.extra.at("ckpt_path"), config)
          : "";
  const std::string& run_dir = trainer.log_dir(ckpt_path);
  add_quantization_callback(trainer, config, session, run_dir);
  // The run's own config, with the model it resolved (csv's mlp) and what
  // the tuners found.
  Config resolved = resolve_config(args.config);
  for (const auto& [key, value] : session.settings) {
    resolved.set(key, value, "the data");
  }
  if (ckpt_path.empty()) {
    tune_before_fit(config, session, train_loader, run_dir, resolved, out);
  }
  if (!run_dir.empty()) {
    const std::string yaml = resolved.to_yaml();
    std::ofstream(fs::path(run_dir) / "config.yaml") << yaml;
    const TrainedData& data = session.data;
    if (!data.feature_names.empty()) {
      // What standardized the table's columns, for reading the model
      // elsewhere (the checkpoints keep the same).
      nlohmann::json standardization;
      standardization["columns"] = data.feature_names;
      standardization["mean"] = data.feature_mean;
      standardization["std"] = data.feature_std;
      std::ofstream(fs::path(run_dir) / "standardization.json")
          << standardization.dump(2) << "\n";
    }
    if (!data.class_names.empty()) {
      // Class k's name on line k + 1, for reading predictions elsewhere.
      std::ofstream classes(fs::path(run_dir) / "classes.txt");
      for (const std::string& name : data.class_names) {
        classes << name << "\n";
      }
    }
    if (config.logger) {
      trainer.add_logger(std::make_shared<log::CsvLogger>(run_dir));
      log::TensorBoardLoggerOptions recorded;
      recorded.histogram_every_n_epochs = config.histogram_every_n_epochs;
      recorded.log_images = config.log_images;
      auto tensorboard =
          std::make_shared<log::TensorBoardLogger>(run_dir, recorded);
      tensorboard->writer().add_text("config", "```\n" + yaml + "```", 0);
      trainer.add_logger(tensorboard).add_callback(tensorboard);
      trainer.set_hyperparams(args.config.flat());
    }
  }
  train::FitResult result;
  try {
    result =
        trainer.fit(*session.module, *train_loader, &val_loader, ckpt_path);
    report_bad_samples(out, session);
  } catch (const ConfigError&) {
    // A setting found wrong by the first step (a monitored metric that step
    // and the sanity check did not log, say) leaves no half-made run folder.
    if (!run_dir.empty() && ckpt_path.empty() && trainer.global_step() <= 1) {
      std::error_code ec;
      fs::remove_all(run_dir, ec);
    }
    throw;
  }
  if (!trainer.is_global_zero()) {
    return result.interrupted ? 130 : 0;
  }
  if (result.interrupted) {
    out << "stopped after step " << result.steps;
    if (result.checkpoint_path.empty()) {
      out << "; checkpointing is off, nothing to resume from\n";
    } else {
      out << "; resume with: hotloop fit --config "
          << (fs::path(run_dir) / "config.yaml").string() << " --ckpt_path "
          << result.checkpoint_path << "\n";
    }
    return 130; // the shell's code for a run ended by SIGINT
  }
  out << std::fixed << std::setprecision(4)
      << "done: " << hotloop::detail::counted(result.epochs, "epoch") << ", "
      << hotloop::detail::counted(result.steps, "step");
  for (const auto& [name, value] : result.metrics) {
    out << ", " << name << " " << value;
  }
  out << std::setprecision(1) << ", " << result.wall_s << " s";
  if (!run_dir.empty()) {
    out << "; run folder " << run_dir;
  }
  if (!result.best_model_path.empty()) {
    out << "; best checkpoint " << result.best_model_path;
  }
  out << std::defaultfloat << "\n";
  const at::Tensor confusion = counted(trainer, "val_confusion");
  if (!run_dir.empty() && confusion.defined()) {
    // The last validation's confusion, for the report: counted in that
    // pass, over every process, so it agrees with its val_acc.
    log::write_confusion_csv(
        (fs::path(run_dir) / "confusion.csv").string(),
        confusion,
        session.data.class_names);
  }
  if (!run_dir.empty()) {
    out << "report: hotloop report " << run_dir << "\n";
  }
  return 0;
}

int run_report(const std::vector<std::string>& args, std::ostream& out) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    out << "usage: hotloop report RUN_DIR [--output FILE.html]\n\n"
           "Writes RUN_DIR/report.html (or FILE.html): loss, accuracy, "
           "learning-rate and step-time\ncharts of a run folder, one "
           "self-contained page.\n";
    return 0;
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      !args.empty() && args[0].rfind("--", 0) != 0,
      "hotloop report needs the run folder: hotloop report RUN_DIR "
      "[--output FILE.html]");
  std::string output;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i].rfind("--output=", 0) == 0) {
      output = args[i].substr(9);
    } else if (args[i] == "--output" && i + 1 < args.size()) {
      output = args[++i];
    } else {
      throw ConfigError(
          "hotloop report: unexpected argument '" + args[i] +
          "' (expected --output FILE.html)");
    }
  }
  if (!output.empty()) {
    prepare_output(output, "output");
  }
  // Written first: the stream would print "wrote " before a failure.
  const std::string written = log::write_run_report(args[0], output);
  out << "wrote " << written << "\n";
  return 0;
}

// --ckpt_path, resolved; "" when the weights come from model.init_from
// alone.
std::string evaluated_checkpoint(
    const ParsedArgs& args, const FitConfig& config, const char* command) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      args.extra.count("ckpt_path") || !config.init_from.path.empty(),
      "hotloop ",
      command,
      " needs --ckpt_path PATH (or last, or best), or "
      "--model.init_from=FILE");
  return args.extra.count("ckpt_path")
             ? resolve_ckpt_path(args.extra.at("ckpt_path"), config)
             : "";
}

int run_evaluate(const ParsedArgs& args, bool test, std::ostream& out) {
  FitConfig config =
      one_process_config(args.config, test ? "test" : "validate", out);
  const std::string ckpt_path =
      evaluated_checkpoint(args, config, test ? "test" : "validate");
  const std::optional<TrainedData> trained =
      ckpt_path.empty() ? std::nullopt : read_trained_data(ckpt_path);
  Session session = build_session(
      config, /*with_train=*/false, trained ? &*trained : nullptr);
  apply_init_from(config.init_from, *session.module, out);
  prepare_quantization(config, session);
  data::DataLoader loader(
      session.val_set, loader_options(config, session, false));
  // Evaluation writes no run folder.
  train::Trainer trainer(
      train::TrainerOptions(config.trainer).default_root_dir(""), out);
  // An int8 checkpoint runs as it is, in a module of its own.
  std::string load = ckpt_path;
  if (!ckpt_path.empty() && compress::is_quantized_checkpoint(ckpt_path)) {
    session.module = int8_module(config, ckpt_path);
    load.clear();
  }
  evaluate_quantization_aware(
      config, session, test ? "test" : "validate", load);
  const auto metrics = test ? trainer.test(*session.module, loader, load)
                            : trainer.validate(*session.module, loader, load);
  out << (test ? "test" : "validate") << " of "
      << (ckpt_path.empty() ? config.init_from.path : ckpt_path) << "\n";
  print_metrics(out, metrics);
  report_bad_samples(out, session);
  const at::Tensor confusion = counted(trainer, "test_confusion");
  if (test && confusion.defined()) {
    log::print_confusion(out, confusion, session.data.class_names);
  }
  return 0;
}

// Writes one row per sample of the validation split (or of
// data.predict_root's images, data.predict_path's rows): index, predicted
// class, its probability, the true class where known; with class names
// also the names and the top-k; for image files the file.
int run_predict(const ParsedArgs& args, std::ostream& out) {
  FitConfig config = one_process_config(args.config, "predict", out);
  const std::string ckpt_path = evaluated_checkpoint(args, config, "predict");
  const std::string output = args.extra.count("output")
                                 ? args.extra.at("output")
                                 : std::string("predictions.csv");
  prepare_output(output, "output");
  HOTLOOP_CHECK_AS(
      ConfigError,
      config.data.dataset != "text",
      "hotloop predict writes one prediction per sample: it needs an image "
      "or table dataset, "
      "not data.dataset=",
      config.data.dataset);
  const std::optional<TrainedData> trained =
      ckpt_path.empty() ? std::nullopt : read_trained_data(ckpt_path);
  Session session = build_session(
      config, /*with_train=*/false, trained ? &*trained : nullptr);
  apply_init_from(config.init_from, *session.module, out);
  prepare_quantization(config, session);
  data::DataLoader loader(
      session.val_set, loader_options(config, session, false));
  train::Trainer trainer(
      train::TrainerOptions(config.trainer).default_root_dir(""), out);
  std::string load = ckpt_path;
  if (!ckpt_path.empty() && compress::is_quantized_checkpoint(ckpt_path)) {
    session.module = int8_module(config, ckpt_path);
    load.clear();
  }
  evaluate_quantization_aware(config, session, "predict", load);
  const std::vector<at::Tensor> batches =
      trainer.predict(*session.module, loader, load);
  if (config.task == "regression") {
    // One number per row: the prediction and the table's value.
    const auto* subset =
        dynamic_cast<const data::Subset*>(session.val_set.get());
    int64_t rows = 0;
    train::write_file_atomically(output, [&](std::ostream& csv) {
      csv << "index,prediction" << (session.labeled ? ",target" : "") << "\n";
      for (const at::Tensor& batch : batches) {
        const at::Tensor values = batch.to(at::kCPU).to(at::kDouble);
        for (int64_t i = 0; i < values.size(0); ++i, ++rows) {
          csv << (subset != nullptr ? subset->indices()[rows] : rows) << ","
              << values[i].item<double>();
          if (session.labeled) {
            csv << ","
                << session.val_set->get(rows, data::SampleContext{})
                       .target.item<double>();
          }
          csv << "\n";
        }
      }
    });
    out << "predict of "
        << (ckpt_path.empty() ? config.init_from.path : ckpt_path) << ": "
        << rows << " rows written to " << output << "\n";
    return 0;
  }
  const at::Tensor targets = session.val_labels;
  const std::vector<std::string>& names = session.data.class_names;
  const bool named = !names.empty();
  // Samples without labels (data.predict_root, data.predict_path): no
  // target columns.
  const bool labeled = session.labeled;
  const bool files = !session.val_names.empty();
  int64_t rows = 0;
  train::write_file_atomically(output, [&](std::ostream& csv) {
    // With class names (image folders), also the file, the classes' names
    // and the top-k as "name:probability" pairs, most likely first.
    const int64_t k = named ? std::min<int64_t>(
                                  std::max<int64_t>(config.top_k, 1),
                                  static_cast<int64_t>(names.size()))
                            : 0;
    if (named) {
      csv << "index," << (files ? "file," : "")
          << "prediction,class,probability,"
          << (labeled ? "target,target_class," : "") << "top" << k << "\n";
    } else {
      csv << "index,prediction,probability,target\n";
    }
    int64_t index = 0;
    for (const at::Tensor& batch : batches) {
      const at::Tensor probabilities = batch.to(at::kCPU).to(at::kDouble);
      const auto [best, predicted] = probabilities.max(1);
      const auto [top, top_classes] =
          named ? probabilities.topk(k, 1)
                : std::tuple<at::Tensor, at::Tensor>();
      for (int64_t i = 0; i < probabilities.size(0); ++i, ++index) {
        const int64_t prediction = predicted[i].item<int64_t>();
        const int64_t target = labeled ? targets[index].item<int64_t>() : -1;
        csv << index << ",";
        if (files) {
          csv << log::csv_field(session.val_names.at(index)) << ",";
        }
        csv << prediction << ",";
        if (named) {
          csv << log::csv_field(names.at(prediction)) << ",";
        }
        csv << best[i].item<double>();
        if (labeled) {
          csv << "," << target;
        }
        if (named) {
          csv << (labeled ? "," + log::csv_field(names.at(target)) : "") << ",";
          std::string pairs;
          for (int64_t j = 0; j < k; ++j) {
            std::ostringstream pair;
            pair << names.at(top_classes[i][j].item<int64_t>()) << ":"
                 << std::setprecision(4) << top[i][j].item<double>();
            pairs += (j > 0 ? " " : "") + pair.str();
          }
          csv << log::csv_field(pairs);
        }
        csv << "\n";
      }
    }
    rows = index;
  });
  out << "predict of "
      << (ckpt_path.empty() ? config.init_from.path : ckpt_path) << ": " << rows
      << " rows written to " << output << "\n";
  return 0;
}

// The hint under a data error: the data key whose file or folder the
// message names (data.val_root's missing folder is not data.root's).
std::string data_hint(const std::string& message, const Config* config) {
  if (config != nullptr) {
    std::string key;
    size_t longest = 0;
    for (const char* candidate :
         {"data.root",
          "data.val_root",
          "data.predict_root",
          "data.path",
          "data.predict_path"}) {
      const std::string value = config->get_string(candidate);
      if (!value.empty() && value.size() > longest &&
          message.find(value) != std::string::npos) {
        key = candidate;
        longest = value.size();
      }
    }
    if (!key.empty()) {
      return "hint: check " + key + "=" + config->get_string(key) + "\n";
    }
  }
  return "hint: check the data.* settings and the dataset files\n";
}

std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

} // namespace

void prepare_output(const std::string& path, const std::string& flag) {
  HOTLOOP_CHECK_AS(
      ConfigError, !path.empty(), "--", flag, ": expected a file name, got ''");
  std::error_code ec;
  HOTLOOP_CHECK_AS(
      ConfigError,
      !fs::is_directory(path, ec),
      "--",
      flag,
      "=",
      path,
      ": is a folder; expected a file name");
  fs::path folder = fs::path(path).parent_path();
  if (folder.empty()) {
    folder = ".";
  }
  if (!fs::exists(folder, ec)) {
    fs::create_directories(folder, ec);
    HOTLOOP_CHECK_AS(
        ConfigError,
        !ec,
        "--",
        flag,
        "=",
        path,
        ": cannot make its folder '",
        folder.string(),
        "': ",
        ec.message());
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      fs::is_directory(folder, ec),
      "--",
      flag,
      "=",
      path,
      ": '",
      folder.string(),
      "' is not a folder");
  HOTLOOP_CHECK_AS(
      ConfigError,
      ::access(folder.c_str(), W_OK) == 0,
      "--",
      flag,
      "=",
      path,
      ": cannot write in folder '",
      folder.string(),
      "': ",
      std::strerror(errno));
}

// Where the config's runs go: default_root_dir/name, a version_N each.
fs::path runs_folder(const FitConfig& config) {
  return fs::path(config.trainer.default_root_dir()) / config.trainer.name();
}

// The newest run folder (the highest version_N under runs_folder) that
// holds `file`, or "".
fs::path newest_run_with(const FitConfig& config, const fs::path& file) {
  const fs::path runs = runs_folder(config);
  int64_t newest = -1;
  fs::path found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(runs, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("version_", 0) == 0 &&
        fs::is_regular_file(entry.path() / file)) {
      const int64_t version = std::atoll(name.c_str() + 8);
      if (version > newest) {
        newest = version;
        found = entry.path();
      }
    }
  }
  return found;
}

// The checkpoint the newest finished run's model_checkpoint kept as best
// (its summary.json's best_checkpoint), as Lightning's ckpt_path="best".
std::string best_checkpoint(const FitConfig& config) {
  const fs::path run = newest_run_with(config, "summary.json");
  HOTLOOP_CHECK(
      !run.empty(),
      "--ckpt_path=best: no finished run under '",
      runs_folder(config).string(),
      "' has a summary.json");
  const fs::path summary = run / "summary.json";
  std::ifstream in(summary);
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(hotloop::detail::str_cat(
        summary.string(), ": not a run summary (", e.what(), ")"));
  }
  const std::string best = json.value("best_checkpoint", std::string());
  HOTLOOP_CHECK(
      !best.empty(),
      "--ckpt_path=best: ",
      summary.string(),
      " names no best checkpoint (the run kept none: "
      "trainer.enable_checkpointing=false or model_checkpoint.save_top_k=0)");
  HOTLOOP_CHECK(
      fs::is_regular_file(best),
      "--ckpt_path=best: '",
      best,
      "', the best checkpoint ",
      summary.string(),
      " names, does not exist");
  return best;
}

// `last`: the newest run's checkpoints/last.ckpt; `auto` finds none at a
// fresh start, and the newest after a restart (torchrun --max_restarts, a
// requeued job); `best` (every command but fit, which refuses it): the
// checkpoint the newest finished run kept as best.
std::string resolve_ckpt_path(
    const std::string& path, const FitConfig& config) {
  if (path == "best") {
    return best_checkpoint(config);
  }
  if (path != "last" && path != "auto") {
    return path;
  }
  const fs::path last = fs::path("checkpoints") / "last.ckpt";
  const fs::path run = newest_run_with(config, last);
  HOTLOOP_CHECK(
      !run.empty() || path == "auto",
      "--ckpt_path=last: no run under '",
      runs_folder(config).string(),
      "' has checkpoints/last.ckpt");
  return run.empty() ? "" : (run / last).string();
}

int run(
    const std::vector<std::string>& args,
    std::ostream& out,
    std::ostream& err) {
  std::string command = args.empty() ? "" : args[0];
  bool known_command = false;
  std::optional<Config> config; // for the hints, once parsed
  try {
    if (command.empty() || command == "--help" || command == "-h" ||
        command == "help") {
      out << kUsage;
      return command.empty() ? 2 : 0;
    }
    if (command == "--version") {
      out << "hotloop " << HOTLOOP_VERSION << " (LibTorch "
          << TORCH_VERSION_MAJOR << "." << TORCH_VERSION_MINOR << "."
          << TORCH_VERSION_PATCH << ")\n";
      const BlasKernels blas = blas_kernels();
      if (!blas.library.empty()) {
        out << "CPU matrix products: " << blas.describe();
        if (!blas.requested.empty()) {
          out << " (OPENBLAS_CORETYPE=" << blas.requested << ", as set"
              << (blas.faster_core.empty()
                      ? ""
                      : "; this CPU runs the " + blas.faster_core + " ones")
              << ")";
        }
        // What the commands that compute restart with, and why.
        std::vector<std::string> reasons, settings;
        if (blas.wants_faster_core()) {
          reasons.push_back("this CPU runs the " + blas.faster_core + " ones");
          settings.push_back("OPENBLAS_CORETYPE=" + blas.faster_core);
        }
        if (!blas.openmp_build.empty()) {
          reasons.push_back("the OpenMP build is installed");
          settings.push_back("LD_LIBRARY_PATH=" + blas.openmp_build);
        }
        if (!reasons.empty()) {
          out << " (" << reasons.front()
              << (reasons.size() > 1 ? " and " + reasons.back() : "")
              << ": the commands that compute restart with " << settings.front()
              << (settings.size() > 1 ? " and " + settings.back() : "") << ")";
        }
        out << "\n";
      }
      return 0;
    }
    if (command == "report") {
      return run_report({args.begin() + 1, args.end()}, out);
    }
    if (command == "checkpoint") {
      return run_checkpoint({args.begin() + 1, args.end()}, out);
    }
    if (command == "export") {
      return run_export({args.begin() + 1, args.end()}, out);
    }
    HOTLOOP_CHECK_AS(
        ConfigError,
        runs_models(command),
        "unknown command '",
        command,
        "' (expected fit, validate, test, predict, generate, tune, quantize, "
        "shrink, report, checkpoint or export)");
    known_command = true;
    const ConfigSchema& schema = fit_schema();
    const std::vector<std::string> rest(args.begin() + 1, args.end());
    std::set<std::string> flags = {
        "ckpt_path", "output", "help", "print_config"};
    if (command == "generate") {
      flags.erase("output");
      for (const char* const* flag = kGenerateFlags; *flag != nullptr; ++flag) {
        flags.insert(*flag);
      }
    }
    if (command == "tune") {
      flags.erase("ckpt_path");
      for (const char* const* flag = kTuneFlags; *flag != nullptr; ++flag) {
        flags.insert(*flag);
      }
    }
    if (command == "quantize" || command == "shrink") {
      for (const char* const* flag = command == "quantize" ? kQuantizeFlags
                                                           : kShrinkFlags;
           *flag != nullptr;
           ++flag) {
        flags.insert(*flag);
      }
    }
    ParsedArgs parsed = parse_args(schema, rest, flags);
    config = parsed.config;
    if (parsed.extra.count("help")) {
      out << "usage: hotloop " << command
          << " [--config FILE.yaml] [--section.key=VALUE ...]"
          << (command == "fit"    ? " [--ckpt_path PATH|last]"
              : command == "tune" ? ""
                                  : " --ckpt_path PATH|last")
          << (command == "predict" ? " [--output FILE.csv]" : "")
          << (command == "tune"
                  ? " [--budget 5m] [--output tuned.yaml] [--repeats 3] "
                    "[--loss_tolerance 0.02] [--keep_windows]"
                  : "")
          << (command == "generate"
                  ? " [--prompt TEXT] [--max_new_tokens 500] [--temperature "
                    "0.8] [--top_k 200] [--seed 1337] [--num_samples 1] "
                    "[--kv_cache=false]"
                  : "")
          << " [--print_config]\n\noptions (default in the flag):\n"
          << help_text(schema);
      return 0;
    }
    if (parsed.extra.count("print_config")) {
      Config resolved = resolve_config(parsed.config); // validates
      if (to_fit_config(resolved).data.stats_from_data) {
        // The statistics the run would take from the training images.
        const Session session =
            build_session(to_fit_config(resolved), /*with_train=*/false);
        for (const auto& [key, value] : session.settings) {
          resolved.set(key, value, "the data");
        }
      }
      out << resolved.to_yaml();
      return 0;
    }
    if (command == "fit") {
      return run_fit(parsed, args, out, err);
    }
    if (command == "predict") {
      return run_predict(parsed, out);
    }
    if (command == "generate") {
      return run_generate(parsed, out, err);
    }
    if (command == "tune") {
      return run_tune(parsed, out);
    }
    if (command == "quantize") {
      return run_quantize(parsed, out);
    }
    if (command == "shrink") {
      return run_shrink(parsed, out);
    }
    return run_evaluate(parsed, command == "test", out);
  } catch (const ConfigError& e) {
    err << "hotloop: error: " << first_line(e.what()) << "\n";
    if (known_command || command == "report" || command == "checkpoint" ||
        command == "export") {
      err << "hint: 'hotloop " << command << " --help' lists every option\n";
    } else {
      err << "hint: 'hotloop --help' lists the commands\n";
    }
    return 2;
  } catch (const DataError& e) {
    err << "hotloop: error: " << first_line(e.what()) << "\n"
        << data_hint(e.what(), config ? &*config : nullptr);
    return 1;
  } catch (const c10::Error& e) {
    err << "hotloop: error: " << first_line(e.what_without_backtrace()) << "\n";
    return 1;
  } catch (const std::exception& e) {
    err << "hotloop: error: " << first_line(e.what()) << "\n";
    return 1;
  }
}

int main(int argc, char** argv) {
  // Not for help, report, checkpoint or export: they would only pay for
  // the restart.
  if (argc > 1 && runs_models(argv[1])) {
    use_fastest_blas_kernels(argv);
  }
  return run(
      std::vector<std::string>(argv + 1, argv + argc), std::cout, std::cerr);
}

} // namespace hotloop::cli
