#include "hotloop/cli/app.h"
#include "cli/run_cli.h"
#include "hotloop/cli/fit_config.h"
#include "hotloop/cli/registry.h"
#include "hotloop/cli/trained_data.h"
#include "hotloop/core/blas.h"
#include "hotloop/core/error.h"
#include "hotloop/log/confusion.h"
#include "hotloop/log/metrics_csv.h"
#include "hotloop/models/fashion_cnn.h"
#include "hotloop/train/checkpoint.h"
#include "hotloop/train/classifier.h"
#include "hotloop/version.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <thread>
#include <tuple>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <map>
#include <optional>
#include <regex>
#include <sstream>

namespace hotloop::cli {
namespace {

namespace fs = std::filesystem;
using ::hotloop::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

using ::hotloop::cli::testing::read_text;
using ::hotloop::cli::testing::Result;
using ::hotloop::cli::testing::run_cli;
using ::hotloop::cli::testing::run_process;

// The rows of a metrics.csv as "step: name=value ..." lines, without
// elapsed_s (the Timer's wall time, the one column a resume may change).
std::vector<std::string> metric_rows(const std::string& path) {
  const log::MetricsTable table = log::read_metrics_csv(path);
  std::vector<std::string> rows(table.rows());
  for (size_t row = 0; row < table.rows(); ++row) {
    std::ostringstream line;
    line << std::setprecision(17) << *table.column("step")[row] << ":";
    for (const std::string& name : table.names()) {
      const auto& cell = table.column(name)[row];
      if (name != "elapsed_s" && name != "step" && cell) {
        line << " " << name << "=" << *cell;
      }
    }
    rows[row] = line.str();
  }
  return rows;
}

// A value of a run folder's summary.json.
double summary_value(const fs::path& run, const std::string& key) {
  std::ifstream in(run / "summary.json");
  return nlohmann::json::parse(in).at(key).get<double>();
}

// A tiny model and a few epochs, so a CLI run takes a second; on the CPU
// also where the machine has a GPU, like every test but the CUDA ones.
std::vector<std::string> small_fit(
    const TempDir& dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {
      "fit",
      "--trainer.accelerator=cpu",
      "--data.root=" + dir.file("data"),
      "--trainer.default_root_dir=" + dir.file("runs"),
      "--trainer.max_epochs=2",
      "--data.batch_size=32",
      "--data.val_batch_size=50",
      "--model.channels=[4, 8]",
      "--model.hidden=16",
      "--optimizer.lr=0.01"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// The event file of a run's folder, as bytes.
std::string event_file_bytes(const fs::path& run) {
  for (const auto& entry : fs::directory_iterator(run)) {
    if (entry.path().filename().string().rfind("events.out", 0) == 0) {
      std::ifstream in(entry.path(), std::ios::binary);
      return std::string(
          (std::istreambuf_iterator<char>(in)),
          std::istreambuf_iterator<char>());
    }
  }
  return "";
}

// The shared small GPT run, checkpoints kept by val_loss.
std::vector<std::string> small_gpt(const TempDir& dir, int epochs) {
  return ::hotloop::cli::testing::small_gpt_on_text(
      dir.path(),
      {"--model.top_k=1",
       "--model_checkpoint.monitor=val_loss",
       "--model_checkpoint.mode=min",
       "--trainer.max_epochs=" + std::to_string(epochs)});
}

TEST(Cli, VersionNamesHotloopAndLibTorch) {
  const Result r = run_cli({"--version"});
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(
      r.out,
      HasSubstr(std::string("hotloop ") + HOTLOOP_VERSION + " (LibTorch "));
}

// OpenBLAS's kernels as `hotloop --version` names them in a process
// without OPENBLAS_CORETYPE: {picked, faster}; nullopt where LibTorch's
// BLAS is not OpenBLAS.
std::optional<std::pair<std::string, std::string>> openblas_cores(
    const TempDir& dir) {
  const std::string log = dir.file("version.log");
  EXPECT_EQ(run_process({"--version"}, log, "-u OPENBLAS_CORETYPE"), 0);
  std::smatch picked;
  const std::string text = read_text(log);
  if (!std::regex_search(
          text,
          picked,
          std::regex("CPU matrix products: OpenBLAS [^,]+, (\\w+) kernels"))) {
    EXPECT_THAT(text, Not(HasSubstr("OpenBLAS")));
    return std::nullopt;
  }
  // "(this CPU runs the SkylakeX ones[ and ...]: the commands that compute
  // restart with OPENBLAS_CORETYPE=SkylakeX[ and ...])".
  std::smatch faster;
  std::regex_search(
      text,
      faster,
      std::regex("this CPU runs the (\\w+) ones[^:]*: the commands that "
                 "compute restart with OPENBLAS_CORETYPE=(\\w+)"));
  EXPECT_EQ(faster[1].str(), faster[2].str());
  EXPECT_EQ(
      faster[1].str(),
      faster_openblas_core(picked[1].str(), cpu_vector_units()))
      << "this process and the program see different CPUs";
  return std::make_pair(picked[1].str(), faster[1].str());
}

// `fit` of the shared small GPT for one batch and one validation batch.
std::vector<std::string> one_batch_gpt_fit(const TempDir& dir) {
  std::vector<std::string> args = ::hotloop::cli::testing::small_gpt_on_text(
      dir.path(),
      {"--trainer.max_epochs=1",
       "--trainer.limit_train_batches=1",
       "--trainer.limit_val_batches=1"});
  args.insert(args.begin(), "fit");
  return args;
}

TEST(Cli, ACommandThatComputesRunsTheFastestOpenBlasKernelsTheCpuHas) {
  TempDir dir;
  const auto cores = openblas_cores(dir);
  if (!cores) {
    GTEST_SKIP() << "LibTorch's BLAS here is not OpenBLAS";
  }
  const auto& [picked, faster] = *cores;
  const std::vector<std::string> args = one_batch_gpt_fit(dir);
  // Where OpenBLAS picked older kernels than the CPU runs (a CPU model it
  // does not know), fit restarts with them, and says nothing more.
  ASSERT_EQ(run_process(args, dir.file("fit.log"), "-u OPENBLAS_CORETYPE"), 0)
      << read_text(dir.file("fit.log"));
  const std::string runs = read_text(dir.file("fit.log"));
  EXPECT_THAT(
      runs,
      HasSubstr(
          ", " + (faster.empty() ? picked : faster) + " kernels, run folder "));
  EXPECT_THAT(runs, Not(HasSubstr("warning: OpenBLAS")));
  // OPENBLAS_CORETYPE set is the user's choice: it stands, unremarked.
  ASSERT_EQ(
      run_process(args, dir.file("chosen.log"), "OPENBLAS_CORETYPE=Prescott"),
      0)
      << read_text(dir.file("chosen.log"));
  const std::string chosen = read_text(dir.file("chosen.log"));
  EXPECT_THAT(chosen, HasSubstr(", Prescott kernels, run folder "));
  EXPECT_THAT(chosen, Not(HasSubstr("warning: OpenBLAS")));
  ASSERT_EQ(
      run_process(
          {"--version"},
          dir.file("chosen-version.log"),
          "OPENBLAS_CORETYPE=Prescott"),
      0);
  const std::string newer =
      faster_openblas_core("Prescott", cpu_vector_units());
  EXPECT_THAT(
      read_text(dir.file("chosen-version.log")),
      HasSubstr(
          ", Prescott kernels (OPENBLAS_CORETYPE=Prescott, as set" +
          (newer.empty() ? "" : "; this CPU runs the " + newer + " ones") +
          ")"));
  EXPECT_THAT(
      read_text(dir.file("chosen-version.log")),
      Not(HasSubstr("OPENBLAS_CORETYPE=" + newer)));
}

TEST(Cli, AnOpenMpOpenBlasKeepsTheIntraOpThreads) {
  // Debian's libopenblas0-openmp (setup.sh --tests installs it beside the
  // pthreads build, which stays the system's BLAS): its set_num_threads is
  // omp_set_num_threads, which trainer.blas_threads=1 must not call.
  const std::string openmp = "/usr/lib/x86_64-linux-gnu/openblas-openmp";
  if (!fs::exists(openmp + "/libblas.so.3")) {
    GTEST_SKIP() << "no " << openmp << " (apt-get install libopenblas0-openmp)";
  }
  // Fashion-MNIST's loading runs ATen's threads before the fit sets them,
  // so a count set by OpenBLAS would stick (the GPT's text would not show
  // it).
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 64, 20);
  const std::vector<std::string> args =
      small_fit(dir, {"--trainer.num_threads=2", "--trainer.blas_threads=1"});
  ASSERT_EQ(
      run_process(args, dir.file("fit.log"), "LD_LIBRARY_PATH=" + openmp), 0)
      << read_text(dir.file("fit.log"));
  EXPECT_THAT(
      read_text(dir.file("fit.log")),
      HasSubstr(", on cpu, 2 intra-op threads, "));
}

TEST(Cli, AProgramOnOlderOpenBlasKernelsThanItsCpuRunsIsToldHowToGetThem) {
  // This test program does not restart itself: a Trainer in it says what
  // it would gain, where there is something to gain.
  TempDir dir;
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) {
    GTEST_SKIP() << "OPENBLAS_CORETYPE is set for the tests";
  }
  const BlasKernels blas = blas_kernels();
  const Result r = run_cli(one_batch_gpt_fit(dir));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string how =
      " before the program starts (the hotloop program does; in your own, "
      "call hotloop::use_fastest_blas_kernels(argv) first in main)\n";
  if (blas.faster_core.empty()) {
    EXPECT_THAT(r.out, Not(HasSubstr("kernels on a CPU that runs its")));
  } else {
    EXPECT_THAT(
        r.out,
        HasSubstr(
            "warning: OpenBLAS runs its " + blas.core +
            " kernels on a CPU that runs its " + blas.faster_core +
            " ones, several times faster: set OPENBLAS_CORETYPE=" +
            blas.faster_core + how));
  }
  if (blas.openmp_build.empty()) {
    EXPECT_THAT(r.out, Not(HasSubstr("its OpenMP build")));
  } else {
    EXPECT_THAT(
        r.out,
        HasSubstr(
            "warning: OpenBLAS runs on its pthreads build, a thread "
            "pool beside LibTorch's, while its OpenMP build, which "
            "runs on LibTorch's threads (faster for models of Linear "
            "layers), is installed: start the program with "
            "LD_LIBRARY_PATH=" +
            blas.openmp_build +
            " (the hotloop program does; in "
            "your own, call hotloop::use_fastest_blas_kernels(argv) "
            "first in main)\n"));
  }
}

TEST(Cli, ACommandThatComputesRunsOnTheOpenMpOpenBlasWhereItIsInstalled) {
  const std::string pthreads = "/usr/lib/x86_64-linux-gnu/openblas-pthread";
  const std::string openmp = "/usr/lib/x86_64-linux-gnu/openblas-openmp";
  if (blas_kernels().threading != "pthreads" ||
      !fs::exists(openmp + "/libblas.so.3")) {
    GTEST_SKIP() << "needs Debian's libopenblas0-pthread as the BLAS and "
                    "libopenblas0-openmp beside it";
  }
  TempDir dir;
  const std::vector<std::string> args = one_batch_gpt_fit(dir);
  ASSERT_EQ(run_process(args, dir.file("fit.log"), "-u LD_LIBRARY_PATH"), 0)
      << read_text(dir.file("fit.log"));
  const std::string restarted = read_text(dir.file("fit.log"));
  EXPECT_THAT(restarted, HasSubstr(" (OpenMP), "));
  EXPECT_THAT(restarted, Not(HasSubstr("warning: OpenBLAS")));
  // LD_LIBRARY_PATH naming the pthreads build is the user's choice: it
  // stands, unremarked.
  ASSERT_EQ(
      run_process(args, dir.file("chosen.log"), "LD_LIBRARY_PATH=" + pthreads),
      0)
      << read_text(dir.file("chosen.log"));
  const std::string chosen = read_text(dir.file("chosen.log"));
  EXPECT_THAT(chosen, HasSubstr(" (pthreads), "));
  EXPECT_THAT(chosen, Not(HasSubstr("warning: OpenBLAS")));
  ASSERT_EQ(
      run_process({"--version"}, dir.file("version.log"), "-u LD_LIBRARY_PATH"),
      0);
  EXPECT_THAT(
      read_text(dir.file("version.log")),
      HasSubstr("the commands that compute restart with "));
  EXPECT_THAT(
      read_text(dir.file("version.log")),
      HasSubstr("LD_LIBRARY_PATH=" + openmp + ")\n"));
}

TEST(Cli, NoCommandPrintsUsageAndFails) {
  const Result r = run_cli({});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.out, HasSubstr("usage: hotloop <command>"));
}

TEST(Cli, UnknownCommandIsAnError) {
  const Result r = run_cli({"fitt"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err,
      HasSubstr("hotloop: error: unknown command 'fitt' (expected fit, "
                "validate, test, predict, generate, tune, quantize, shrink, "
                "report, checkpoint or export)"));
}

TEST(Cli, FitHelpListsEveryOptionWithItsDefault) {
  const Result r = run_cli({"fit", "--help"});
  EXPECT_EQ(r.code, 0);
  for (const auto& option : fit_schema().options()) {
    EXPECT_THAT(r.out, HasSubstr("--" + option.key + "=")) << option.key;
  }
  EXPECT_THAT(r.out, HasSubstr("--trainer.max_epochs=15 "));
  EXPECT_THAT(r.out, HasSubstr("--model.channels=[16, 32] "));
  EXPECT_THAT(r.out, HasSubstr("--optimizer.name=adamw "));
  EXPECT_THAT(r.out, HasSubstr("--ckpt_path"));
}

// Each trainer.* option set to a value other than its default.
std::vector<std::string> trainer_overrides() {
  return {
      "--trainer.max_epochs=7",
      "--trainer.min_epochs=2",
      "--trainer.max_steps=99",
      "--trainer.max_time=3600",
      "--trainer.limit_train_batches=5",
      "--trainer.limit_val_batches=0.25",
      "--trainer.limit_test_batches=3",
      "--trainer.limit_predict_batches=2",
      "--trainer.val_check_interval=0.5",
      "--trainer.check_val_every_n_epoch=3",
      "--trainer.num_sanity_val_steps=-1",
      "--trainer.overfit_batches=6",
      "--trainer.fast_dev_run=0",
      "--trainer.accumulate_grad_batches=4",
      "--trainer.gradient_clip_val=0.5",
      "--trainer.gradient_clip_algorithm=value",
      "--trainer.precision=bf16-mixed",
      "--trainer.zero_grad_set_to_none=false",
      "--trainer.deterministic=true",
      "--trainer.benchmark=false",
      "--trainer.benchmark_limit=3",
      "--trainer.sdpa_backend=math",
      "--trainer.detect_anomaly=true",
      "--trainer.inference_mode=false",
      "--trainer.accelerator=cpu",
      "--trainer.devices=1",
      "--trainer.channels_last=true",
      "--trainer.cuda_graphs=true",
      "--trainer.seed=11",
      "--trainer.profiler=pytorch",
      "--trainer.profiler_steps=3",
      "--trainer.profiler_skip_steps=0",
      "--trainer.peak_tflops=989.4",
      "--trainer.default_root_dir=elsewhere",
      "--trainer.name=other",
      "--trainer.num_threads=3",
      "--trainer.blas_threads=2",
      "--trainer.retain_host_memory=false",
      "--trainer.enable_checkpointing=false",
      "--trainer.handle_signals=false",
      "--trainer.enable_progress_bar=false",
      "--trainer.log_every_n_steps=9",
      "--trainer.flush_logs_every_n_steps=8",
      "--trainer.histogram_every_n_epochs=5",
      "--trainer.log_images=false",
      "--trainer.logger=false",
      "--trainer.new_folder_on_resume=true",
      "--trainer.on_nonfinite_loss=skip_step",
      "--trainer.strategy=ddp",
      "--trainer.num_nodes=3",
      "--trainer.process_group_backend=gloo",
      "--trainer.dist_timeout=42",
      "--trainer.sync_batchnorm=true"};
}

TEST(Cli, TheOptimizersStepChoicesReachItsOptions) {
  const ParsedArgs parsed = parse_args(
      fit_schema(),
      {"--optimizer.fused=true", "--optimizer.foreach=false"},
      {});
  const FitConfig config = to_fit_config(parsed.config);
  EXPECT_EQ(config.optimizer.fused, "true");
  EXPECT_EQ(config.optimizer.foreach, "false");
  EXPECT_EQ(
      to_fit_config(parse_args(fit_schema(), {}, {}).config).optimizer.fused,
      "auto");
}

TEST(Cli, LabelSmoothingReachesTheClassifierAndIsBounded) {
  EXPECT_EQ(
      to_fit_config(parse_args(fit_schema(), {}, {}).config).label_smoothing,
      0.0);
  EXPECT_EQ(
      to_fit_config(
          parse_args(fit_schema(), {"--model.label_smoothing=0.1"}, {}).config)
          .label_smoothing,
      0.1);
  const Result r = run_cli({"fit", "--model.label_smoothing=1.5"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("model.label_smoothing"));
}

TEST(Cli, ClassWeightsReachTheClassifierOnePerClass) {
  const FitConfig plain =
      to_fit_config(parse_args(fit_schema(), {}, {}).config);
  EXPECT_TRUE(plain.class_weights.empty());
  const FitConfig weighted = to_fit_config(
      parse_args(fit_schema(), {"--model.class_weights=[1, 0.5, 2]"}, {})
          .config);
  EXPECT_EQ(weighted.class_weights, (std::vector<double>{1, 0.5, 2}));
  const train::ClassifierOptions options = classifier_options(weighted, 3);
  EXPECT_EQ(options.class_weights, weighted.class_weights);
  EXPECT_EQ(options.top_k, weighted.top_k);
  EXPECT_THAT(
      [&] { classifier_options(weighted, 10); },
      ::testing::ThrowsMessage<hotloop::ConfigError>(
          HasSubstr("model.class_weights has 3 weights for 10 classes: give "
                    "one per class")));
  // Fashion-MNIST's ten classes, given three weights: refused before any
  // data is read.
  const Result few = run_cli(
      {"fit",
       "--data.dataset=synthetic",
       "--model.class_weights=[1, 0.5, 2]",
       "--trainer.accelerator=cpu"});
  EXPECT_EQ(few.code, 2);
  EXPECT_THAT(few.err, HasSubstr("model.class_weights has 3 weights for 10"));
  const Result negative = run_cli(
      {"fit",
       "--data.dataset=synthetic",
       "--model.num_classes=2",
       "--model.class_weights=[1, -2]",
       "--trainer.accelerator=cpu"});
  EXPECT_EQ(negative.code, 2);
  EXPECT_THAT(negative.err, HasSubstr("model.class_weights[1] is -2"));
  // A model without classes is told so rather than left unweighted.
  EXPECT_THAT(
      [] {
        to_fit_config(parse_args(
                          fit_schema(),
                          {"--model.name=gpt",
                           "--data.dataset=text",
                           "--data.path=tokens.bin",
                           "--model.class_weights=[1, 2]"},
                          {})
                          .config);
      },
      ::testing::ThrowsMessage<hotloop::ConfigError>(
          HasSubstr("model.class_weights weighs a classifier's classes; "
                    "model.name=gpt with model.task=classification has "
                    "none")));
}

TEST(Cli, RmspropAndAdagradTakePyTorchsDefaultsForTheKeysTheyShare) {
  const auto optimizer = [](std::vector<std::string> args) {
    return to_fit_config(parse_args(fit_schema(), args, {}).config).optimizer;
  };
  const optim::OptimizerOptions rmsprop =
      optimizer({"--optimizer.name=rmsprop"});
  EXPECT_EQ(rmsprop.momentum, 0.0); // PyTorch's RMSprop, not SGD's 0.9
  EXPECT_EQ(rmsprop.alpha, 0.99);
  EXPECT_FALSE(rmsprop.centered);
  EXPECT_EQ(rmsprop.eps, 1e-8);
  EXPECT_EQ(
      optimizer({"--optimizer.name=rmsprop", "--optimizer.momentum=0.9"})
          .momentum,
      0.9);
  EXPECT_EQ(optimizer({"--optimizer.name=adagrad"}).eps, 1e-10);
  EXPECT_EQ(
      optimizer({"--optimizer.name=adagrad", "--optimizer.eps=1e-8"}).eps,
      1e-8);
  EXPECT_EQ(optimizer({"--optimizer.name=sgd"}).momentum, 0.9);
  const optim::OptimizerOptions centered = optimizer(
      {"--optimizer.name=rmsprop",
       "--optimizer.alpha=0.9",
       "--optimizer.centered=true"});
  EXPECT_EQ(centered.alpha, 0.9);
  EXPECT_TRUE(centered.centered);
}

TEST(Cli, SharedScheduleKeysTakeEachSchedulesPyTorchDefaultsWhenLeftOut) {
  const auto scheduler = [](std::vector<std::string> args) {
    return to_fit_config(parse_args(fit_schema(), args, {}).config).scheduler;
  };
  const optim::SchedulerOptions constant =
      scheduler({"--lr_scheduler.name=constant"});
  EXPECT_DOUBLE_EQ(constant.factor, 1.0 / 3);
  EXPECT_EQ(constant.total_iters, 5);
  const optim::SchedulerOptions given = scheduler(
      {"--lr_scheduler.name=constant",
       "--lr_scheduler.factor=0.5",
       "--lr_scheduler.total_iters=7"});
  EXPECT_DOUBLE_EQ(given.factor, 0.5);
  EXPECT_EQ(given.total_iters, 7);

  const optim::SchedulerOptions cyclic =
      scheduler({"--lr_scheduler.name=cyclic", "--lr_scheduler.max_lr=0.1"});
  EXPECT_EQ(cyclic.cyclic_mode, "triangular");
  EXPECT_DOUBLE_EQ(cyclic.gamma, 1.0);
  EXPECT_DOUBLE_EQ(cyclic.base_momentum, 0.8);
  EXPECT_DOUBLE_EQ(cyclic.max_momentum, 0.9);
  EXPECT_EQ(cyclic.step_size_up, 2000);
  const optim::SchedulerOptions exp_range = scheduler(
      {"--lr_scheduler.name=cyclic",
       "--lr_scheduler.mode=exp_range",
       "--lr_scheduler.gamma=0.99"});
  EXPECT_EQ(exp_range.cyclic_mode, "exp_range");
  EXPECT_DOUBLE_EQ(exp_range.gamma, 0.99);

  // The other schedules keep the keys' own defaults.
  const optim::SchedulerOptions plateau =
      scheduler({"--lr_scheduler.name=plateau"});
  EXPECT_DOUBLE_EQ(plateau.factor, 0.1);
  EXPECT_EQ(plateau.mode, "min");
  EXPECT_DOUBLE_EQ(
      scheduler({"--lr_scheduler.name=onecycle"}).base_momentum, 0.85);
}

TEST(Cli, TheGptsKernelChoicesReachItsOptions) {
  const FitConfig chosen =
      to_fit_config(parse_args(
                        fit_schema(),
                        {"--model.fused_layer_norm=false",
                         "--model.fused_cross_entropy=false",
                         "--model.fused_bias_gradient=false",
                         "--model.loss_chunk_size=512"},
                        {})
                        .config);
  EXPECT_FALSE(chosen.gpt.fused_layer_norm());
  EXPECT_FALSE(chosen.gpt.fused_cross_entropy());
  EXPECT_FALSE(chosen.gpt.fused_bias_gradient());
  EXPECT_EQ(chosen.gpt.loss_chunk_size(), 512);
  const FitConfig defaults = to_fit_config(parse_args(fit_schema(), {}, {}).config);
  // On by default since they were measured (GptOptions' defaults).
  EXPECT_TRUE(defaults.gpt.fused_layer_norm());
  EXPECT_TRUE(defaults.gpt.fused_cross_entropy());
  EXPECT_TRUE(defaults.gpt.fused_bias_gradient());
  EXPECT_EQ(defaults.gpt.loss_chunk_size(), 4096);
}

TEST(Cli, EveryTrainerOptionReachesTheTrainerUnderItsName) {
  const ParsedArgs parsed = parse_args(fit_schema(), trainer_overrides(), {});
  const train::TrainerOptions t = to_fit_config(parsed.config).trainer;
  EXPECT_EQ(t.max_epochs(), 7);
  EXPECT_EQ(t.min_epochs(), 2);
  EXPECT_EQ(t.max_steps(), 99);
  EXPECT_EQ(t.max_time(), 3600);
  EXPECT_EQ(t.limit_train_batches(), 5);
  EXPECT_EQ(t.limit_val_batches(), 0.25);
  EXPECT_EQ(t.limit_test_batches(), 3);
  EXPECT_EQ(t.limit_predict_batches(), 2);
  EXPECT_EQ(t.val_check_interval(), 0.5);
  EXPECT_EQ(t.check_val_every_n_epoch(), 3);
  EXPECT_EQ(t.num_sanity_val_steps(), -1);
  EXPECT_EQ(t.overfit_batches(), 6);
  EXPECT_EQ(t.fast_dev_run(), 0);
  EXPECT_EQ(t.accumulate_grad_batches(), 4);
  EXPECT_EQ(t.gradient_clip_val(), 0.5);
  EXPECT_EQ(t.gradient_clip_algorithm(), "value");
  EXPECT_EQ(t.precision(), "bf16-mixed");
  EXPECT_FALSE(t.zero_grad_set_to_none());
  EXPECT_TRUE(t.deterministic());
  EXPECT_FALSE(t.benchmark());
  EXPECT_EQ(t.benchmark_limit(), 3);
  EXPECT_EQ(t.sdpa_backend(), "math");
  EXPECT_TRUE(t.detect_anomaly());
  EXPECT_FALSE(t.inference_mode());
  EXPECT_EQ(t.accelerator(), "cpu");
  EXPECT_EQ(t.devices(), "1");
  EXPECT_TRUE(t.channels_last());
  EXPECT_TRUE(t.cuda_graphs());
  EXPECT_EQ(t.seed(), 11);
  EXPECT_EQ(t.profiler(), "pytorch");
  EXPECT_EQ(t.profiler_steps(), 3);
  EXPECT_EQ(t.profiler_skip_steps(), 0);
  EXPECT_EQ(t.peak_tflops(), 989.4);
  EXPECT_EQ(t.default_root_dir(), "elsewhere");
  EXPECT_EQ(t.name(), "other");
  EXPECT_EQ(t.num_threads(), 3);
  EXPECT_EQ(t.blas_threads(), 2);
  EXPECT_FALSE(t.retain_host_memory());
  EXPECT_FALSE(t.enable_checkpointing());
  EXPECT_FALSE(t.handle_signals());
  EXPECT_FALSE(t.enable_progress_bar());
  EXPECT_EQ(t.log_every_n_steps(), 9);
  EXPECT_EQ(t.flush_logs_every_n_steps(), 8);
  EXPECT_FALSE(t.logger());
  EXPECT_TRUE(t.new_folder_on_resume());
  EXPECT_EQ(t.on_nonfinite_loss(), "skip_step");
  // The data-parallel ones go to the launcher and the process group.
  const FitConfig f = to_fit_config(parsed.config);
  EXPECT_EQ(f.strategy, "ddp");
  EXPECT_EQ(f.num_nodes, 3);
  EXPECT_EQ(f.group.backend(), "gloo");
  EXPECT_EQ(f.group.timeout(), 42);
  EXPECT_TRUE(f.ddp.sync_batchnorm());
  EXPECT_TRUE(f.model.sync_batchnorm);
  // The TensorBoard logger's.
  EXPECT_EQ(f.histogram_every_n_epochs, 5);
  EXPECT_FALSE(f.log_images);
  // Every trainer option was set above: a new option must be added here,
  // and to to_fit_config.
  int64_t trainer_options = 0;
  for (const auto& option : fit_schema().options()) {
    trainer_options += option.key.rfind("trainer.", 0) == 0 ? 1 : 0;
  }
  EXPECT_EQ(trainer_options, 53);
}

TEST(Cli, TheTrainerOptionsReadFromAYamlFileAsFromTheCommandLine) {
  TempDir dir;
  std::ofstream yaml(dir.file("c.yaml"));
  yaml << "trainer:\n";
  for (const std::string& flag : trainer_overrides()) {
    const size_t eq = flag.find('=');
    yaml << "  "
         << flag.substr(
                std::string("--trainer.").size(),
                eq - std::string("--trainer.").size())
         << ": " << flag.substr(eq + 1) << "\n";
  }
  yaml.close();
  const ParsedArgs from_file =
      parse_args(fit_schema(), {"--config=" + dir.file("c.yaml")}, {});
  const ParsedArgs from_flags =
      parse_args(fit_schema(), trainer_overrides(), {});
  EXPECT_EQ(from_file.config.flat(), from_flags.config.flat());
  EXPECT_EQ(to_fit_config(from_file.config).trainer.max_epochs(), 7);
}

TEST(Cli, AKeyFarFromEveryOptionGetsNoSuggestion) {
  // Sharing the section is no likeness: trainer.bogus is not a typo of
  // trainer.logger.
  TempDir dir;
  std::ofstream(dir.file("x.yaml")) << "trainer:\n  bogus: 1\n";
  Result r = run_cli({"fit", "--config", dir.file("x.yaml")});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown key 'trainer.bogus'\n"));
  r = run_cli({"fit", "--trainer.bogus=1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown option '--trainer.bogus'\n"));
  r = run_cli({"fit", "--trainer.loger=false"});
  EXPECT_THAT(r.err, HasSubstr("did you mean '--trainer.logger'?"));
}

TEST(Cli, UnknownCommandListsTheCommands) {
  const Result r = run_cli({"train"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err,
      HasSubstr("hotloop: error: unknown command 'train' (expected fit, "));
  EXPECT_THAT(r.err, HasSubstr("hint: 'hotloop --help' lists the commands"));
  EXPECT_THAT(r.err, Not(HasSubstr("hotloop train --help")));
}

TEST(Cli, UnknownOptionSuggestsTheClosestOne) {
  const Result r = run_cli({"fit", "--trainer.max_epoch=2"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("'--trainer.max_epoch'"));
  EXPECT_THAT(r.err, HasSubstr("did you mean '--trainer.max_epochs'?"));
  EXPECT_THAT(
      r.err, HasSubstr("hint: 'hotloop fit --help' lists every option"));
}

TEST(Cli, BadValuesAreConfigErrors) {
  Result r = run_cli({"fit", "--data.batch_size=big"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err, HasSubstr("data.batch_size: expected an integer, got 'big'"));
  r = run_cli({"fit", "--data.batch_size=0"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("data.batch_size: must be >= 1, got 0"));
  // -1 is "no limit" for max_epochs and max_steps; 0 and below -1 are not.
  for (const std::string key : {"max_epochs", "max_steps"}) {
    r = run_cli({"fit", "--trainer." + key + "=0"});
    EXPECT_EQ(r.code, 2);
    EXPECT_THAT(
        r.err, HasSubstr("trainer." + key + " must be positive or -1, got 0"));
    r = run_cli({"fit", "--trainer." + key + "=-2"});
    EXPECT_EQ(r.code, 2);
    EXPECT_THAT(r.err, HasSubstr("trainer." + key + ": must be >= -1, got -2"));
  }
}

TEST(Cli, MalformedYamlNamesTheFile) {
  TempDir dir;
  std::ofstream(dir.file("bad.yaml")) << "trainer:\n  max_epochs: [1, 2\n";
  const Result r = run_cli({"fit", "--config", dir.file("bad.yaml")});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr(dir.file("bad.yaml")));
  EXPECT_THAT(r.err, HasSubstr("malformed YAML"));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 2) << r.err;
}

TEST(Cli, MissingDatasetFolderIsNamed) {
  TempDir dir;
  const Result r = run_cli(small_fit(dir));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(
      r.err,
      HasSubstr("dataset folder '" + dir.file("data") + "' does not exist"));
  EXPECT_FALSE(fs::exists(dir.file("runs")));
}

TEST(Cli, CorruptDatasetFileIsNamed) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 64, 32);
  hotloop::testing::write_bytes(
      dir.file("data/train-images-idx3-ubyte.gz"), {1, 2, 3, 4, 5});
  const Result r = run_cli(small_fit(dir));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(
      r.err,
      HasSubstr(
          dir.file("data/train-images-idx3-ubyte.gz") + ": not an IDX file"));
}

TEST(Cli, FitThenValidateTestAndResumeTheCheckpoint) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 256, 100);
  Result r = run_cli(small_fit(dir));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("epoch 2/2  train_loss "));
  EXPECT_THAT(r.out, HasSubstr("done: 2 epochs, 16 steps"));
  const fs::path run =
      fs::path(dir.file("runs")) / "fashion_mnist" / "version_0";
  EXPECT_TRUE(fs::is_regular_file(run / "summary.json"));
  EXPECT_TRUE(fs::is_regular_file(run / "checkpoints" / "last.ckpt"));
  // The loggers' files, the model summary and the profile.
  EXPECT_TRUE(fs::is_regular_file(run / "metrics.csv"));
  EXPECT_TRUE(fs::is_regular_file(run / "hparams.yaml"));
  int64_t event_files = 0;
  for (const auto& entry : fs::directory_iterator(run)) {
    event_files +=
        entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  }
  EXPECT_EQ(event_files, 1);
  // Two epoch rows (16 steps log no step row at log_every_n_steps 50).
  const log::MetricsTable metrics =
      log::read_metrics_csv((run / "metrics.csv").string());
  ASSERT_EQ(metrics.rows(), 2u);
  EXPECT_EQ(metrics.column("step")[0], 8.0);
  EXPECT_EQ(metrics.column("step")[1], 16.0);
  EXPECT_EQ(metrics.column("epoch")[1], 1.0);
  EXPECT_EQ(metrics.column("val_acc")[1], summary_value(run, "val_acc"));
  // The event file carries the config as text and the epoch scalars.
  const std::string events = event_file_bytes(run);
  EXPECT_THAT(events, HasSubstr("trainer:")); // the YAML, as text
  EXPECT_THAT(events, HasSubstr("val_acc"));
  EXPECT_THAT(events, HasSubstr("_hparams_/experiment"));
  EXPECT_THAT(r.out, HasSubstr("network.features.0  Conv2d"));
  EXPECT_THAT(r.out, HasSubstr("verdict: "));
  std::ifstream summary_file(run / "summary.json");
  const auto summary = nlohmann::json::parse(summary_file);
  EXPECT_EQ(summary.at("profile").at("steps"), 16);
  EXPECT_GT(summary.at("profile").at("flops_per_s").get<double>(), 0);
  EXPECT_GT(summary.at("model").at("total_params").get<int64_t>(), 0);

  r = run_cli({"report", run.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("wrote " + (run / "report.html").string()));
  EXPECT_TRUE(fs::is_regular_file(run / "report.html"));
  r = run_cli({"report", dir.file("nothing")});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr(dir.file("nothing")));
  r = run_cli({"report"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("hotloop report needs the run folder"));

  // The saved config is complete: it reproduces the run's settings.
  Config saved(fit_schema());
  saved.merge_yaml_file((run / "config.yaml").string());
  EXPECT_EQ(saved.get_int("trainer.max_epochs"), 2);
  EXPECT_EQ(saved.get_string("data.root"), dir.file("data"));

  const std::string config = "--config=" + (run / "config.yaml").string();
  r = run_cli({"validate", config, "--ckpt_path", "last"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("val_acc "));
  r = run_cli(
      {"test",
       config,
       "--ckpt_path",
       (run / "checkpoints" / "last.ckpt").string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("test_acc "));
  r = run_cli({"validate", config});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err,
      HasSubstr("hotloop validate needs --ckpt_path PATH (or last, or best)"));
  // best: the checkpoint the newest finished run kept as best, as
  // Lightning's ckpt_path="best".
  const std::string best = summary.at("best_checkpoint").get<std::string>();
  ASSERT_FALSE(best.empty());
  r = run_cli({"test", config, "--ckpt_path", "best"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr(best));
  EXPECT_THAT(r.out, HasSubstr("test_acc "));
  r = run_cli(
      {"validate",
       config,
       "--ckpt_path=best",
       "--trainer.default_root_dir=" + dir.file("no_runs")});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(
      r.err,
      HasSubstr(
          "--ckpt_path=best: no finished run under '" + dir.file("no_runs")));
  r = run_cli(small_fit(dir, {"--ckpt_path=best"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err,
      HasSubstr("--ckpt_path=best is for validate, test and predict; a fit "
                "resumes from last, auto or a path"));

  // The same limits again: nothing is trained, and the output says so.
  r = run_cli(small_fit(dir, {"--ckpt_path=last"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(
      r.out,
      HasSubstr("nothing to train: the checkpoint has completed 2 epochs and "
                "trainer.max_epochs=2 (raise it to train further)\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("epoch 1/2")));

  r = run_cli(small_fit(dir, {"--trainer.max_epochs=3", "--ckpt_path=last"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("nothing to train")));
  EXPECT_THAT(
      r.out,
      HasSubstr(
          "resumed from " + (run / "checkpoints" / "last.ckpt").string()));
  EXPECT_THAT(r.out, HasSubstr("epoch 3/3"));
  EXPECT_THAT(r.out, Not(HasSubstr("epoch 1/3")));
}

TEST(Cli, AResumedRunGoesOnInItsFolderWithOneHistory) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 64, 20);
  const fs::path run = fs::path(dir.file("runs")) / "fashion_mnist";
  const std::vector<std::string> flags = {
      "--trainer.max_epochs=3",
      "--trainer.log_every_n_steps=1",
      "--model_checkpoint.save_top_k=-1"};
  Result r = run_cli(small_fit(dir, flags));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string whole =
      read_text((run / "version_0" / "metrics.csv").string());
  // Resume from the first epoch's checkpoint: the rows of the later steps
  // are dropped and logged again, the same values (the resume is bitwise).
  const std::string ckpt =
      (run / "version_0" / "checkpoints" / "epoch=0-step=2.ckpt").string();
  std::vector<std::string> resume = flags;
  resume.push_back("--ckpt_path=" + ckpt);
  r = run_cli(small_fit(dir, resume));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("resumed from " + ckpt + " after epoch 1"));
  EXPECT_THAT(r.out, HasSubstr("run folder " + (run / "version_0").string()));
  EXPECT_FALSE(fs::exists(run / "version_1"));
  const std::string first_path = dir.file("first_metrics.csv");
  std::ofstream(first_path) << whole;
  EXPECT_EQ(
      metric_rows((run / "version_0" / "metrics.csv").string()),
      metric_rows(first_path));
  // TensorBoard gets a second event file, which starts with the restart.
  int event_files = 0;
  for (const auto& entry : fs::directory_iterator(run / "version_0")) {
    event_files +=
        entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  }
  EXPECT_EQ(event_files, 2);
  // A new folder when asked for.
  resume.push_back("--trainer.new_folder_on_resume=true");
  r = run_cli(small_fit(dir, resume));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::is_regular_file(run / "version_1" / "metrics.csv"));
}

TEST(Cli, AnEmptyMonitorKeepsTheNewestAndStepSavesWaitForTheMetric) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 64, 20);
  // `--model_checkpoint.monitor=` is the empty string: keep the newest.
  Result r = run_cli(small_fit(
      dir,
      {"--model_checkpoint.monitor=",
       "--model_checkpoint.save_top_k=1",
       "--trainer.name=newest"}));
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<std::string> files;
  for (const auto& entry :
       fs::directory_iterator(dir.file("runs/newest/version_0/checkpoints"))) {
    files.push_back(entry.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  EXPECT_EQ(
      files, (std::vector<std::string>{"epoch=1-step=4.ckpt", "last.ckpt"}));
  // A validation metric with saves every step: before the first validation
  // there is nothing to rank by, so only last.ckpt is written, as Lightning.
  r = run_cli(small_fit(
      dir,
      {"--model_checkpoint.every_n_train_steps=1",
       "--model_checkpoint.monitor=val_acc",
       "--trainer.num_sanity_val_steps=0",
       "--trainer.name=steps"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(
      r.out,
      HasSubstr("ModelCheckpoint: step 1 has no val_acc to rank by before the "
                "first validation; saving only last.ckpt until then"));
  EXPECT_TRUE(fs::is_regular_file(
      dir.file("runs/steps/version_0/checkpoints/last.ckpt")));
}

TEST(Cli, CheckpointCommandShowsAndVerifiesACheckpoint) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 64, 20);
  Result r = run_cli(small_fit(dir, {"--trainer.max_epochs=1"}));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string ckpt =
      dir.file("runs/fashion_mnist/version_0/checkpoints/last.ckpt");
  r = run_cli({"checkpoint", ckpt});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("checkpoint " + ckpt + " ("));
  EXPECT_THAT(
      r.out,
      ::testing::ContainsRegex(
          "integrity: verified \\(crc32 [0-9a-f]{8}\\), format 2, written by "
          "hotloop " HOTLOOP_VERSION " with LibTorch [0-9.]+"));
  EXPECT_THAT(r.out, HasSubstr("progress: 1 epoch completed, step 2\n"));
  EXPECT_THAT(
      r.out, ::testing::ContainsRegex("model: [0-9]+ parameters and buffers"));
  EXPECT_THAT(r.out, HasSubstr("optimizers: 1, schedules: 1"));
  EXPECT_THAT(r.out, HasSubstr("metrics: "));
  // Another model size is refused, naming the parameter and both shapes.
  r = run_cli(small_fit(dir, {"--model.hidden=64", "--ckpt_path=" + ckpt}));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(
      r.err,
      ::testing::ContainsRegex(
          "the checkpoint's model differs from this one: '[a-z_.0-9]+' is "
          "\\[16, [0-9]+\\] in the checkpoint and \\[64, [0-9]+\\] here"));
  // Damaged: the command says so and exits 1; a resume refuses it.
  std::string bytes = read_text(ckpt);
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 1);
  std::ofstream(ckpt, std::ios::binary | std::ios::trunc) << bytes;
  r = run_cli({"checkpoint", ckpt});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.out, HasSubstr("integrity: CORRUPTED: its checksum says "));
  EXPECT_THAT(
      r.out,
      HasSubstr("content: not read (the file changed after "
                "hotloop wrote it)\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("progress:")));
  r = run_cli(small_fit(dir, {"--ckpt_path=" + ckpt}));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr(ckpt + ": corrupted checkpoint"));
  // Without a seal (an older hotloop's) and damaged: the zip's CRC-32s say so.
  const size_t seal = bytes.rfind("hotloop-checkpoint ");
  ASSERT_NE(seal, std::string::npos);
  bytes.resize(seal);
  bytes[seal - 2] = 0;
  bytes[seal - 1] = 0;
  std::ofstream(ckpt, std::ios::binary | std::ios::trunc) << bytes;
  r = run_cli({"checkpoint", ckpt});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(
      r.out,
      ::testing::ContainsRegex(
          "integrity: CORRUPTED: record '[^']+' fails its CRC-32 check"));
  EXPECT_THAT(
      r.out,
      HasSubstr("content: not read (LibTorch's reader does "
                "not check damaged records)\n"));
  r = run_cli({"checkpoint"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("usage: hotloop checkpoint PATH"));
}

TEST(Cli, LoggerFalseWritesNoMetricsFiles) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 64, 20);
  const Result r = run_cli(
      small_fit(dir, {"--trainer.max_epochs=1", "--trainer.logger=false"}));
  ASSERT_EQ(r.code, 0) << r.err;
  const fs::path run =
      fs::path(dir.file("runs")) / "fashion_mnist" / "version_0";
  EXPECT_TRUE(fs::is_regular_file(run / "summary.json"));
  EXPECT_TRUE(fs::is_regular_file(run / "config.yaml"));
  EXPECT_FALSE(fs::exists(run / "metrics.csv"));
  EXPECT_FALSE(fs::exists(run / "hparams.yaml"));
  for (const auto& entry : fs::directory_iterator(run)) {
    EXPECT_NE(entry.path().filename().string().rfind("events.out", 0), 0u)
        << entry.path();
  }
}

TEST(Cli, TensorBoardsHistogramsAndImagesAreOptions) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 64, 20);
  const fs::path runs = fs::path(dir.file("runs")) / "fashion_mnist";
  // The defaults: scalars and the input grid, no histograms.
  Result r = run_cli(small_fit(dir, {"--trainer.max_epochs=1"}));
  ASSERT_EQ(r.code, 0) << r.err;
  std::string events = event_file_bytes(runs / "version_0");
  EXPECT_THAT(events, HasSubstr("val_acc"));
  EXPECT_THAT(events, HasSubstr("train/input_samples"));
  EXPECT_THAT(events, Not(HasSubstr("gradients/")));
  EXPECT_THAT(events, Not(HasSubstr("weights/")));
  r = run_cli(small_fit(
      dir, {"--trainer.max_epochs=1", "--trainer.histogram_every_n_epochs=1"}));
  ASSERT_EQ(r.code, 0) << r.err;
  events = event_file_bytes(runs / "version_1");
  EXPECT_THAT(events, HasSubstr("gradients/network.features.0.weight"));
  EXPECT_THAT(events, HasSubstr("weights/network.features.0.weight"));
  r = run_cli(small_fit(
      dir,
      {"--trainer.max_epochs=1",
       "--trainer.histogram_every_n_epochs=0",
       "--trainer.log_images=false"}));
  ASSERT_EQ(r.code, 0) << r.err;
  events = event_file_bytes(runs / "version_2");
  EXPECT_THAT(events, HasSubstr("val_acc")); // the scalars stay
  EXPECT_THAT(events, Not(HasSubstr("gradients/")));
  EXPECT_THAT(events, Not(HasSubstr("weights/")));
  EXPECT_THAT(events, Not(HasSubstr("train/input_samples")));
  // Every second epoch: none in a one-epoch run.
  r = run_cli(small_fit(
      dir, {"--trainer.max_epochs=1", "--trainer.histogram_every_n_epochs=2"}));
  ASSERT_EQ(r.code, 0) << r.err;
  events = event_file_bytes(runs / "version_3");
  EXPECT_THAT(events, Not(HasSubstr("gradients/")));
  EXPECT_THAT(events, HasSubstr("train/input_samples"));
  r = run_cli(small_fit(dir, {"--trainer.histogram_every_n_epochs=-1"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err,
      HasSubstr("trainer.histogram_every_n_epochs: must be >= 0, got -1"));
}

TEST(Cli, ConfigSectionsBuildTheCallbacksAndPredictWritesACsv) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 256, 100);
  Result r = run_cli(small_fit(
      dir,
      {"--trainer.max_epochs=4",
       "--model_checkpoint.filename={epoch}-{val_acc:.3f}",
       "--early_stopping.enabled=true",
       "--early_stopping.monitor=val_acc",
       "--early_stopping.mode=max",
       "--early_stopping.stopping_threshold=0.0"}));
  ASSERT_EQ(r.code, 0) << r.err;
  // Any accuracy beats 0: early stopping ends the fit after epoch 1.
  EXPECT_THAT(r.out, HasSubstr("early stopping: stopping threshold reached"));
  EXPECT_THAT(r.out, HasSubstr("done: 1 epoch, 8 steps"));
  const fs::path checkpoints = fs::path(dir.file("runs")) / "fashion_mnist" /
                               "version_0" / "checkpoints";
  int64_t best = 0;
  for (const auto& entry : fs::directory_iterator(checkpoints)) {
    best += entry.path().filename().string().rfind("epoch=0-val_acc=", 0) == 0;
  }
  EXPECT_EQ(best, 1);
  EXPECT_THAT(r.out, HasSubstr("; best checkpoint " + checkpoints.string()));

  const std::string config =
      "--config=" + (checkpoints.parent_path() / "config.yaml").string();
  const std::string csv = dir.file("predictions.csv");
  r = run_cli({"predict", config, "--ckpt_path=last", "--output=" + csv});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("100 rows written to " + csv));
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);
  // Fashion-MNIST's classes have names: they and the top-k are written.
  EXPECT_EQ(
      line, "index,prediction,class,probability,target,target_class,top5");
  int64_t rows = 0;
  while (std::getline(in, line)) {
    ++rows;
    if (rows == 1) {
      EXPECT_THAT(
          line,
          ::testing::MatchesRegex(
              "0,[0-9],[^,]+,0\\.[0-9]+,[0-9],[^,]+,\"?[^:]+:0\\.[0-9]+ .*"));
    }
  }
  EXPECT_EQ(rows, 100);
  // limit_predict_batches: the count says the rows written (2 x 50).
  r = run_cli(
      {"predict",
       config,
       "--ckpt_path=last",
       "--output=" + csv,
       "--trainer.limit_predict_batches=2"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr(": 100 rows written"));
  r = run_cli(
      {"predict",
       config,
       "--ckpt_path=last",
       "--output=" + csv,
       "--trainer.limit_predict_batches=1"});
  EXPECT_THAT(r.out, HasSubstr(": 50 rows written"));
  r = run_cli({"predict", config});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err,
      HasSubstr("hotloop predict needs --ckpt_path PATH (or last, or best)"));
}

// An image folder of 200 quadrant PNGs in 4 named classes, trained on
// with a small CNN; `extra` adds flags.
std::vector<std::string> folder_fit(
    const TempDir& dir, std::vector<std::string> extra = {}) {
  if (!fs::exists(dir.file("images"))) {
    hotloop::testing::write_image_folder(dir.file("images"), 200, 16, 1);
  }
  std::vector<std::string> args = {
      "fit",
      "--trainer.accelerator=cpu",
      "--data.dataset=image_folder",
      "--data.root=" + dir.file("images"),
      "--data.image_size=[16]",
      "--data.channels=1",
      "--data.train_crop=resize",
      "--data.val_crop=resize",
      "--data.horizontal_flip=false",
      "--data.batch_size=16",
      "--data.val_batch_size=20",
      "--model.channels=[8]",
      "--model.hidden=16",
      "--model.top_k=2",
      "--optimizer.lr=0.01",
      "--trainer.max_epochs=3",
      "--trainer.name=folder",
      "--trainer.default_root_dir=" + dir.file("runs")};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(Cli, AnImageFolderTrainsWithItsClassesAndPredictionsNameThem) {
  TempDir dir;
  Result r = run_cli(folder_fit(dir));
  ASSERT_EQ(r.code, 0) << r.err;
  // A seeded tenth of the 200 images validates; the classes are the
  // folders, sorted, and the model's head has one logit per class.
  EXPECT_THAT(r.out, HasSubstr("fit: 180 training samples"));
  const fs::path run = fs::path(dir.file("runs")) / "folder" / "version_0";
  EXPECT_EQ(
      read_text((run / "classes.txt").string()), "east\nnorth\nsouth\nwest\n");
  EXPECT_GE(summary_value(run, "val_acc"), 0.9);

  const std::string csv = dir.file("predictions.csv");
  r = run_cli(
      {"predict",
       "--config=" + (run / "config.yaml").string(),
       "--ckpt_path=last",
       "--output=" + csv});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("20 rows written"));
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(
      line, "index,file,prediction,class,probability,target,target_class,top2");
  int64_t rows = 0;
  int64_t right = 0;
  const std::vector<std::string> names = {"east", "north", "south", "west"};
  while (std::getline(in, line)) {
    std::vector<std::string> fields;
    std::stringstream row(line);
    for (std::string field; std::getline(row, field, ',');) {
      fields.push_back(field);
    }
    ASSERT_EQ(fields.size(), 8u) << line;
    // The file lies in its class's folder, and the names follow the
    // indices.
    const int64_t target = std::stoll(fields[5]);
    EXPECT_EQ(fields[6], names.at(target));
    EXPECT_THAT(fields[1], HasSubstr("/images/" + names.at(target) + "/"));
    EXPECT_EQ(fields[3], names.at(std::stoll(fields[2])));
    EXPECT_EQ(fields[7].substr(0, fields[3].size() + 1), fields[3] + ":");
    right += fields[2] == fields[5];
    ++rows;
  }
  EXPECT_EQ(rows, 20);
  EXPECT_GE(right, 18);

  // Images without classes: every file under a folder, predicted.
  hotloop::testing::write_image_folder(dir.file("new"), 8, 16, 5);
  const std::string fresh = dir.file("fresh.csv");
  r = run_cli(
      {"predict",
       "--config=" + (run / "config.yaml").string(),
       "--ckpt_path=last",
       "--data.predict_root=" + dir.file("new"),
       // The classes come from the checkpoint: no training folder needed.
       "--data.root=" + dir.file("gone"),
       "--output=" + fresh});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("8 rows written"));
  {
    std::ifstream unlabeled(fresh);
    std::getline(unlabeled, line);
    EXPECT_EQ(line, "index,file,prediction,class,probability,top2");
    std::getline(unlabeled, line);
    EXPECT_THAT(line, HasSubstr(dir.file("new") + "/"));
  }

  // The fit left its last validation's confusion for the report (counted
  // in that pass: it agrees with its val_acc), and test prints each
  // class's accuracy and the matrix.
  const auto table = log::read_confusion_csv((run / "confusion.csv").string());
  EXPECT_EQ(table.names, names);
  const at::Tensor counted =
      hotloop::testing::read_confusion_counts((run / "confusion.csv").string());
  EXPECT_EQ(counted.sum().item<int64_t>(), 20);
  EXPECT_DOUBLE_EQ(
      counted.trace().item<int64_t>() / 20.0, summary_value(run, "val_acc"));
  r = run_cli(
      {"test",
       "--config=" + (run / "config.yaml").string(),
       "--ckpt_path=last"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(
      r.out,
      HasSubstr(
          "per class (accuracy: the share of the class predicted right)"));
  EXPECT_THAT(
      r.out, ::testing::ContainsRegex("\n  north +[01]\\.[0-9]{4} +[0-9]+\n"));
  EXPECT_THAT(
      r.out,
      HasSubstr("confusion matrix (rows: true class, columns: predicted)"));

  // Validation off: no last validation, so no confusion, and no pass of
  // the fit's own to make one.
  r = run_cli(folder_fit(
      dir,
      {"--trainer.limit_val_batches=0",
       "--trainer.max_epochs=1",
       "--model_checkpoint.monitor=",
       "--trainer.name=unvalidated"}));
  ASSERT_EQ(r.code, 0) << r.err;
  const fs::path unvalidated =
      fs::path(dir.file("runs")) / "unvalidated" / "version_0";
  EXPECT_TRUE(fs::exists(unvalidated / "summary.json"));
  EXPECT_FALSE(fs::exists(unvalidated / "confusion.csv"));
}

TEST(Cli, AnImageFolderWithAValidationFolderAndItsMistakes) {
  TempDir dir;
  hotloop::testing::write_image_folder(dir.file("val"), 40, 16, 2);
  Result r = run_cli(folder_fit(
      dir,
      {"--data.val_root=" + dir.file("val"),
       "--trainer.max_epochs=1",
       "--data.train_crop=random_resized_crop",
       "--data.crop_scale=[0.5, 1.0]"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("fit: 200 training samples"));

  // A validation class the training folder lacks.
  hotloop::testing::write_image_folder(
      dir.file("odd"), 8, 16, 3, {"north", "east", "south", "up"});
  r = run_cli(folder_fit(dir, {"--data.val_root=" + dir.file("odd")}));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(
      r.err,
      HasSubstr(
          dir.file("odd") + "/up: class 'up' is not among the 4 "
                            "classes given (east, north, south, west)"));
  // The hint names the key whose folder the error is about.
  EXPECT_THAT(r.err, HasSubstr("hint: check data.val_root=" + dir.file("odd")));
  r = run_cli(folder_fit(dir, {"--data.val_root=" + dir.file("missing")}));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(
      r.err, HasSubstr("hint: check data.val_root=" + dir.file("missing")));
  // An empty class folder.
  fs::create_directories(dir.file("images/empty"));
  r = run_cli(folder_fit(dir));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(
      r.err,
      HasSubstr(
          dir.file("images/empty") +
          ": no images (expected .jpg, .jpeg or .png files)"));
  fs::remove(dir.file("images/empty"));
  // No data.root.
  r = run_cli({"fit", "--data.dataset=image_folder"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err,
      HasSubstr("data.dataset=image_folder needs data.root: a folder with a "
                "subfolder of images per class"));
  r = run_cli(folder_fit(dir, {"--data.image_size=[16, 16, 3]"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err,
      HasSubstr("data.image_size must be [height, width] or [side], "
                "positive, got [16, 16, 3]"));
  // A damaged file stops the run by name, or with data.on_bad_sample=skip
  // is counted and replaced.
  hotloop::testing::write_bytes(dir.file("images/north/broken.png"), {1, 2});
  r = run_cli(folder_fit(dir, {"--trainer.max_epochs=1"}));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(
      r.err, HasSubstr(dir.file("images/north/broken.png") + ": not a valid"));
  EXPECT_THAT(r.err, HasSubstr("hint: check data.root=" + dir.file("images")));
  r = run_cli(
      folder_fit(dir, {"--trainer.max_epochs=1", "--data.on_bad_sample=skip"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(
      r.out,
      HasSubstr(
          "data: skipped 1 unreadable file(s), each replaced by the "
          "next readable one\n  " +
          dir.file("images/north/broken.png") + ": not a valid"));
}

// An EMNIST-style folder: two sets side by side, "test" for the test
// split, labels 1..4 (EMNIST letters count from 1), 20 x 20 images.
void write_emnist_like(const std::string& root) {
  using hotloop::testing::idx_bytes;
  using hotloop::testing::quadrant_images;
  using hotloop::testing::write_bytes;
  fs::create_directories(root);
  for (const std::string set : {"emnist-letters-", "emnist-digits-"}) {
    for (const auto& [split, n, seed] :
         {std::tuple<std::string, int64_t, uint64_t>{"train", 160, 1},
          {"test", 40, 2}}) {
      const auto [images, labels] = quadrant_images(n, 20, seed);
      write_bytes(
          root + "/" + set + split + "-images-idx3-ubyte", idx_bytes(images));
      write_bytes(
          root + "/" + set + split + "-labels-idx1-ubyte.gz",
          idx_bytes((labels + 1).to(at::kByte)),
          true);
    }
  }
}

TEST(Cli, AnyMnistFamilyFolderTakesItsShapeClassesAndStatisticsFromTheFiles) {
  TempDir dir;
  write_emnist_like(dir.file("emnist"));
  std::vector<std::string> args = {
      "fit",
      "--trainer.accelerator=cpu",
      "--data.dataset=idx",
      "--data.root=" + dir.file("emnist"),
      "--data.batch_size=16",
      // A flip would swap the quadrants that tell the classes apart.
      "--data.horizontal_flip=false",
      "--model.channels=[8]",
      "--model.hidden=16",
      "--model.top_k=2",
      "--optimizer.lr=0.01",
      "--trainer.max_epochs=3",
      "--trainer.name=idx",
      "--trainer.default_root_dir=" + dir.file("runs")};
  // Two sets in one folder: which one is the user's to say.
  Result r = run_cli(args);
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(
      r.err,
      HasSubstr(
          dir.file("emnist") +
          ": several MNIST-format sets (emnist-digits-test-images-idx3-"
          "ubyte, emnist-letters-test-images-idx3-ubyte); choose one "
          "with data.idx_prefix"));
  args.push_back("--data.idx_prefix=emnist-letters-");
  r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  // 20 x 20 images; labels up to 4 make 5 classes.
  EXPECT_THAT(
      r.out, ::testing::ContainsRegex("network +FashionCnn .*\\[1, 5\\]"));
  EXPECT_THAT(r.out, HasSubstr("[1, 8, 20, 20]"));
  const fs::path run = fs::path(dir.file("runs")) / "idx" / "version_0";
  EXPECT_GE(summary_value(run, "val_acc"), 0.9);
  // The statistics came from the training images, which validation and
  // test then use too: the same metrics from the saved config.
  r = run_cli(
      {"test",
       "--config=" + (run / "config.yaml").string(),
       "--ckpt_path=last"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("test_acc"));
}

// A table of 300 rows: x1 and x2 (x2 on another scale), an unused id,
// a named class (which side of a line the point is) and a number to
// predict (a linear function of the two).
std::string write_table(const TempDir& dir) {
  const std::string path = dir.file("table.csv");
  std::ofstream csv(path);
  csv << "id,x1,x2,kind,value\n";
  for (int i = 0; i < 300; ++i) {
    const double x1 = std::sin(i * 0.37) * 2;
    const double x2 = std::cos(i * 0.91) * 100;
    csv << i << "," << x1 << "," << x2 << ","
        << (x1 + x2 / 50 > 0 ? "above" : "below") << "," << 3 * x1 - x2 / 25 + 1
        << "\n";
  }
  return path;
}

std::vector<std::string> table_fit(
    const TempDir& dir, std::vector<std::string> extra) {
  std::vector<std::string> args = {
      "fit",
      "--trainer.accelerator=cpu",
      "--data.dataset=csv",
      "--data.path=" + write_table(dir),
      "--data.feature_columns=x1, x2",
      "--data.batch_size=16",
      "--model.mlp_hidden=[16]",
      "--optimizer.lr=0.01",
      "--trainer.max_epochs=20",
      "--trainer.default_root_dir=" + dir.file("runs")};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(Cli, ATableTrainsAClassifierOnNamedLabels) {
  TempDir dir;
  Result r = run_cli(
      table_fit(dir, {"--data.label_column=kind", "--trainer.name=kinds"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("fit: 270 training samples"));
  const fs::path run = fs::path(dir.file("runs")) / "kinds" / "version_0";
  EXPECT_GE(summary_value(run, "val_acc"), 0.9);
  EXPECT_EQ(read_text((run / "classes.txt").string()), "above\nbelow\n");
  // The training rows' statistics, kept with the run.
  const auto standardization =
      nlohmann::json::parse(read_text((run / "standardization.json").string()));
  EXPECT_EQ(standardization.at("columns"), nlohmann::json::array({"x1", "x2"}));
  EXPECT_GT(standardization.at("std")[1].get<double>(), 50);
  r = run_cli(
      {"test",
       "--config=" + (run / "config.yaml").string(),
       "--ckpt_path=last"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(
      r.out, ::testing::ContainsRegex("\n  above +[01]\\.[0-9]{4} +[0-9]+\n"));
  r = run_cli(
      {"predict",
       "--config=" + (run / "config.yaml").string(),
       "--ckpt_path=last",
       "--output=" + dir.file("kinds.csv")});
  ASSERT_EQ(r.code, 0) << r.err;
  {
    std::ifstream in(dir.file("kinds.csv"));
    std::string header, first;
    std::getline(in, header);
    std::getline(in, first);
    EXPECT_EQ(
        header, "index,prediction,class,probability,target,target_class,top2");
    EXPECT_THAT(first, ::testing::ContainsRegex("^0,[01],(above|below),"));
  }
  // A column the table lacks, a label made of numbers that are not
  // classes, a cell that is not a number: each named.
  r = run_cli(table_fit(
      dir, {"--data.label_column=kind", "--data.feature_columns=x1,x3"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err,
      HasSubstr(
          "data.feature_columns: 'x3' is not a column of " +
          dir.file("table.csv")));
  r = run_cli(table_fit(dir, {"--data.label_column=value"}));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(
      r.err, HasSubstr("(for a number to predict: model.task=regression)"));
  {
    std::ofstream(dir.file("table.csv"), std::ios::app)
        << "300,1.5,x,above,2\n";
  }
  r = run_cli(
      {"fit",
       "--data.dataset=csv",
       "--data.path=" + dir.file("table.csv"),
       "--data.label_column=kind",
       "--data.feature_columns=x1,x2"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(
      r.err,
      HasSubstr(
          dir.file("table.csv") +
          ":302: column 3 ('x2'): expected a number, got 'x'"));
  EXPECT_THAT(r.err, HasSubstr("hint: check data.path="));
}

TEST(Cli, ATableModelPredictsNewRowsWithWhatItsCheckpointKeeps) {
  TempDir dir;
  Result r = run_cli(
      table_fit(dir, {"--data.label_column=kind", "--trainer.name=kinds"}));
  ASSERT_EQ(r.code, 0) << r.err;
  const fs::path run = fs::path(dir.file("runs")) / "kinds" / "version_0";
  const std::string ckpt = (run / "checkpoints" / "last.ckpt").string();
  r = run_cli({"checkpoint", ckpt});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(
      r.out,
      HasSubstr("  trained on: 2 classes (above, below); columns x1, x2 "
                "(standardized), label kind\n"));

  // New rows: the columns in another order, an extra one, no label; no
  // data.path. The run's config gives the model, the checkpoint the
  // columns, their statistics and the classes.
  const std::string config = "--config=" + (run / "config.yaml").string();
  {
    std::ofstream(dir.file("new.csv")) << "x2,note,x1\n"
                                       << "0,1,2\n"        // above
                                       << "0,2,-2\n"       // below
                                       << "100,3,0.5\n"    // above
                                       << "-100,4,-0.5\n"; // below
  }
  const std::string out = dir.file("new_predictions.csv");
  r = run_cli(
      {"predict",
       config,
       "--data.path=",
       "--data.predict_path=" + dir.file("new.csv"),
       "--ckpt_path=" + ckpt,
       "--output=" + out});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("4 rows written"));
  {
    std::ifstream in(out);
    std::string line;
    std::getline(in, line);
    EXPECT_EQ(line, "index,prediction,class,probability,top2");
    for (const char* expected :
         {"0,0,above,", "1,1,below,", "2,0,above,", "3,1,below,"}) {
      std::getline(in, line);
      EXPECT_EQ(line.rfind(expected, 0), 0u) << line;
    }
  }
  // A test table holding one class only keeps the model's numbering.
  {
    std::ofstream below(dir.file("below.csv"));
    below << "x1,x2,kind\n";
    for (int i = 0; i < 20; ++i) {
      below << -1 - i * 0.05 << "," << -20 + i << ",below\n";
    }
  }
  r = run_cli(
      {"test",
       config,
       "--data.path=" + dir.file("below.csv"),
       "--data.val_fraction=0.5",
       "--ckpt_path=" + ckpt});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("test_acc 1.0000\n"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("\n  below +1\\.0000 +10\n"));
  // A label outside the model's classes is named.
  {
    std::ofstream(dir.file("other.csv"))
        << "x1,x2,kind\n1,2,above\n1,2,sideways\n";
  }
  r = run_cli(
      {"test",
       config,
       "--data.path=" + dir.file("other.csv"),
       "--ckpt_path=" + ckpt});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(
      r.err,
      HasSubstr(
          dir.file("other.csv") +
          ":3: column 3 ('kind'): 'sideways' is not one of the model's "
          "classes ('above', 'below')"));
  // Resuming on a table with other classes is refused before training.
  {
    std::ifstream in(dir.file("table.csv"));
    std::ofstream renamed(dir.file("renamed.csv"));
    for (std::string line; std::getline(in, line);) {
      for (const auto& [from, to] :
           {std::pair<std::string, std::string>{"above", "up"},
            {"below", "down"}}) {
        const size_t at = line.find(from);
        if (at != std::string::npos) {
          line.replace(at, from.size(), to);
        }
      }
      renamed << line << "\n";
    }
  }
  std::vector<std::string> resume = table_fit(
      dir,
      {"--data.label_column=kind",
       "--trainer.name=kinds",
       "--trainer.max_epochs=25",
       "--ckpt_path=" + ckpt});
  resume.push_back("--data.path=" + dir.file("renamed.csv"));
  r = run_cli(resume);
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err,
      HasSubstr("the checkpoint was trained on the classes 'above', 'below', "
                "but the data gives 'down', 'up'"));
}

TEST(Cli, ARegressionTargetFarFromZeroIsLearnedStandardized) {
  // Targets near 250 and features standardized: the network learns the
  // standardized target and predictions come back in the target's units
  // (not near the network's raw outputs, as before).
  TempDir dir;
  {
    std::ofstream csv(dir.file("prices.csv"));
    csv << "x1,x2,price\n";
    for (int i = 0; i < 300; ++i) {
      const double x1 = std::sin(i * 0.37) * 2;
      const double x2 = std::cos(i * 0.91) * 100;
      csv << x1 << "," << x2 << "," << 250 + 3 * x1 - x2 / 25 << "\n";
    }
  }
  Result r = run_cli(
      {"fit",
       "--trainer.accelerator=cpu",
       "--data.dataset=csv",
       "--data.path=" + dir.file("prices.csv"),
       "--model.task=regression",
       "--model.mlp_hidden=[16]",
       "--data.batch_size=16",
       "--optimizer.lr=0.01",
       "--trainer.max_epochs=20",
       "--trainer.default_root_dir=" + dir.file("runs")});
  ASSERT_EQ(r.code, 0) << r.err;
  const fs::path run = fs::path(dir.file("runs")) / "prices" / "version_0";
  EXPECT_LT(summary_value(run, "val_rmse"), 0.5);
  r = run_cli(
      {"predict",
       "--config=" + (run / "config.yaml").string(),
       "--ckpt_path=last",
       "--output=" + dir.file("p.csv")});
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(dir.file("p.csv"));
  std::string line;
  std::getline(in, line);
  int64_t rows = 0;
  while (std::getline(in, line)) {
    std::vector<double> fields;
    std::stringstream row(line);
    for (std::string field; std::getline(row, field, ',');) {
      fields.push_back(std::stod(field));
    }
    ASSERT_EQ(fields.size(), 3u);
    EXPECT_NEAR(fields[1], fields[2], 2.0) << line;
    EXPECT_GT(fields[1], 240) << line;
    ++rows;
  }
  EXPECT_EQ(rows, 30);
}

TEST(Cli, ATableTrainsARegressionReportedAsRmseAndMae) {
  TempDir dir;
  Result r = run_cli(table_fit(
      dir,
      {"--data.label_column=value",
       "--model.task=regression",
       "--model_checkpoint.monitor=val_rmse",
       "--model_checkpoint.mode=min",
       "--trainer.name=values"}));
  ASSERT_EQ(r.code, 0) << r.err;
  const fs::path run = fs::path(dir.file("runs")) / "values" / "version_0";
  // value = 3 x1 - x2 / 25 + 1 spreads over about +-10; the fit gets
  // well inside that.
  const double rmse = summary_value(run, "val_rmse");
  EXPECT_LT(rmse, 0.5);
  EXPECT_GT(rmse, 0);
  EXPECT_LE(summary_value(run, "val_mae"), rmse);
  // The loss is the standardized target's MSE; RMSE and MAE are in the
  // target's units.
  const std::optional<TrainedData> trained =
      read_trained_data((run / "checkpoints" / "last.ckpt").string());
  ASSERT_TRUE(trained && trained->target_std && trained->target_mean);
  const double target_std = *trained->target_std;
  EXPECT_GT(target_std, 1);
  EXPECT_NEAR(
      summary_value(run, "val_loss") * target_std * target_std,
      rmse * rmse,
      1e-5 * rmse * rmse);
  const std::string csv = dir.file("values.csv");
  r = run_cli(
      {"predict",
       "--config=" + (run / "config.yaml").string(),
       "--ckpt_path=last",
       "--output=" + csv});
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "index,prediction,target");
  int64_t rows = 0;
  while (std::getline(in, line)) {
    std::vector<double> fields;
    std::stringstream row(line);
    for (std::string field; std::getline(row, field, ',');) {
      fields.push_back(std::stod(field));
    }
    ASSERT_EQ(fields.size(), 3u);
    EXPECT_NEAR(fields[1], fields[2], 2.0) << line;
    ++rows;
  }
  EXPECT_EQ(rows, 30);
  // Regression is for tables.
  r = run_cli(small_fit(dir, {"--model.task=regression"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("model.task=regression needs data.dataset=csv"));
}

// `args` (a fit's) as command `command` of the fit's last checkpoint.
std::vector<std::string> as_command(
    std::vector<std::string> args,
    const std::string& command,
    const fs::path& ckpt) {
  args[0] = command;
  args.push_back("--ckpt_path=" + ckpt.string());
  return args;
}

// The "name value" lines a validate or test prints.
std::vector<std::string> metric_lines(const std::string& out) {
  std::vector<std::string> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("val_", 0) == 0 || line.rfind("test_", 0) == 0) {
      lines.push_back(line);
    }
  }
  return lines;
}

TEST(Cli, EveryDatasetKindRerunsFromItsConfigYamlExactly) {
  // validate, test and predict of a fit's checkpoint with its written
  // config.yaml give what they give with the fit's own settings, bit for
  // bit, and validate gives the fit's last validation: the config holds
  // every derived default (an image folder's ImageNet statistics, an idx
  // folder's own, a table's model), not the keys' defaults.
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 256, 100);
  std::map<std::string, std::vector<std::string>> kinds;
  kinds["fashion_mnist"] = small_fit(dir, {"--trainer.max_epochs=1"});
  kinds["idx"] =
      small_fit(dir, {"--trainer.max_epochs=1", "--data.dataset=idx"});
  kinds["image_folder"] = folder_fit(dir, {"--trainer.max_epochs=1"});
  kinds["csv_classes"] =
      table_fit(dir, {"--trainer.max_epochs=2", "--data.label_column=kind"});
  kinds["csv_regression"] = table_fit(
      dir,
      {"--trainer.max_epochs=2",
       "--data.label_column=value",
       "--model.task=regression"});
  kinds["synthetic"] = {
      "fit",
      "--trainer.accelerator=cpu",
      "--data.dataset=synthetic",
      "--data.image_shape=[3, 8, 8]",
      "--data.synthetic_size=64",
      "--data.batch_size=32",
      "--data.val_batch_size=32",
      "--model.channels=[4]",
      "--model.hidden=8",
      "--trainer.max_epochs=1",
      "--trainer.default_root_dir=" + dir.file("runs")};
  std::vector<std::string> gpt = small_gpt(dir, 1);
  gpt.insert(gpt.begin(), "fit");
  kinds["text"] = gpt;
  for (auto& [kind, args] : kinds) {
    SCOPED_TRACE(kind);
    args.push_back("--trainer.name=" + kind);
    const Result fit = run_cli(args);
    ASSERT_EQ(fit.code, 0) << fit.err;
    const fs::path run = fs::path(dir.file("runs")) / kind / "version_0";
    const fs::path ckpt = run / "checkpoints" / "last.ckpt";
    const std::vector<std::string> saved = {
        "",
        "--config=" + (run / "config.yaml").string(),
        "--trainer.accelerator=cpu"};
    for (const std::string command : {"validate", "test"}) {
      const Result own = run_cli(as_command(args, command, ckpt));
      ASSERT_EQ(own.code, 0) << own.err;
      const Result again = run_cli(as_command(saved, command, ckpt));
      ASSERT_EQ(again.code, 0) << again.err;
      const std::vector<std::string> lines = metric_lines(own.out);
      ASSERT_FALSE(lines.empty()) << own.out;
      EXPECT_EQ(metric_lines(again.out), lines) << command;
      if (std::string(command) == "validate") {
        // The fit's own last validation, as its done line prints it.
        for (const std::string& line : lines) {
          if (line.rfind("val_loss ", 0) == 0 ||
              line.rfind("val_acc ", 0) == 0) {
            EXPECT_THAT(fit.out, HasSubstr(", " + line)) << fit.out;
          }
        }
      }
    }
    if (kind == "text") {
      continue; // predict writes one row per sample: images and tables only
    }
    const std::string own_csv = dir.file(kind + "_own.csv");
    const std::string saved_csv = dir.file(kind + "_saved.csv");
    std::vector<std::string> predict = as_command(args, "predict", ckpt);
    predict.push_back("--output=" + own_csv);
    Result r = run_cli(predict);
    ASSERT_EQ(r.code, 0) << r.err;
    predict = as_command(saved, "predict", ckpt);
    predict.push_back("--output=" + saved_csv);
    r = run_cli(predict);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_FALSE(read_text(own_csv).empty());
    EXPECT_EQ(read_text(saved_csv), read_text(own_csv));
  }
}

TEST(Cli, PrintConfigShowsTheSettingsARunWouldUse) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 64, 20);
  Result r = run_cli(folder_fit(dir, {"--print_config"}));
  ASSERT_EQ(r.code, 0) << r.err;
  // ImageNet's grey statistics, not data.mean's default [0.286].
  EXPECT_THAT(r.out, HasSubstr("  mean: [0.449]\n"));
  EXPECT_THAT(r.out, HasSubstr("  std: [0.226]\n"));
  EXPECT_THAT(r.out, HasSubstr("image_size: [16, 16]"));
  EXPECT_THAT(r.out, HasSubstr("crop_padding: 0"));
  r = run_cli(table_fit(dir, {"--print_config"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("name: mlp"));
  // An idx folder's statistics come from its training images.
  r = run_cli(small_fit(dir, {"--data.dataset=idx", "--print_config"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("mean: [0.286]")));
  EXPECT_THAT(r.out, HasSubstr("num_classes: 4"));
}

TEST(Cli, EveryCommandWritesABareFileNameInTheWorkingDirectory) {
  // The README's `--output predictions.csv`, predict's default, report's
  // --output and relative run folders, from a fresh working directory;
  // a missing output folder is made, as Lightning makes its log folders.
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 128, 50);
  const hotloop::testing::ScopedWorkingDirectory cwd(dir.path());
  std::vector<std::string> fit = small_fit(dir, {"--trainer.max_epochs=1"});
  fit.push_back("--trainer.default_root_dir=.");
  Result r = run_cli(fit);
  ASSERT_EQ(r.code, 0) << r.err;
  const fs::path run = fs::path("fashion_mnist") / "version_0";
  ASSERT_TRUE(
      fs::is_regular_file(dir.file("fashion_mnist/version_0/config.yaml")));
  const std::string config = "--config=" + (run / "config.yaml").string();

  r = run_cli({"predict", config, "--ckpt_path=last"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("rows written to predictions.csv"));
  EXPECT_TRUE(fs::is_regular_file(dir.file("predictions.csv")));
  r = run_cli({"predict", config, "--ckpt_path=last", "--output", "p.csv"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(
      read_text(dir.file("p.csv")), read_text(dir.file("predictions.csv")));
  r = run_cli(
      {"predict", config, "--ckpt_path=last", "--output=made/here/p.csv"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::is_regular_file(dir.file("made/here/p.csv")));
  r = run_cli({"predict", config, "--ckpt_path=last", "--output=made"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err, HasSubstr("--output=made: is a folder; expected a file name"));
  r = run_cli(
      {"predict", config, "--ckpt_path=last", "--output=p.csv/inside.csv"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("'p.csv' is not a folder"));

  r = run_cli({"report", run.string(), "--output", "report.html"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("wrote report.html"));
  EXPECT_TRUE(fs::is_regular_file(dir.file("report.html")));
  r = run_cli({"report", "nothing"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("nothing"));
  // No temporary left behind anywhere.
  for (const auto& entry : fs::recursive_directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos)
        << entry.path();
  }
}

TEST(Cli, TheLibraryExampleBuildsTheModelOfTheMainConfig) {
  // examples/fit_fashion_mnist.cpp builds models::FashionCnn() with the
  // library's defaults; `hotloop fit --config configs/fashion_mnist.yaml`
  // must train that same network (one source of defaults: the CLI's are
  // read from models::FashionCnnOptions).
  Config config(fit_schema());
  config.merge_yaml_file(
      std::string(HOTLOOP_SOURCE_DIR) + "/configs/fashion_mnist.yaml");
  const FitConfig fit = to_fit_config(config);
  models::FashionCnn example;
  models::FashionCnn cli(fit.model);
  const auto example_parameters = example->named_parameters();
  const auto cli_parameters = cli->named_parameters();
  ASSERT_EQ(example_parameters.size(), cli_parameters.size());
  int64_t count = 0;
  for (const auto& parameter : example_parameters) {
    const at::Tensor* other = cli_parameters.find(parameter.key());
    ASSERT_NE(other, nullptr) << parameter.key();
    EXPECT_EQ(other->sizes(), parameter.value().sizes()) << parameter.key();
    count += parameter.value().numel();
  }
  EXPECT_EQ(count, 206970); // 207.0 K, as the main job's summary prints
  // And the defaults with no config at all.
  const FitConfig defaults = to_fit_config(Config(fit_schema()));
  EXPECT_EQ(defaults.model.channels, models::FashionCnnOptions().channels);
  EXPECT_EQ(defaults.model.hidden, models::FashionCnnOptions().hidden);
}

TEST(Cli, RunsOfOtherDataOrAnotherModelGetFoldersOfTheirOwn) {
  // Without trainer.name a run is named after its data (and its model,
  // where not the data's default), so --ckpt_path=last of the next
  // Fashion-MNIST command never takes an image folder's run.
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 128, 50);
  Result r = run_cli(small_fit(dir, {"--trainer.max_epochs=1"}));
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<std::string> folder = folder_fit(dir, {"--trainer.max_epochs=1"});
  folder.erase(
      std::find(folder.begin(), folder.end(), "--trainer.name=folder"));
  r = run_cli(folder);
  ASSERT_EQ(r.code, 0) << r.err;
  r = run_cli(small_fit(
      dir,
      {"--trainer.max_epochs=1",
       "--model.name=mlp",
       "--model.mlp_hidden=[8]"}));
  ASSERT_EQ(r.code, 0) << r.err;
  const fs::path runs(dir.file("runs"));
  EXPECT_TRUE(fs::is_directory(runs / "fashion_mnist" / "version_0"));
  EXPECT_FALSE(fs::exists(runs / "fashion_mnist" / "version_1"));
  EXPECT_TRUE(fs::is_directory(runs / "images" / "version_0"));
  EXPECT_TRUE(fs::is_directory(runs / "fashion_mnist_mlp" / "version_0"));
  // The written config names its run, so it resumes there.
  Config saved(fit_schema());
  saved.merge_yaml_file(
      (runs / "images" / "version_0" / "config.yaml").string());
  EXPECT_EQ(saved.get_string("trainer.name"), "images");
  r = run_cli(as_command(small_fit(dir), "validate", "last"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(
      r.out,
      HasSubstr(
          "validate of " +
          (runs / "fashion_mnist" / "version_0" / "checkpoints" / "last.ckpt")
              .string()));
}

TEST(Cli, ModelInitRedrawsTheWeightsTheSameWayEveryRun) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 64, 32);
  const auto loss = [&](const std::string& init, const std::string& name) {
    const Result r = run_cli(small_fit(
        dir,
        {"--trainer.max_epochs=1",
         "--model.init=" + init,
         "--trainer.name=" + name}));
    EXPECT_EQ(r.code, 0) << r.err;
    return summary_value(
        fs::path(dir.file("runs")) / name / "version_0", "train_loss");
  };
  const double orthogonal = loss("orthogonal", "a");
  EXPECT_EQ(loss("orthogonal", "b"), orthogonal);
  EXPECT_NE(loss("default", "c"), orthogonal);
  const Result bad = run_cli(small_fit(dir, {"--model.init=he"}));
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.err, HasSubstr("model.init"));
}

TEST(Cli, WeightAveragingValidatesAndCheckpointsTheAverage) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 128, 50);
  Result r = run_cli(small_fit(
      dir,
      {"--weight_averaging.enabled=true", "--weight_averaging.decay=0.9"}));
  ASSERT_EQ(r.code, 0) << r.err;
  const fs::path run =
      fs::path(dir.file("runs")) / "fashion_mnist" / "version_0";
  std::ifstream summary_file(run / "summary.json");
  const auto summary = nlohmann::json::parse(summary_file);
  EXPECT_EQ(
      summary.at("weight_averaging"),
      nlohmann::json({{"average", "ema"}, {"decay", 0.9}, {"updates", 8}}));
  // last.ckpt's model is the average the fit validated last: validating it
  // again gives the fit's figure.
  r = run_cli(
      {"validate",
       "--config=" + (run / "config.yaml").string(),
       "--ckpt_path",
       "last"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::ostringstream expected;
  expected << "val_loss " << std::fixed << std::setprecision(4)
           << summary.at("val_loss").get<double>();
  EXPECT_THAT(r.out, HasSubstr(expected.str()));

  // SWA's recipe: the rate annealed to swa_lr by epoch (SWALR), the
  // weights' equal mean over the epochs from the second on.
  r = run_cli(small_fit(
      dir,
      {"--trainer.max_epochs=3",
       "--lr_scheduler.name=swa",
       "--lr_scheduler.interval=epoch",
       "--lr_scheduler.swa_lr=0.005",
       "--lr_scheduler.anneal_epochs=2",
       "--weight_averaging.enabled=true",
       "--weight_averaging.average=swa",
       "--weight_averaging.update_every_n_steps=0",
       "--weight_averaging.update_starting_at_epoch=1"}));
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream swa_summary(
      fs::path(dir.file("runs")) / "fashion_mnist" / "version_1" /
      "summary.json");
  EXPECT_EQ(
      nlohmann::json::parse(swa_summary).at("weight_averaging"),
      nlohmann::json({{"average", "swa"}, {"updates", 2}}));
  // PyTorch's SWA switch: a cosine, then SWALR from epoch 2 on.
  const std::vector<std::string> switched{
      "--trainer.max_epochs=3",
      "--lr_scheduler.name=cosine",
      "--lr_scheduler.interval=epoch",
      "--lr_scheduler.swa_start=2",
      "--lr_scheduler.swa_lr=0.005",
      "--lr_scheduler.anneal_epochs=1"};
  r = run_cli(small_fit(dir, switched));
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<std::string> late = switched;
  late[3] = "--lr_scheduler.swa_start=3";
  r = run_cli(small_fit(dir, late));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err,
      HasSubstr("lr_scheduler.swa_start must be less than the run's 3 "
                "schedule steps, or SWALR never starts; got 3"));

  r = run_cli(small_fit(
      dir, {"--weight_averaging.enabled=true", "--weight_averaging.decay=1"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err, HasSubstr("weight_averaging.decay must be in [0, 1), got 1"));
  r = run_cli(small_fit(
      dir,
      {"--weight_averaging.enabled=true",
       "--weight_averaging.average=polyak"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("weight_averaging.average"));
  r = run_cli(small_fit(
      dir, {"--weight_averaging.enabled=true", "--pruning.enabled=true"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err,
      HasSubstr("weight_averaging.enabled averages one set of weights, which "
                "pruning.enabled changes during the fit"));
}

TEST(Cli, MixUpCutMixAndRandomErasingTrainAClassifier) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 64, 50);
  Result r = run_cli(small_fit(
      dir,
      {"--trainer.max_epochs=1",
       "--model.mixup_alpha=0.2",
       "--model.cutmix_alpha=1.0",
       "--model.label_smoothing=0.1",
       "--data.random_erasing=0.25"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("done: 1 epoch, 2 steps"));
  r = run_cli(small_fit(
      dir, {"--model.cutmix_alpha=1.0", "--trainer.cuda_graphs=true"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("turn trainer.cuda_graphs off"));
  r = run_cli(small_fit(dir, {"--model.mixup_alpha=-1"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("model.mixup_alpha"));
}

TEST(Cli, ReportHelpPrintsItsUsage) {
  const Result r = run_cli({"report", "--help"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("usage: hotloop report RUN_DIR"));
}

TEST(Cli, TrainsEveryReferenceModelFromTheConfig) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 64, 50);
  for (const std::vector<std::string>& model :
       {std::vector<std::string>{"--model.name=mlp", "--model.mlp_hidden=[32]"},
        std::vector<std::string>{"--model.name=resnet18"}}) {
    std::vector<std::string> extra = model;
    extra.push_back("--trainer.max_epochs=1");
    const Result r = run_cli(small_fit(dir, extra));
    ASSERT_EQ(r.code, 0) << model[0] << ": " << r.err;
    EXPECT_THAT(r.out, HasSubstr("done: 1 epoch, 2 steps"));
  }
  // The Bottleneck ResNets by torchvision's names, grouped convs included:
  // one step (a larger network).
  const Result resnext = run_cli(small_fit(
      dir,
      {"--model.name=resnext50_32x4d",
       "--trainer.max_epochs=1",
       "--trainer.limit_train_batches=1",
       "--trainer.limit_val_batches=1"}));
  ASSERT_EQ(resnext.code, 0) << resnext.err;
  EXPECT_THAT(resnext.out, HasSubstr("done: 1 epoch, 1 step"));
  const Result unknown = run_cli(small_fit(dir, {"--model.name=resnet200"}));
  EXPECT_EQ(unknown.code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("model.name"));
  EXPECT_THAT(unknown.err, HasSubstr("wide_resnet101_2"));
  std::vector<std::string> gpt = {"fit"};
  const std::vector<std::string> options = small_gpt(dir, 2);
  gpt.insert(gpt.end(), options.begin(), options.end());
  const Result r = run_cli(gpt);
  ASSERT_EQ(r.code, 0) << r.err;
  // 6900 bytes: 431 windows of 16, the last 43 validate; 388 train.
  EXPECT_THAT(r.out, HasSubstr("fit: 388 training samples, 25 batches/epoch"));
  EXPECT_THAT(r.out, HasSubstr("done: 2 epochs, 50 steps"));
  EXPECT_THAT(r.out, HasSubstr("GFLOP/s achieved"));
}

TEST(Cli, AGptReportsTokensPerSecondAndGeneratesText) {
  TempDir dir;
  const std::vector<std::string> config = small_gpt(dir, 3);
  std::vector<std::string> args = {"fit"};
  args.insert(args.end(), config.begin(), config.end());
  Result r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  // Throughput in tokens as well: 16 tokens a sample.
  EXPECT_THAT(
      r.out, ::testing::ContainsRegex("samples/s \\([0-9]+ tokens/s\\)"));
  // Named after the text file.
  const fs::path run = dir.file("runs/text/version_0");
  EXPECT_EQ(
      summary_value(run, "train_tokens_per_s"),
      16 * summary_value(run, "train_samples_per_s"));

  const auto generate = [&](std::vector<std::string> flags) {
    std::vector<std::string> g = {"generate", "--ckpt_path", "last"};
    g.insert(g.end(), config.begin(), config.end());
    g.insert(g.end(), flags.begin(), flags.end());
    return run_cli(g);
  };
  const Result first =
      generate({"--prompt", "hotloop ", "--max_new_tokens", "40"});
  ASSERT_EQ(first.code, 0) << first.err;
  // The prompt, 40 new bytes, the separator of nanoGPT's sample.py.
  EXPECT_EQ(first.out.rfind("hotloop ", 0), 0u) << first.out;
  EXPECT_EQ(
      first.out.size(), 8 + 40 + std::string("\n---------------\n").size());
  EXPECT_THAT(
      first.err,
      ::testing::ContainsRegex("generate: 40 tokens in [0-9.]+ s, [0-9]+ "
                               "tokens/s \\(KV cache, cpu\\)"));
  // The same seed gives the same text, with or without the KV cache; each
  // sample k draws from seed + k.
  EXPECT_EQ(
      generate({"--prompt",
                "hotloop ",
                "--max_new_tokens",
                "40",
                "--kv_cache=false"})
          .out,
      first.out);
  const Result two = generate(
      {"--prompt",
       "hotloop ",
       "--max_new_tokens",
       "40",
       "--num_samples",
       "2",
       "--seed",
       "1336"});
  ASSERT_EQ(two.code, 0) << two.err;
  EXPECT_EQ(two.out.substr(two.out.size() - first.out.size()), first.out);
  EXPECT_NE(two.out.substr(0, first.out.size()), first.out);

  Result bad = generate({"--temperature", "hot"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(
      bad.err, HasSubstr("--temperature: expected a number, got 'hot'"));
  bad = generate({"--temperature", "0"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.err, HasSubstr("temperature must be positive, got 0"));
  bad = run_cli({"generate", "--ckpt_path", "x.ckpt"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.err, HasSubstr("it needs model.name=gpt, not fashion_cnn"));
  bad = run_cli(
      {"generate", "--model.name=gpt", "--data.dataset=text", "--data.path=x"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.err, HasSubstr("hotloop generate needs --ckpt_path"));
}

TEST(Cli, RegistrationsAreCheckedAndRefusedOnceTheOptionsAreBuilt) {
  const auto build = [](const ModelInputs&) { return torch::nn::AnyModule(); };
  const auto refused = [](auto registration, const std::string& why) {
    try {
      register_model(std::move(registration));
      ADD_FAILURE() << "no error for " << why;
    } catch (const std::logic_error& e) {
      EXPECT_THAT(e.what(), HasSubstr(why));
    }
  };
  refused(
      ModelRegistration("Tiny-Net", "").build(build),
      "register_model(Tiny-Net): a name is lowercase letters, digits and '_'");
  refused(
      ModelRegistration("resnet18", "").build(build),
      "register_model(resnet18): the name is taken");
  refused(
      ModelRegistration("tiny", ""),
      "register_model(tiny): no build function given");
  fit_schema();
  refused(
      ModelRegistration("tiny", "").build(build),
      "register_model(tiny): the command line's options are built already");
  EXPECT_EQ(find_model("tiny"), nullptr);
}

TEST(Cli, SyntheticImagesOfAnyShapeTrainAResNet) {
  TempDir dir;
  const std::vector<std::string> args = {
      "fit",
      "--trainer.accelerator=cpu",
      "--data.dataset=synthetic",
      "--data.image_shape=[3, 16, 16]",
      "--data.synthetic_size=64",
      "--data.batch_size=32",
      "--data.val_batch_size=32",
      "--data.mean=[0.5, 0.5, 0.5]",
      "--data.std=[0.25, 0.25, 0.25]",
      "--model.name=resnet18",
      "--trainer.max_epochs=1",
      "--trainer.default_root_dir=" + dir.file("runs")};
  const Result r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("fit: 64 training samples, 2 batches/epoch"));
  // ResNet's FLOPs are counted, so the profile reports FLOP/s.
  EXPECT_THAT(r.out, HasSubstr("GFLOP/s achieved"));

  std::vector<std::string> bad = args;
  bad.push_back("--data.image_shape=[3, 16]");
  const Result e = run_cli(bad);
  EXPECT_EQ(e.code, 2);
  EXPECT_THAT(
      e.err,
      HasSubstr("data.image_shape must be [channels, height, width], all "
                "positive"));
}

TEST(Cli, ModelAndDatasetMismatchesAreConfigErrors) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 64, 50);
  Result r = run_cli(small_fit(dir, {"--model.name=gpt"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err,
      HasSubstr("model.name=gpt does not fit data.dataset=fashion_mnist"));
  r = run_cli(small_fit(dir, {"--data.dataset=text", "--model.name=gpt"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("data.dataset=text needs data.path"));
  r = run_cli(small_fit(dir, {"--trainer.limit_val_batches=0"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err,
      HasSubstr("model_checkpoint.monitor=val_acc needs validation, but "
                "trainer.limit_val_batches=0"));
  r = run_cli(small_fit(
      dir,
      {"--data.dataset=text",
       "--model.name=gpt",
       "--data.path=" + dir.file("missing.txt")}));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr(dir.file("missing.txt")));
}

TEST(Cli, CallbackAndDeviceOptionErrorsNameTheKey) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 64, 50);
  Result r =
      run_cli(small_fit(dir, {"--early_stopping.stopping_threshold=low"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err,
      HasSubstr("early_stopping.stopping_threshold: expected a number or \"\" "
                "(off), got 'low'"));
  r = run_cli(small_fit(dir, {"--trainer.devices=4"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("trainer.devices=4 asks for 4 devices"));
  // A mistyped monitor is found after the first step, not after an epoch,
  // and leaves no run folder behind.
  for (const char* flag :
       {"--model_checkpoint.monitor=val_f1",
        "--early_stopping.enabled=true",
        "--lr_scheduler.name=plateau"}) {
    std::vector<std::string> extra{flag};
    if (std::string(flag).find("early") != std::string::npos) {
      extra.push_back("--early_stopping.monitor=val_f1");
    }
    if (std::string(flag).find("plateau") != std::string::npos) {
      extra.push_back("--lr_scheduler.interval=epoch");
      extra.push_back("--lr_scheduler.monitor=val_f1");
    }
    r = run_cli(small_fit(dir, extra));
    EXPECT_EQ(r.code, 2) << flag;
    EXPECT_THAT(
        r.err,
        ::testing::ContainsRegex(
            "(ModelCheckpoint monitors|EarlyStopping monitors|the lr schedule "
            "watches) 'val_f1', which no step logged \\(logged: train_loss, "
            "val_acc, val_acc_top5, val_loss\\)"))
        << flag;
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("epoch 1/2  train_loss")));
    EXPECT_FALSE(fs::exists(dir.file("runs/fashion_mnist/version_0"))) << flag;
  }
}

std::vector<at::Tensor> checkpoint_weights(const std::string& path) {
  models::FashionCnnOptions options;
  options.channels = {4, 8};
  options.hidden = 16;
  train::ImageClassifier model(
      torch::nn::AnyModule(models::FashionCnn(options)), {}, {});
  train::load_checkpoint(path, model);
  std::vector<at::Tensor> tensors = model.parameters();
  for (const auto& buffer : model.buffers()) {
    tensors.push_back(buffer);
  }
  return tensors;
}

TEST(Cli, AResumeInAFreshProcessMatchesAnUninterruptedRunBitForBit) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 256, 100);
  // A schedule that does not depend on the run's length, two loader
  // threads, and a cut in the middle of epoch 2 (8 batches per epoch).
  const std::vector<std::string> recipe = {
      "--lr_scheduler.name=step",
      "--lr_scheduler.step_size=5",
      "--data.num_workers=2",
      "--trainer.enable_progress_bar=false"};
  auto args = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> all = small_fit(dir, recipe);
    all.push_back("--trainer.name=" + name);
    all.insert(all.end(), extra.begin(), extra.end());
    return all;
  };
  ASSERT_EQ(run_process(args("straight", {}), dir.file("straight.log")), 0);
  ASSERT_EQ(
      run_process(args("cut", {"--trainer.max_steps=12"}), dir.file("cut.log")),
      0);
  ASSERT_EQ(
      run_process(args("cut", {"--ckpt_path=last"}), dir.file("resume.log")),
      0);
  std::ifstream resume_log(dir.file("resume.log"));
  const std::string resumed_text(
      (std::istreambuf_iterator<char>(resume_log)),
      std::istreambuf_iterator<char>());
  EXPECT_THAT(resumed_text, HasSubstr("in epoch 2 after batch 4 (step 12)"));

  const fs::path runs(dir.file("runs"));
  const auto a = checkpoint_weights(
      (runs / "straight" / "version_0" / "checkpoints" / "last.ckpt").string());
  const auto b = checkpoint_weights(
      (runs / "cut" / "version_0" / "checkpoints" / "last.ckpt").string());
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(a[i].equal(b[i])) << "tensor " << i;
  }
  auto summary = [&](const std::string& name, int version) {
    std::ifstream in(
        runs / name / ("version_" + std::to_string(version)) / "summary.json");
    return nlohmann::json::parse(in);
  };
  const auto straight = summary("straight", 0);
  const auto resumed = summary("cut", 0);
  for (const char* key :
       {"train_loss", "val_loss", "val_acc", "steps", "epochs"}) {
    EXPECT_EQ(straight.at(key), resumed.at(key)) << key;
  }
  // The resume went on in the cut run's folder: one history, the same as
  // the uninterrupted run's.
  // The cut attempt's own last record (its validation at step 12, where
  // max_steps ended it) stays; every other row is the straight run's.
  EXPECT_FALSE(fs::exists(runs / "cut" / "version_1"));
  std::vector<std::string> cut =
      metric_rows((runs / "cut" / "version_0" / "metrics.csv").string());
  const auto at_12 =
      std::find_if(cut.begin(), cut.end(), [](const std::string& row) {
        return row.rfind("12:", 0) == 0;
      });
  ASSERT_NE(at_12, cut.end());
  cut.erase(at_12);
  EXPECT_EQ(
      cut,
      metric_rows((runs / "straight" / "version_0" / "metrics.csv").string()));
}

TEST(Cli, CtrlCCheckpointsAndPrintsTheCommandThatResumes) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 256, 100);
  std::vector<std::string> args = small_fit(
      dir,
      {"--trainer.max_epochs=1000",
       "--trainer.name=sig",
       "--trainer.log_every_n_steps=1"});
  const std::string log = dir.file("fit.log");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> argv{const_cast<char*>(HOTLOOP_CLI_PATH)};
    for (std::string& arg : args) {
      argv.push_back(arg.data());
    }
    argv.push_back(nullptr);
    ::execv(HOTLOOP_CLI_PATH, argv.data());
    ::_exit(127);
  }
  // Ctrl-C once training has started.
  for (int i = 0;
       i < 600 && read_text(log).find("epoch 1/1000") == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::kill(pid, SIGINT);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  const std::string run = dir.file("runs") + "/sig/version_0";
  const std::string config = run + "/config.yaml";
  const std::string ckpt = run + "/checkpoints/last.ckpt";
  const std::string text = read_text(log);
  EXPECT_THAT(text, HasSubstr("interrupted by signal 2 in epoch "));
  EXPECT_THAT(
      text,
      HasSubstr(
          "resume with: hotloop fit --config " + config + " --ckpt_path " +
          ckpt + "\n"));

  // That command resumes (for one more epoch here).
  ASSERT_EQ(
      run_process(
          {"fit",
           "--config",
           config,
           "--ckpt_path",
           ckpt,
           "--trainer.max_epochs=1",
           "--trainer.min_epochs=0"},
          dir.file("resume.log")),
      0)
      << read_text(dir.file("resume.log"));
  EXPECT_THAT(
      read_text(dir.file("resume.log")), HasSubstr("resumed from " + ckpt));
  // In the same folder, whose metrics.csv goes on from the first attempt's
  // rows (an interrupt leaves what was logged so far).
  EXPECT_FALSE(fs::exists(dir.file("runs") + "/sig/version_1"));
  const log::MetricsTable table = log::read_metrics_csv(run + "/metrics.csv");
  const auto& steps = table.column("step");
  ASSERT_GT(steps.size(), 1u);
  EXPECT_EQ(*steps.front(), 1);
  for (size_t i = 1; i < steps.size(); ++i) {
    EXPECT_GE(*steps[i], *steps[i - 1]) << "row " << i;
  }
}

TEST(Cli, TheRunsFilesWriteValuesAsTheyWereGiven) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 64, 32);
  const Result r = run_cli(small_fit(
      dir,
      {"--trainer.max_epochs=1",
       "--trainer.limit_train_batches=100",
       "--trainer.precision=32",
       "--lr_scheduler.final_div_factor=10000",
       "--model_checkpoint.filename={epoch}-{step}"}));
  ASSERT_EQ(r.code, 0) << r.err;
  const fs::path run =
      fs::path(dir.file("runs")) / "fashion_mnist" / "version_0";
  const std::string config = read_text((run / "config.yaml").string());
  EXPECT_THAT(config, HasSubstr("final_div_factor: 10000\n"));
  EXPECT_THAT(config, HasSubstr("limit_train_batches: 100\n"));
  EXPECT_THAT(config, HasSubstr("precision: 32\n"));
  const std::string hparams = read_text((run / "hparams.yaml").string());
  EXPECT_THAT(
      hparams, HasSubstr("model_checkpoint.filename: \"{epoch}-{step}\"\n"));
  EXPECT_THAT(hparams, HasSubstr("data.path: \"\"\n"));
  EXPECT_THAT(hparams, HasSubstr("optimizer.name: adamw\n"));
  // Lightning's other precision spellings are taken as they are.
  for (const char* precision : {"16", "bf16", "32-true", "bf16-mixed"}) {
    EXPECT_NO_THROW(to_fit_config(
        parse_args(
            fit_schema(), {std::string("--trainer.precision=") + precision}, {})
            .config))
        << precision;
  }
}

TEST(Cli, TheTunerSetsTheBatchSizeAndLearningRateAndTheRunKeepsThem) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 64, 20);
  Result r = run_cli(small_fit(
      dir,
      {"--trainer.max_epochs=1",
       "--tuner.batch_size=power",
       "--tuner.scale_lr=linear",
       "--tuner.lr_find=true",
       "--tuner.lr_find_num_training=24",
       "--tuner.lr_find_max_lr=0.05"}));
  ASSERT_EQ(r.code, 0) << r.err;
  // 64 training images: a batch of 64 holds them all and ends the search;
  // the rate follows the batch (32 -> 64), then the range test sets it.
  EXPECT_THAT(r.out, HasSubstr("scale_batch_size: batch 64: fits"));
  EXPECT_THAT(r.out, HasSubstr("scale_batch_size: batch size 64\n"));
  EXPECT_THAT(
      r.out,
      HasSubstr("tuner: optimizer.lr 0.01 -> 0.02 (tuner.scale_lr=linear)"));
  EXPECT_THAT(r.out, HasSubstr("lr_find: 24 steps; suggested learning rate "));
  const fs::path run =
      fs::path(dir.file("runs")) / "fashion_mnist" / "version_0";
  EXPECT_EQ(summary_value(run, "steps"), 1); // one batch of 64
  // The curve, its suggestion marked, which config.yaml now holds.
  std::ifstream csv(run / "lr_find.csv");
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line, "step,lr,loss,suggested");
  std::string suggested;
  int rows = 0;
  while (std::getline(csv, line)) {
    ++rows;
    if (line.substr(line.size() - 2) == ",1") {
      suggested = line.substr(line.find(',') + 1);
      suggested = suggested.substr(0, suggested.find(','));
    }
  }
  EXPECT_EQ(rows, 24);
  ASSERT_FALSE(suggested.empty());
  const std::string config = read_text((run / "config.yaml").string());
  EXPECT_THAT(config, HasSubstr("  batch_size: 64\n"));
  EXPECT_THAT(config, HasSubstr("  lr_find: false\n"));
  const double lr = std::stod(suggested);
  const auto at = config.find("\n  lr: ");
  ASSERT_NE(at, std::string::npos) << config;
  EXPECT_DOUBLE_EQ(std::stod(config.substr(at + 7)), lr);
  // That config runs the same fit without searching again.
  r = run_cli(
      {"fit",
       "--config=" + (run / "config.yaml").string(),
       "--trainer.default_root_dir=" + dir.file("again")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("lr_find:")));
  EXPECT_THAT(r.out, Not(HasSubstr("scale_batch_size:")));
  // One process searches: not under ddp; and a size must be a size.
  r = run_cli(small_fit(
      dir,
      {"--tuner.lr_find=true",
       "--trainer.strategy=ddp",
       "--trainer.devices=2"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err,
      HasSubstr("tuner.batch_size and tuner.lr_find search in one process"));
  r = run_cli(
      small_fit(dir, {"--tuner.batch_size=power", "--tuner.max_memory=lots"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err,
      HasSubstr("tuner.max_memory: expected a size such as 6GiB, 500MB or a "
                "number of bytes, got 'lots'"));
}

TEST(Cli, TuneMeasuresTheStrategiesAndWritesAConfigThatTrains) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 256, 64);
  std::vector<std::string> args =
      // 120 s, not less: under ctest -j2 a neighbour test can slow the
      // windows 2-3x, and tune refuses a budget that fits no comparison.
      small_fit(dir, {"--trainer.max_epochs=1", "--budget=120s", "--repeats=2"});
  args[0] = "tune";
  // Without --output: tuned.yaml in the working directory.
  const hotloop::testing::ScopedWorkingDirectory cwd(dir.path());
  // In a process of its own: the windows run the program itself.
  Result r;
  r.code = run_process(args, dir.file("tune.log"));
  r.out = read_text(dir.file("tune.log"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("tune: measuring the given config"));
  EXPECT_THAT(
      r.out,
      HasSubstr("tune: sizing the windows on the given config (run 1/1"));
  EXPECT_THAT(
      r.out, ::testing::ContainsRegex("\n  strategy +setting +samples/s"));
  EXPECT_THAT(
      r.out,
      ::testing::ContainsRegex(
          "\n  given +\\(the given config\\) +[0-9]+ +1\\.00x"));
  EXPECT_THAT(
      r.out,
      ::testing::ContainsRegex(
          "\n  num_threads +trainer.num_threads=1 +[0-9]+ "));
  // One verdict per strategy, each saying what it kept or picked.
  for (const char* verdict :
       {"  trainer.num_threads: ",
        "  data.num_workers: ",
        "  trainer.precision: ",
        "  trainer.channels_last: ",
        "  data.pin_memory: no effect on the CPU (no copies to a device): not "
        "tried\n",
        "  trainer.cuda_graphs: needs a CUDA device: not tried\n",
        "  model.fused_* (hotloop's GPT kernels): needs a CUDA device: not "
        "tried\n",
        "  data.val_batch_size: "}) {
    EXPECT_THAT(r.out, HasSubstr(verdict));
  }
  EXPECT_THAT(
      r.out,
      HasSubstr("\nwrote tuned.yaml: hotloop fit --config tuned.yaml\n"));
  // --budget bounds the wall time, and the output says what it took.
  {
    const std::string tag = "\ntune: ";
    const size_t at = r.out.find(" s of the 120 s --budget");
    ASSERT_NE(at, std::string::npos) << r.out;
    const size_t from = r.out.rfind(tag, at) + tag.size();
    EXPECT_LE(std::stoll(r.out.substr(from, at - from)), 120) << r.out;
    EXPECT_THAT(r.out, Not(HasSubstr("exceeded by")));
  }
  const std::string tuned = read_text(dir.file("tuned.yaml"));
  EXPECT_EQ(tuned.rfind("# Written by hotloop tune on ", 0), 0u) << tuned;
  EXPECT_THAT(tuned, HasSubstr("# trainer.precision: "));
  // As it is, it trains: in a process of its own, since tune may have
  // picked trainer.strategy=ddp, whose launcher starts the ranks as this
  // program (/proc/self/exe): in this test binary, the whole suite again.
  r.code = run_process(
      {"fit",
       "--config=" + dir.file("tuned.yaml"),
       "--trainer.default_root_dir=" + dir.file("tuned_runs")},
      dir.file("tuned.log"));
  r.out = read_text(dir.file("tuned.log"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("done: 1 epoch"));
  // A budget too small to compare anything is refused, naming one that
  // is enough, before it is spent on windows of the given config alone.
  {
    std::vector<std::string> small = args;
    small.push_back("--budget=5s");
    small.push_back("--output=" + dir.file("small.yaml"));
    const int code = run_process(small, dir.file("small.log"));
    const std::string log = read_text(dir.file("small.log"));
    EXPECT_EQ(code, 2) << log;
    EXPECT_THAT(
        log,
        HasSubstr("hotloop: error: --budget 5 s is too small to compare "
                  "anything on this config"));
    EXPECT_FALSE(fs::exists(dir.file("small.yaml")));
  }
  // Bad flags and a config that does not train are named.
  args.push_back("--budget=soon");
  r = run_cli(args);
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err,
      HasSubstr("--budget: expected a duration such as 5m, 90s or 300, got "
                "'soon'"));
  r = run_cli({"tune", "--data.root=" + dir.file("nowhere"), "--repeats=1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err, HasSubstr("--repeats: expected a number from 2 to 20, got '1'"));
  r.code = run_process(
      {"tune", "--data.root=" + dir.file("nowhere"), "--budget=30s"},
      dir.file("nowhere.log"));
  r.err = read_text(dir.file("nowhere.log"));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(
      r.err,
      HasSubstr("hotloop tune: the given config does not train: exit status "));
  EXPECT_THAT(r.err, HasSubstr(dir.file("nowhere")));
}

} // namespace
} // namespace hotloop::cli
