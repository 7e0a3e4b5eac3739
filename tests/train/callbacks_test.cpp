#include "hotloop/core/error.h"
#include "hotloop/log/csv_logger.h"
#include "hotloop/log/logger.h"
#include "hotloop/log/tensorboard_logger.h"
#include "hotloop/train/early_stopping.h"
#include "hotloop/train/lr_monitor.h"
#include "hotloop/train/model_checkpoint.h"
#include "hotloop/train/timer.h"
#include "test_util.h"
#include "train/trainer_fixture.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/optim/sgd.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <thread>

namespace hotloop::train {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Records every hook it sees, by name.
class RecordingCallback : public Callback {
 public:
  void setup(Trainer&, Module&) override {
    calls.push_back("setup");
  }
  void on_fit_start(Trainer&, Module&) override {
    calls.push_back("fit_start");
  }
  void on_fit_end(Trainer&, Module&) override {
    calls.push_back("fit_end");
  }
  void on_train_epoch_start(Trainer&, Module&) override {
    calls.push_back("epoch_start");
  }
  void on_train_epoch_end(Trainer& trainer, Module&) override {
    calls.push_back("epoch_end");
    EXPECT_TRUE(trainer.callback_metrics().count("train_loss"));
  }
  void on_train_batch_start(
      Trainer&, Module&, const data::Batch&, int64_t batch_idx) override {
    calls.push_back("batch_start " + std::to_string(batch_idx));
  }
  void on_train_batch_end(
      Trainer&,
      Module&,
      const at::Tensor& loss,
      const data::Batch&,
      int64_t batch_idx) override {
    EXPECT_FALSE(loss.requires_grad());
    calls.push_back("batch_end " + std::to_string(batch_idx));
  }
  void on_before_backward(Trainer&, Module&, const at::Tensor&) override {
    calls.push_back("before_backward");
  }
  void on_after_backward(Trainer&, Module&) override {
    calls.push_back("after_backward");
  }
  void on_before_optimizer_step(
      Trainer& trainer, Module&, torch::optim::Optimizer&) override {
    calls.push_back("optimizer_step " + std::to_string(trainer.global_step()));
  }
  void on_before_zero_grad(
      Trainer& trainer, Module&, torch::optim::Optimizer&) override {
    calls.push_back("zero_grad " + std::to_string(trainer.global_step()));
  }
  void on_validation_start(Trainer& trainer, Module&) override {
    EXPECT_FALSE(trainer.sanity_checking());
    calls.push_back("val_start");
  }
  void on_validation_end(Trainer& trainer, Module&) override {
    calls.push_back(
        "val_end " +
        std::to_string(trainer.callback_metrics().count("val_acc")));
  }
  void on_test_start(Trainer&, Module&) override {
    calls.push_back("test_start");
  }
  void on_test_end(Trainer&, Module&) override {
    calls.push_back("test_end");
  }
  void on_exception(Trainer&, Module&, const std::exception& e) override {
    calls.push_back(std::string("exception ") + e.what());
  }
  std::vector<std::string> calls;
};

// Keeps every record the Trainer sends, as a Logger would write them.
class RecordingLogger : public log::Logger {
 public:
  void log_metrics(
      const std::map<std::string, double>& metrics, int64_t step) override {
    records.emplace_back(step, metrics);
  }
  void log_hyperparams(
      const std::map<std::string, std::string>& params,
      const std::map<std::string, double>& metrics) override {
    hyperparams = params;
    final_metrics = metrics;
  }
  void finalize(const std::string& status) override {
    statuses.push_back(status);
  }
  std::map<std::string, std::string> hyperparams;
  std::map<std::string, double> final_metrics;
  std::vector<std::pair<int64_t, std::map<std::string, double>>> records;
  std::vector<std::string> statuses;
};

// A classifier whose validation logs a scripted `score`, one value per
// validation run, so checkpoint ranking and early stopping are exact.
class ScriptedClassifier : public ImageClassifier {
 public:
  ScriptedClassifier(ImageClassifier&& base, std::vector<double> scores)
      : ImageClassifier(std::move(base)), scores_(std::move(scores)) {}
  void validation_step(
      const data::Batch& batch,
      int64_t batch_idx,
      MetricCollection& metrics) override {
    ImageClassifier::validation_step(batch, batch_idx, metrics);
    if (batch_idx == 0) {
      const size_t run = std::min(runs_++, scores_.size() - 1);
      metrics.log("score", scores_[run]);
    }
  }

 private:
  std::vector<double> scores_;
  size_t runs_ = 0;
};

class CallbackTest : public TrainerTest {
 protected:
  TrainerOptions options() {
    return TrainerTest::options().num_sanity_val_steps(0);
  }
  std::set<std::string> files(const std::string& dir) {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir)) {
      names.insert(entry.path().filename().string());
    }
    return names;
  }
};

TEST_F(CallbackTest, HooksRunInLightningsOrder) {
  auto recorder = std::make_shared<RecordingCallback>();
  auto train = train_loader();
  Trainer trainer(TrainerTest::options()
                      .max_epochs(1)
                      .limit_train_batches(3)
                      .accumulate_grad_batches(2)
                      .limit_val_batches(1)
                      .num_sanity_val_steps(1)
                      .enable_checkpointing(false));
  trainer.add_callback(recorder);
  trainer.fit(*make_module(0), train, &val_loader_);
  // The sanity check runs no validation hooks; the optimizer hook comes
  // once per accumulated step, before the step counts.
  EXPECT_THAT(
      recorder->calls,
      ElementsAre(
          "setup",
          "fit_start",
          "epoch_start",
          "batch_start 0",
          "before_backward",
          "after_backward",
          "batch_end 0",
          "batch_start 1",
          "before_backward",
          "after_backward",
          "optimizer_step 0",
          "zero_grad 0",
          "batch_end 1",
          "batch_start 2",
          "before_backward",
          "after_backward",
          "optimizer_step 1",
          "zero_grad 1",
          "batch_end 2",
          "val_start",
          "val_end 1",
          "epoch_end",
          "fit_end"));
  recorder->calls.clear();
  trainer.test(*make_module(0), val_loader_);
  EXPECT_THAT(recorder->calls, ElementsAre("test_start", "test_end"));
}

// What the backward hooks see: the loss to differentiate, then gradients.
class BackwardWatcher : public Callback {
 public:
  void on_train_batch_start(
      Trainer&, Module& module, const data::Batch&, int64_t) override {
    gradients_at_batch_start.push_back(module.parameters()[0].grad().defined());
  }
  void on_before_backward(
      Trainer&, Module& module, const at::Tensor& loss) override {
    backward_losses.push_back(loss.item<double>());
    EXPECT_TRUE(loss.requires_grad());
  }
  void on_after_backward(Trainer&, Module& module) override {
    for (const at::Tensor& p : module.parameters()) {
      gradients_after_backward &= p.grad().defined();
    }
  }
  void on_before_zero_grad(
      Trainer&, Module& module, torch::optim::Optimizer&) override {
    for (const at::Tensor& p : module.parameters()) {
      gradients_before_zero_grad &= p.grad().defined();
    }
  }
  void on_train_batch_end(
      Trainer&,
      Module&,
      const at::Tensor& loss,
      const data::Batch&,
      int64_t) override {
    batch_losses.push_back(loss.item<double>());
  }
  std::vector<double> backward_losses;
  std::vector<double> batch_losses;
  std::vector<bool> gradients_at_batch_start;
  bool gradients_after_backward = true;
  bool gradients_before_zero_grad = true;
};

TEST_F(CallbackTest, BackwardHooksSeeTheDividedLossThenTheGradients) {
  auto watcher = std::make_shared<BackwardWatcher>();
  auto train = train_loader();
  Trainer trainer(options().max_epochs(1).accumulate_grad_batches(2));
  trainer.add_callback(watcher);
  trainer.fit(*make_module(0), train);
  // The loss each backward starts from is the batch's over the 2
  // micro-batches of a step (exactly: a division by 2).
  ASSERT_EQ(watcher->backward_losses.size(), 8u);
  ASSERT_EQ(watcher->batch_losses.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(watcher->backward_losses[i], watcher->batch_losses[i] / 2) << i;
  }
  EXPECT_TRUE(watcher->gradients_after_backward);
  EXPECT_TRUE(watcher->gradients_before_zero_grad);
  // A step's first micro-batch starts without gradients (set to None after
  // the last step), its second with the first one's.
  EXPECT_THAT(
      watcher->gradients_at_batch_start,
      ElementsAre(false, true, false, true, false, true, false, true));
}

// Changes a weight for the file's sake around each checkpoint write, as
// WeightAveraging does, and records the calls.
class SaveHooks : public Callback {
 public:
  void on_save_checkpoint(Trainer&, Module& module) override {
    calls.push_back("save");
    const at::NoGradGuard no_grad;
    kept = module.parameters()[0].clone();
    module.parameters()[0].fill_(7.0);
  }
  void on_save_checkpoint_end(Trainer&, Module& module) override {
    calls.push_back("save_end");
    const at::NoGradGuard no_grad;
    module.parameters()[0].copy_(kept);
  }
  void on_train_batch_end(
      Trainer& trainer,
      Module&,
      const at::Tensor&,
      const data::Batch&,
      int64_t batch_idx) override {
    if (batch_idx == 0) {
      calls.push_back("bad_save");
      EXPECT_THROW(
          trainer.save_checkpoint("/nonexistent-folder/x.ckpt"), Error);
    }
  }
  std::vector<std::string> calls;
  at::Tensor kept;
};

TEST_F(CallbackTest, SaveHooksWrapEveryCheckpointWriteEvenOneThatFails) {
  auto hooks = std::make_shared<SaveHooks>();
  auto train = train_loader();
  auto module = make_module(0);
  Trainer trainer(options().max_epochs(1));
  trainer.add_callback(hooks);
  const FitResult result = trainer.fit(*module, train);
  // The failed write's hooks, then last.ckpt's at the epoch's end.
  EXPECT_THAT(
      hooks->calls,
      ElementsAre("bad_save", "save", "save_end", "save", "save_end"));
  // The file has what the hook put in; the module got its weight back.
  EXPECT_FALSE(module->parameters()[0].eq(7.0).all().item<bool>());
  auto loaded = make_module(1);
  load_checkpoint(result.checkpoint_path, *loaded);
  EXPECT_TRUE(loaded->parameters()[0].eq(7.0).all().item<bool>());
}

TEST_F(CallbackTest, AnExceptionReachesCallbacksAndLoggersThenPropagates) {
  class Failing : public ImageClassifier {
   public:
    using ImageClassifier::ImageClassifier;
    explicit Failing(ImageClassifier&& base)
        : ImageClassifier(std::move(base)) {}
    at::Tensor training_step(
        const data::Batch&, int64_t, MetricCollection&) override {
      throw Error("the step failed");
    }
  };
  Failing module(std::move(*make_module(0)));
  auto recorder = std::make_shared<RecordingCallback>();
  auto logger = std::make_shared<RecordingLogger>();
  auto train = train_loader();
  Trainer trainer(options().max_epochs(1));
  trainer.add_callback(recorder).add_logger(logger);
  EXPECT_THROWS_WITH(Error, trainer.fit(module, train), "the step failed");
  EXPECT_EQ(recorder->calls.back(), "exception the step failed");
  EXPECT_THAT(logger->statuses, ElementsAre("failed"));
  EXPECT_FALSE(trainer.fitting());
}

TEST_F(CallbackTest, LoggersGetOneRecordPerLoggingStepAndPerEpoch) {
  auto logger = std::make_shared<RecordingLogger>();
  auto train = train_loader();
  Trainer trainer(options().max_epochs(2).log_every_n_steps(3));
  trainer.add_logger(logger);
  trainer.add_callback(std::make_shared<LearningRateMonitor>());
  trainer.fit(*make_module(0), train, &val_loader_);
  // 8 steps per epoch: records at steps 3, 6 (epoch 0), 8 (epoch end, with
  // validation), then 9, 12, 15 and 16 (epoch end).
  std::vector<int64_t> steps;
  for (const auto& [step, metrics] : logger->records) {
    steps.push_back(step);
  }
  EXPECT_THAT(steps, ElementsAre(3, 6, 8, 9, 12, 15, 16));
  const auto& step3 = logger->records[0].second;
  EXPECT_EQ(step3.at("epoch"), 0);
  EXPECT_TRUE(step3.count("train_loss_step"));
  // Adam with no weight decay on norms and biases: two parameter groups.
  EXPECT_DOUBLE_EQ(step3.at("lr-Adam/pg1"), 1e-2);
  EXPECT_DOUBLE_EQ(step3.at("lr-Adam/pg2"), 1e-2);
  // Step 6 ran with the rate halved after 5 steps.
  EXPECT_DOUBLE_EQ(logger->records[1].second.at("lr-Adam/pg1"), 5e-3);
  const auto& epoch_end = logger->records[2].second;
  for (const char* key : {"train_loss", "val_loss", "val_acc", "epoch"}) {
    EXPECT_TRUE(epoch_end.count(key)) << key;
  }
  EXPECT_EQ(logger->records[6].second.at("epoch"), 1);
  EXPECT_THAT(logger->statuses, ElementsAre("success"));
  EXPECT_TRUE(logger->hyperparams.empty()); // none were set
  // The last logged rate is step 15's: halved after steps 5 and 10.
  EXPECT_DOUBLE_EQ(trainer.logged_metrics().at("lr-Adam/pg1"), 2.5e-3);
}

TEST_F(CallbackTest, HyperparametersReachTheLoggersWithTheFinalMetrics) {
  auto logger = std::make_shared<RecordingLogger>();
  auto train = train_loader();
  Trainer trainer(options().max_epochs(1));
  trainer.add_logger(logger).set_hyperparams({{"optimizer.lr", "0.01"}});
  auto module = make_module(0);
  const double forward_flops =
      models::FashionCnn(small_model())->flops_per_sample();
  module->set_flops_per_sample(forward_flops);
  const FitResult result = trainer.fit(*module, train, &val_loader_);
  EXPECT_EQ(logger->hyperparams.at("optimizer.lr"), "0.01");
  EXPECT_EQ(logger->final_metrics, result.metrics);
  EXPECT_EQ(result.profile.steps, 8);
  EXPECT_EQ(result.profile.samples, 256);
  EXPECT_GT(result.profile.forward, 0);
  EXPECT_GT(result.profile.validation, 0);
  // The set-up comes before the first step, and the steps after it.
  EXPECT_GT(result.profile.setup, 0);
  EXPECT_LT(result.profile.setup + result.profile.step_seconds(), result.wall_s);
  // Its parts add up to it (no checkpoint was restored; the fixture runs
  // no sanity check).
  double parts = 0;
  std::set<std::string> names;
  for (const auto& [name, seconds] : result.profile.setup_parts) {
    names.insert(name);
    parts += seconds;
  }
  EXPECT_EQ(
      names,
      (std::set<std::string>{"callbacks", "model_summary", "strategy"}));
  EXPECT_LE(parts, result.profile.setup);
  EXPECT_GT(parts, 0.99 * result.profile.setup - 1e-4);
  EXPECT_EQ(trainer.model_summary().total_params(), [&] {
    int64_t n = 0;
    for (const auto& p : make_module(0)->parameters()) {
      n += p.numel();
    }
    return n;
  }());
  // Shapes from one training sample through the network.
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& layer : trainer.model_summary().layers) {
    shapes[layer.name] = layer.output_shape;
  }
  EXPECT_EQ(
      shapes.at("network.features.0"),
      (std::vector<int64_t>{1, 8, kSize, kSize}));
  EXPECT_EQ(shapes.at("network"), (std::vector<int64_t>{1, 4}));
  // Training FLOPs: the forward's and twice that for the backward.
  EXPECT_DOUBLE_EQ(result.profile.flops_per_sample, 3 * forward_flops);
  std::ifstream in(trainer.log_dir() + "/summary.json");
  const auto summary = nlohmann::json::parse(in).at("profile");
  EXPECT_DOUBLE_EQ(
      summary.at("flops_per_s").get<double>(),
      3 * forward_flops * (256 / result.profile.step_seconds()));
  EXPECT_GT(summary.at("peak_flops").get<double>(), 0);
  EXPECT_DOUBLE_EQ(summary.at("setup_s").get<double>(), result.profile.setup);
  using Parts = std::map<std::string, double>;
  EXPECT_EQ(summary.at("setup_parts").get<Parts>(), result.profile.setup_parts);
  EXPECT_DOUBLE_EQ(
      summary.at("warmup_s").get<double>(), result.profile.warmup_seconds);
  EXPECT_DOUBLE_EQ(
      summary.at("utilization").get<double>(),
      summary.at("flops_per_s").get<double>() /
          summary.at("peak_flops").get<double>());
  EXPECT_EQ(summary.at("peak_source").get<std::string>(), "measured");
  // From the process start to the first step; 8 steps end no warm-up.
  EXPECT_GT(summary.at("process_to_first_step_s").get<double>(), 0);
  EXPECT_TRUE(summary.at("process_to_step10_s").is_null());
}

TEST_F(CallbackTest, AGivenPeakIsTheOneTheMfuDividesBy) {
  auto train = train_loader();
  Trainer trainer(options().max_epochs(1).peak_tflops(0.5));
  auto module = make_module(0);
  module->set_flops_per_sample(
      models::FashionCnn(small_model())->flops_per_sample());
  const StepProfile profile = trainer.fit(*module, train).profile;
  EXPECT_DOUBLE_EQ(profile.peak_flops, 0.5e12);
  EXPECT_EQ(profile.peak_source, "trainer.peak_tflops");
  std::ifstream in(trainer.log_dir() + "/summary.json");
  const auto summary = nlohmann::json::parse(in).at("profile");
  EXPECT_EQ(
      summary.at("peak_source").get<std::string>(), "trainer.peak_tflops");
  EXPECT_DOUBLE_EQ(
      summary.at("utilization").get<double>(),
      profile.flops_per_sample * profile.steady_samples_per_s() / 0.5e12);
  EXPECT_THAT(
      summary.at("utilization_text").get<std::string>(),
      HasSubstr("GFLOP/s, trainer.peak_tflops)"));
}

TEST_F(CallbackTest, PytorchProfilerWritesAChromeTraceOfTheChosenSteps) {
  auto train = train_loader();
  Trainer trainer(
      options().max_epochs(1).profiler("pytorch").profiler_steps(2));
  trainer.fit(*make_module(0), train);
  std::ifstream in(trainer.log_dir() + "/trace.json");
  ASSERT_TRUE(in.good());
  const auto trace = nlohmann::json::parse(in);
  // torch.profiler's layout (Kineto's own where LibTorch has it).
  ASSERT_TRUE(trace.contains("traceEvents"));
  int64_t convolutions = 0;
  std::vector<std::string> steps;
  std::map<std::string, std::pair<double, double>> spans;
  for (const auto& event : trace.at("traceEvents")) {
    const std::string name = event.value("name", "");
    convolutions += name == "aten::convolution";
    if (name.rfind("ProfilerStep#", 0) == 0 &&
        event.value("cat", "") == "user_annotation") {
      steps.push_back(name);
      spans[name] = {
          event.at("ts").get<double>(),
          event.at("ts").get<double>() + event.at("dur").get<double>()};
    }
  }
  // Two steps of a one-conv model after the two skipped: two forward
  // convolutions, and the steps marked as torch.profiler marks them, one
  // after the other.
  EXPECT_EQ(convolutions, 2);
  EXPECT_EQ(
      steps, (std::vector<std::string>{"ProfilerStep#3", "ProfilerStep#4"}));
  EXPECT_LE(spans["ProfilerStep#3"].second, spans["ProfilerStep#4"].first);
  EXPECT_LT(spans["ProfilerStep#4"].first, spans["ProfilerStep#4"].second);

  // From the first step, as bench/run traces the warm-up, to the epoch's
  // last: the trace is written before the validation that follows, which
  // is no step's.
  Trainer from_start(options()
                         .max_epochs(1)
                         .profiler("pytorch")
                         .profiler_steps(8)
                         .profiler_skip_steps(0));
  from_start.fit(*make_module(0), train, &val_loader_);
  std::ifstream first(from_start.log_dir() + "/trace.json");
  std::set<std::string> first_steps;
  double last_step_end = 0;
  double last_event_end = 0;
  // Named: a range-for over parse(...).at(...) would outlive the document.
  const auto first_trace = nlohmann::json::parse(first);
  for (const auto& event : first_trace.at("traceEvents")) {
    // Kineto's traces also hold instant, flow and metadata events.
    if (event.value("ph", "") != "X" || !event.contains("dur")) {
      continue;
    }
    const double end =
        event.at("ts").get<double>() + event.at("dur").get<double>();
    last_event_end = std::max(last_event_end, end);
    if (event.value("cat", "") == "user_annotation") {
      first_steps.insert(event.value("name", ""));
      last_step_end = std::max(last_step_end, end);
    }
  }
  EXPECT_EQ(first_steps.size(), 8u);
  EXPECT_EQ(first_steps.count("ProfilerStep#1"), 1u);
  EXPECT_EQ(first_steps.count("ProfilerStep#8"), 1u);
  // No operator after the last step: the validation's forward passes would
  // be there (Kineto's own closing events end a few microseconds after).
  int64_t after = 0;
  for (const auto& event : first_trace.at("traceEvents")) {
    after += event.value("cat", "") == "cpu_op" &&
             event.at("ts").get<double>() >= last_step_end;
  }
  EXPECT_EQ(after, 0);
  EXPECT_LE(last_event_end, last_step_end + 1000.0); // microseconds

  // A resumed fit is traced too, from its own third step.
  Trainer resumed(
      options().max_epochs(2).profiler("pytorch").profiler_steps(2));
  resumed.fit(
      *make_module(0),
      train,
      nullptr,
      trainer.log_dir() + "/checkpoints/last.ckpt");
  std::ifstream again(resumed.log_dir() + "/trace.json");
  ASSERT_TRUE(again.good());
  EXPECT_TRUE(nlohmann::json::parse(again).contains("traceEvents"));
  EXPECT_THROWS_WITH(
      ConfigError,
      Trainer(options().profiler("advanced")),
      "trainer.profiler: expected \"\" or pytorch, got 'advanced'");
}

TEST_F(CallbackTest, GradientsAreDroppedOrZeroFilledAfterEachStep) {
  auto train = train_loader();
  auto dropped = make_module(0);
  Trainer(options().max_epochs(1).limit_train_batches(2)).fit(*dropped, train);
  for (const auto& parameter : dropped->parameters()) {
    EXPECT_FALSE(parameter.grad().defined());
  }
  auto zeroed = make_module(0);
  const FitResult result =
      Trainer(
          options().max_epochs(1).limit_train_batches(2).zero_grad_set_to_none(
              false))
          .fit(*zeroed, train);
  for (const auto& parameter : zeroed->parameters()) {
    ASSERT_TRUE(parameter.grad().defined());
    EXPECT_EQ(parameter.grad().count_nonzero().item<int64_t>(), 0);
  }
  // The same updates either way.
  const auto a = dropped->parameters();
  const auto b = zeroed->parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(a[i].equal(b[i])) << i;
  }
}

TEST(LearningRateMonitor, NamesOneGroupAfterTheOptimizerAndLogsMomentum) {
  auto module = make_module(0);
  auto logger = std::make_shared<RecordingLogger>();
  optim::OptimizerOptions sgd;
  sgd.name = "sgd";
  sgd.lr = 0.1;
  sgd.momentum = 0.9;
  sgd.no_decay_norm_and_bias = false;
  optim::SchedulerOptions none;
  none.name = "none";
  ImageClassifier plain(
      torch::nn::AnyModule(models::FashionCnn(small_model())), sgd, none);
  auto [images, labels] = hotloop::testing::quadrant_images(64, kSize, 1);
  data::DataLoader train(
      quadrants(64, 1), data::DataLoaderOptions(32).shuffle(true));
  Trainer trainer(TrainerOptions()
                      .accelerator("cpu")
                      .max_epochs(1)
                      .default_root_dir("")
                      .enable_progress_bar(false)
                      .log_every_n_steps(1));
  trainer.add_logger(logger).add_callback(
      std::make_shared<LearningRateMonitor>("step", /*log_momentum=*/true));
  trainer.fit(plain, train);
  const auto& first = logger->records.at(0).second;
  EXPECT_DOUBLE_EQ(first.at("lr-SGD"), 0.1);
  EXPECT_DOUBLE_EQ(first.at("lr-SGD-momentum"), 0.9);
  EXPECT_THROWS_WITH(
      ConfigError,
      LearningRateMonitor("batch"),
      "lr_monitor.logging_interval: expected step, epoch or empty, got "
      "'batch'");
}

TEST_F(CallbackTest, LearningRateMonitorByEpochLogsTheRateEachEpochStarts) {
  // make_module's schedule halves the rate every 5 steps; 8 steps an epoch.
  auto logger = std::make_shared<RecordingLogger>();
  auto train = train_loader();
  Trainer trainer(options().max_epochs(3).log_every_n_steps(1));
  trainer.add_logger(logger).add_callback(
      std::make_shared<LearningRateMonitor>("epoch"));
  trainer.fit(*make_module(0), train);
  std::vector<std::pair<int64_t, double>> rates;
  for (const auto& [step, metrics] : logger->records) {
    for (const auto& [name, value] : metrics) {
      if (name.rfind("lr-Adam", 0) == 0 &&
          name.find("pg2") == std::string::npos) {
        rates.emplace_back(step, value);
      }
    }
  }
  // One record as each epoch starts, at the steps taken before it, as
  // Lightning logs them: 0.01, then 0.005 after the halving at step 5, then
  // 0.0025 after step 10 and 0.00125 after step 15.
  ASSERT_EQ(rates.size(), 3u);
  EXPECT_EQ(rates[0].first, 0);
  EXPECT_DOUBLE_EQ(rates[0].second, 0.01);
  EXPECT_EQ(rates[1].first, 8);
  EXPECT_DOUBLE_EQ(rates[1].second, 0.005);
  EXPECT_EQ(rates[2].first, 16);
  EXPECT_DOUBLE_EQ(rates[2].second, 0.00125);
}

TEST_F(CallbackTest, ModelCheckpointKeepsTheBestKByTheMonitoredMetric) {
  ScriptedClassifier module(
      std::move(*make_module(0)), {0.5, 0.2, 0.9, 0.1, 0.7});
  auto checkpoint =
      std::make_shared<ModelCheckpoint>(ModelCheckpointOptions()
                                            .monitor("score")
                                            .mode("max")
                                            .save_top_k(2)
                                            .save_last(true)
                                            .filename("{epoch}-{score:.2f}"));
  auto train = train_loader();
  Trainer trainer(options().max_epochs(5));
  trainer.add_callback(checkpoint);
  const FitResult result = trainer.fit(module, train, &val_loader_);
  const std::string dir = trainer.log_dir() + "/checkpoints";
  EXPECT_EQ(checkpoint->dirpath(), dir);
  EXPECT_EQ(
      files(dir),
      (std::set<std::string>{
          "epoch=2-score=0.90.ckpt", "epoch=4-score=0.70.ckpt", "last.ckpt"}));
  EXPECT_EQ(checkpoint->best_model_path(), dir + "/epoch=2-score=0.90.ckpt");
  EXPECT_DOUBLE_EQ(checkpoint->best_model_score(), 0.9);
  EXPECT_EQ(result.best_model_path, checkpoint->best_model_path());
  EXPECT_EQ(result.checkpoint_path, dir + "/last.ckpt");
  // last.ckpt is the newest save, linked rather than written twice.
  struct stat last {
  }, newest{};
  ASSERT_EQ(::stat((dir + "/last.ckpt").c_str(), &last), 0);
  ASSERT_EQ(::stat((dir + "/epoch=4-score=0.70.ckpt").c_str(), &newest), 0);
  EXPECT_EQ(last.st_ino, newest.st_ino);
  // The best checkpoint holds the weights of epoch 2's end: it resumes at
  // epoch 3.
  auto fresh = make_module(5);
  Trainer resumed(options().max_epochs(3));
  const FitResult rest =
      resumed.fit(*fresh, train, &val_loader_, checkpoint->best_model_path());
  EXPECT_EQ(rest.steps, 24);
}

TEST_F(CallbackTest, ModelCheckpointSaveTopKZeroKeepsOnlyLast) {
  ScriptedClassifier module(std::move(*make_module(0)), {0.5, 0.9, 0.7});
  auto checkpoint = std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions().monitor("score").save_top_k(0).save_last(true));
  auto train = train_loader();
  Trainer trainer(options().max_epochs(3));
  trainer.add_callback(checkpoint);
  const FitResult result = trainer.fit(module, train, &val_loader_);
  const std::string dir = trainer.log_dir() + "/checkpoints";
  EXPECT_EQ(files(dir), (std::set<std::string>{"last.ckpt"}));
  EXPECT_TRUE(checkpoint->best_model_path().empty());
  EXPECT_EQ(result.checkpoint_path, dir + "/last.ckpt");
  // It is the end of the fit: a resume has nothing left to train.
  EXPECT_EQ(
      Trainer(options().max_epochs(3))
          .fit(*make_module(1), train, &val_loader_, result.checkpoint_path)
          .steps,
      24);
}

TEST_F(CallbackTest, ModelCheckpointWithoutMonitorKeepsTheNewestFile) {
  auto train = train_loader();
  Trainer trainer(options().max_epochs(3));
  const FitResult result = trainer.fit(*make_module(0), train, &val_loader_);
  EXPECT_EQ(
      files(trainer.log_dir() + "/checkpoints"),
      (std::set<std::string>{"epoch=2-step=24.ckpt", "last.ckpt"}));
  EXPECT_TRUE(result.best_model_path.empty());
}

TEST_F(CallbackTest, ModelCheckpointEveryNStepsResumesMidEpochBitForBit) {
  auto train = train_loader();
  auto straight = make_module(0);
  Trainer(options().max_epochs(2).enable_checkpointing(false))
      .fit(*straight, train, &val_loader_);

  auto module = make_module(0);
  Trainer trainer(options().max_epochs(2));
  trainer.add_callback(
      std::make_shared<ModelCheckpoint>(ModelCheckpointOptions()
                                            .every_n_train_steps(5)
                                            .every_n_epochs(0)
                                            .save_top_k(-1)));
  trainer.fit(*module, train, &val_loader_);
  const std::string dir = trainer.log_dir() + "/checkpoints";
  EXPECT_EQ(
      files(dir),
      (std::set<std::string>{
          "epoch=0-step=5.ckpt",
          "epoch=1-step=10.ckpt",
          "epoch=1-step=15.ckpt"}));

  auto resumed = make_module(42);
  Trainer(options().max_epochs(2).enable_checkpointing(false))
      .fit(*resumed, train, &val_loader_, dir + "/epoch=1-step=10.ckpt");
  const auto a = straight->parameters();
  const auto b = resumed->parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(a[i].equal(b[i])) << "parameter " << i;
  }
}

TEST_F(CallbackTest, ModelCheckpointStateCarriesOverOnResumeIntoItsFolder) {
  const std::string dir = dir_.file("ckpts");
  auto options_for = [&] {
    return ModelCheckpointOptions()
        .dirpath(dir)
        .monitor("score")
        .mode("min")
        .save_top_k(1)
        .save_last(true);
  };
  ScriptedClassifier first(std::move(*make_module(0)), {0.3, 0.6});
  auto checkpoint = std::make_shared<ModelCheckpoint>(options_for());
  auto train = train_loader();
  Trainer trainer(options().max_epochs(2));
  trainer.add_callback(checkpoint);
  trainer.fit(first, train, &val_loader_);
  EXPECT_DOUBLE_EQ(checkpoint->best_model_score(), 0.3);

  // Epoch 3 scores 0.4: worse than the restored best, so nothing new is
  // kept and the best stays epoch 0's file.
  ScriptedClassifier second(std::move(*make_module(0)), {0.4});
  auto restored = std::make_shared<ModelCheckpoint>(options_for());
  Trainer again(options().max_epochs(3));
  again.add_callback(restored);
  again.fit(second, train, &val_loader_, dir + "/last.ckpt");
  EXPECT_DOUBLE_EQ(restored->best_model_score(), 0.3);
  EXPECT_EQ(restored->best_model_path(), dir + "/epoch=0-step=8.ckpt");
  EXPECT_EQ(
      files(dir), (std::set<std::string>{"epoch=0-step=8.ckpt", "last.ckpt"}));
}

TEST(ModelCheckpoint, FormatsFileNamesAsLightningDoes) {
  const std::map<std::string, double> metrics{{"val_loss", 0.12345}};
  ModelCheckpoint named(
      ModelCheckpointOptions().filename("{epoch}-{step}-{val_loss:.3f}"));
  EXPECT_EQ(
      named.format_filename(1, 20, metrics), "epoch=1-step=20-val_loss=0.123");
  ModelCheckpoint plain(ModelCheckpointOptions()
                            .filename("model_{epoch:d}_{val_loss:.2e}")
                            .auto_insert_metric_name(false));
  EXPECT_EQ(plain.format_filename(3, 9, metrics), "model_3_1.23e-01");
  ModelCheckpoint missing(ModelCheckpointOptions().filename("{val_acc}"));
  EXPECT_THROWS_WITH(
      ConfigError,
      missing.format_filename(0, 0, metrics),
      "uses {val_acc}, which is not a logged metric (logged: val_loss)");
  ModelCheckpoint bad_spec(ModelCheckpointOptions().filename("{val_loss:x}"));
  EXPECT_THROWS_WITH(
      ConfigError,
      bad_spec.format_filename(0, 0, metrics),
      "unsupported format ':x'");
}

TEST(ModelCheckpoint, InvalidOptionsNameTheOption) {
  EXPECT_THROWS_WITH(
      ConfigError,
      ModelCheckpoint(ModelCheckpointOptions().mode("best")),
      "model_checkpoint.mode: expected min or max, got 'best'");
  EXPECT_THROWS_WITH(
      ConfigError,
      ModelCheckpoint(ModelCheckpointOptions().save_top_k(3)),
      "model_checkpoint.save_top_k=3 ranks checkpoints, which needs "
      "model_checkpoint.monitor");
  EXPECT_THROWS_WITH(
      ConfigError,
      ModelCheckpoint(ModelCheckpointOptions().filename("a/b")),
      "must be a file name, not a path");
}

TEST_F(CallbackTest, ModelCheckpointNamesAMissingMonitor) {
  auto train = train_loader();
  Trainer trainer(options().max_epochs(1));
  trainer.add_callback(std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions().monitor("val_f1")));
  EXPECT_THROWS_WITH(
      ConfigError,
      trainer.fit(*make_module(0), train, &val_loader_),
      "ModelCheckpoint monitors 'val_f1', which no step logged (logged: "
      "train_loss, val_acc, val_loss)");
}

TEST_F(CallbackTest, EarlyStoppingStopsAfterPatienceChecksWithoutImprovement) {
  // Improvements must beat the best by more than min_delta = 0.05: 0.81
  // and 0.79 do not beat 0.8, so the second of them stops the fit.
  ScriptedClassifier module(
      std::move(*make_module(0)), {1.0, 0.8, 0.81, 0.79, 0.1});
  auto stopper = std::make_shared<EarlyStopping>(
      EarlyStoppingOptions("score").patience(2).min_delta(0.05).verbose(false));
  auto train = train_loader();
  Trainer trainer(options().max_epochs(10));
  trainer.add_callback(stopper);
  const FitResult result = trainer.fit(module, train, &val_loader_);
  EXPECT_EQ(result.epochs, 4);
  EXPECT_EQ(stopper->stopped_epoch(), 3);
  EXPECT_DOUBLE_EQ(stopper->best_score(), 0.8);
  EXPECT_EQ(stopper->wait_count(), 2);
  EXPECT_THAT(
      stopper->reason(),
      HasSubstr("score did not improve in the last 2 records; best 0.8"));
}

TEST_F(CallbackTest, EarlyStoppingInMaxModeWaitsForAHigherScore) {
  // 0.6 is the best; 0.55 and 0.58 are lower, so the second stops the fit.
  ScriptedClassifier module(
      std::move(*make_module(0)), {0.5, 0.6, 0.55, 0.58, 0.9});
  auto stopper = std::make_shared<EarlyStopping>(
      EarlyStoppingOptions("score").mode("max").patience(2).verbose(false));
  auto train = train_loader();
  Trainer trainer(options().max_epochs(10));
  trainer.add_callback(stopper);
  EXPECT_EQ(trainer.fit(module, train, &val_loader_).epochs, 4);
  EXPECT_EQ(stopper->stopped_epoch(), 3);
  EXPECT_DOUBLE_EQ(stopper->best_score(), 0.6);
}

TEST_F(CallbackTest, MinEpochsOverridesAnEarlyStop) {
  ScriptedClassifier module(std::move(*make_module(0)), {1.0, 2.0});
  auto stopper = std::make_shared<EarlyStopping>(
      EarlyStoppingOptions("score").patience(1).verbose(false));
  auto train = train_loader();
  std::ostringstream log;
  Trainer trainer(
      options().max_epochs(10).min_epochs(4).enable_progress_bar(true), log);
  trainer.add_callback(stopper);
  const FitResult result = trainer.fit(module, train, &val_loader_);
  // Asked to stop after epoch 2; the minimum keeps it going to 4.
  EXPECT_EQ(result.epochs, 4);
  EXPECT_THAT(
      log.str(),
      HasSubstr("a stop was requested, but trainer.min_epochs=4 is not "
                "reached; training continues"));
}

TEST_F(CallbackTest, EarlyStoppingStopsOnANonFiniteMetricAndOnThresholds) {
  auto run = [&](std::vector<double> scores, EarlyStoppingOptions options) {
    ScriptedClassifier module(std::move(*make_module(0)), std::move(scores));
    auto stopper = std::make_shared<EarlyStopping>(options.verbose(false));
    auto train = train_loader();
    Trainer trainer(this->options().max_epochs(6).limit_train_batches(1));
    trainer.add_callback(stopper);
    return std::make_pair(
        trainer.fit(module, train, &val_loader_).epochs, stopper->reason());
  };
  const auto [nan_epochs, nan_reason] =
      run({1.0, NAN}, EarlyStoppingOptions("score").patience(5));
  EXPECT_EQ(nan_epochs, 2);
  EXPECT_THAT(nan_reason, HasSubstr("score = nan is not finite"));
  const auto [good_epochs, good_reason] =
      run({0.5, 0.4, 0.05},
          EarlyStoppingOptions("score").patience(5).stopping_threshold(0.1));
  EXPECT_EQ(good_epochs, 3);
  EXPECT_THAT(good_reason, HasSubstr("stopping threshold reached"));
  const auto [bad_epochs, bad_reason] =
      run({0.5, 7.0},
          EarlyStoppingOptions("score").patience(5).divergence_threshold(5));
  EXPECT_EQ(bad_epochs, 2);
  EXPECT_THAT(bad_reason, HasSubstr("divergence threshold reached"));
}

TEST_F(CallbackTest, EarlyStoppingNamesAMissingMetricUnlessNotStrict) {
  auto train = train_loader();
  Trainer strict(options().max_epochs(1));
  strict.add_callback(
      std::make_shared<EarlyStopping>(EarlyStoppingOptions("val_f1")));
  EXPECT_THROWS_WITH(
      ConfigError,
      strict.fit(*make_module(0), train, &val_loader_),
      "EarlyStopping monitors 'val_f1', which no step logged (logged: "
      "train_loss, val_acc, val_loss)");
  Trainer lenient(options().max_epochs(2));
  lenient.add_callback(std::make_shared<EarlyStopping>(
      EarlyStoppingOptions("val_f1").strict(false)));
  EXPECT_EQ(lenient.fit(*make_module(0), train, &val_loader_).epochs, 2);
  EXPECT_THROWS_WITH(
      ConfigError,
      EarlyStopping(EarlyStoppingOptions("val_loss").patience(0)),
      "early_stopping.patience must be >= 1, got 0");
  EXPECT_THROWS_WITH(
      ConfigError,
      EarlyStopping(EarlyStoppingOptions("val_loss").mode("up")),
      "early_stopping.mode: expected min or max, got 'up'");
}

TEST_F(CallbackTest, EarlyStoppingCountersComeBackFromTheCheckpoint) {
  // One record without improvement before the cut; the resumed run's
  // first check makes it two and stops, as the uninterrupted run would.
  ScriptedClassifier first(std::move(*make_module(0)), {0.5, 0.6});
  auto train = train_loader();
  Trainer trainer(options().max_epochs(2));
  trainer.add_callback(std::make_shared<EarlyStopping>(
      EarlyStoppingOptions("score").patience(2).verbose(false)));
  const FitResult cut = trainer.fit(first, train, &val_loader_);

  ScriptedClassifier second(std::move(*make_module(0)), {0.7});
  auto stopper = std::make_shared<EarlyStopping>(
      EarlyStoppingOptions("score").patience(2).verbose(false));
  Trainer again(options().max_epochs(10));
  again.add_callback(stopper);
  const FitResult rest =
      again.fit(second, train, &val_loader_, cut.checkpoint_path);
  EXPECT_EQ(rest.epochs, 3);
  EXPECT_EQ(stopper->stopped_epoch(), 2);
  EXPECT_DOUBLE_EQ(stopper->best_score(), 0.5);
}

// A dataset that takes its time over every batch, as a slow disk would.
class SlowDataset : public data::Dataset {
 public:
  explicit SlowDataset(std::shared_ptr<data::Dataset> inner)
      : inner_(std::move(inner)) {}
  int64_t size() const override {
    return inner_->size();
  }
  data::SampleSpec spec() const override {
    return inner_->spec();
  }
  data::Example get(
      int64_t index, const data::SampleContext& context) const override {
    return inner_->get(index, context);
  }
  void get_batch(
      c10::ArrayRef<int64_t> indices,
      const data::SampleContext& context,
      data::Batch& out) const override {
    // Far slower than a step of the tiny model, even on a loaded machine:
    // there, with CI's two tests at once, a step took up to 100 ms, which
    // the loader thread's prefetch overlaps with this wait.
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    inner_->get_batch(indices, context, out);
  }

 private:
  std::shared_ptr<data::Dataset> inner_;
};

TEST_F(CallbackTest, TheProfileBlamesASlowLoaderAndNamesTheOption) {
  data::DataLoader slow(
      std::make_shared<SlowDataset>(train_set_),
      data::DataLoaderOptions(32).num_workers(1));
  Trainer trainer(options().max_epochs(1));
  const FitResult result = trainer.fit(*make_module(0), slow);
  const StepProfile& profile = result.profile;
  EXPECT_GT(profile.data, 0.5 * profile.step_seconds());
  std::ifstream in(trainer.log_dir() + "/summary.json");
  const auto summary = nlohmann::json::parse(in);
  EXPECT_THAT(
      summary.at("profile").at("verdict").get<std::string>(),
      ::testing::StartsWith("input-bound: "));
  EXPECT_THAT(
      summary.at("profile").at("verdict").get<std::string>(),
      HasSubstr("raise data.num_workers (now 1)"));
}

// Takes its time in the hooks that run inside a training step, as an input
// grid or gradient histograms do.
// Sleeps far longer than the tiny model's step takes even on a loaded
// machine (CI runs two tests at once), so that the sleeps' place in the
// profile is unmistakable.
constexpr auto kHookSleep = std::chrono::milliseconds(150);

class SlowStepHooks : public Callback {
 public:
  void on_train_batch_start(
      Trainer&, Module&, const data::Batch&, int64_t) override {
    std::this_thread::sleep_for(kHookSleep);
  }
  void on_before_optimizer_step(
      Trainer&, Module&, torch::optim::Optimizer&) override {
    std::this_thread::sleep_for(kHookSleep);
  }
};

TEST_F(CallbackTest, HooksInsideTheStepCountAsLoggingTime) {
  auto train = train_loader();
  Trainer trainer(options().max_epochs(1));
  trainer.add_callback(std::make_shared<SlowStepHooks>());
  const StepProfile& profile = trainer.fit(*make_module(0), train).profile;
  ASSERT_EQ(profile.steps, 8);
  const double sleeps = 8 * std::chrono::duration<double>(kHookSleep).count();
  EXPECT_GE(profile.logging, 2 * sleeps);
  // Had the sleeps stayed there, each would hold at least 8 x 150 ms.
  EXPECT_LT(profile.forward, sleeps);
  EXPECT_LT(profile.optimizer, sleeps);
  std::ifstream in(trainer.log_dir() + "/summary.json");
  EXPECT_THAT(
      nlohmann::json::parse(in).at("profile").at("verdict").get<std::string>(),
      ::testing::StartsWith("logging-bound: "));
}

// Takes its time in the optimizer step, so that a fit is optimizer-bound.
class SlowSgd final : public torch::optim::SGD {
 public:
  using SGD::SGD;
  at::Tensor step(LossClosure closure = nullptr) override {
    std::this_thread::sleep_for(kHookSleep);
    return SGD::step(std::move(closure));
  }
};

class SlowOptimizerClassifier final : public ImageClassifier {
 public:
  explicit SlowOptimizerClassifier(ImageClassifier&& module)
      : ImageClassifier(std::move(module)) {}
  OptimizerSetup configure_optimizers(const FitPlan&) override {
    return OptimizerSetup(std::make_unique<SlowSgd>(
        parameters(), torch::optim::SGDOptions(0.01)));
  }
};

TEST_F(CallbackTest, TheProfileAdvisesALargerBatchOnlyWhereTheLoaderSetsIt) {
  const auto verdict = [&](data::DataLoader& train) {
    SlowOptimizerClassifier module(std::move(*make_module(0)));
    Trainer trainer(options().max_epochs(1).limit_train_batches(5));
    trainer.fit(module, train);
    std::ifstream in(trainer.log_dir() + "/summary.json");
    return nlohmann::json::parse(in)
        .at("profile")
        .at("verdict")
        .get<std::string>();
  };
  auto plain = train_loader();
  const std::string by_batch_size = verdict(plain);
  EXPECT_THAT(by_batch_size, ::testing::StartsWith("optimizer-bound: "));
  EXPECT_THAT(
      by_batch_size,
      ::testing::EndsWith(
          " - raise data.batch_size or trainer.accumulate_grad_batches"));
  // A batch sampler of the user's own makes the batches, not batch_size.
  data::DataLoader sampled(
      train_set_,
      data::DataLoaderOptions().batch_sampler(
          std::make_shared<data::BatchSampler>(
              std::make_shared<data::SequentialSampler>(train_set_->size()),
              32,
              false)));
  const std::string by_sampler = verdict(sampled);
  EXPECT_THAT(by_sampler, ::testing::StartsWith("optimizer-bound: "));
  EXPECT_THAT(
      by_sampler,
      ::testing::EndsWith(" - raise trainer.accumulate_grad_batches"));
}

// Takes its time before the first step, in its setup.
class SlowSetUp : public Callback {
 public:
  void setup(Trainer&, Module&) override {
    std::this_thread::sleep_for(kHookSleep);
  }
};

TEST_F(CallbackTest, TheSetUpsPartsSayWhereItsTimeWent) {
  auto train = train_loader();
  Trainer trainer(options().max_epochs(1).num_sanity_val_steps(1));
  trainer.add_callback(std::make_shared<SlowSetUp>());
  const StepProfile& profile =
      trainer.fit(*make_module(0), train, &val_loader_).profile;
  const double sleep = std::chrono::duration<double>(kHookSleep).count();
  EXPECT_GE(profile.setup_parts.at("callbacks"), sleep);
  EXPECT_LT(profile.setup_parts.at("model_summary"), sleep);
  EXPECT_LT(profile.setup_parts.at("strategy"), sleep);
  EXPECT_GT(profile.setup_parts.at("sanity_check"), 0);
  EXPECT_LT(profile.setup_parts.at("sanity_check"), sleep);
  EXPECT_EQ(profile.setup_parts.count("checkpoint"), 0u); // none restored
}

TEST_F(CallbackTest, EveryHundredthStepIsTimedWithTheDeviceSynchronised) {
  auto train = train_loader();
  const FitResult result =
      Trainer(options().max_epochs(8)).fit(*make_module(0), train); // 64 steps
  const StepProfile& profile = result.profile;
  EXPECT_FALSE(profile.asynchronous); // the CPU: host times are exact
  EXPECT_EQ(profile.synced_steps, 1); // the 51st step
  // The first 10 steps (320 samples) are the warm-up.
  EXPECT_EQ(profile.warmup_samples, 320);
  EXPECT_GT(profile.warmup_seconds, 0);
  EXPECT_LT(profile.warmup_seconds, profile.step_seconds());
  EXPECT_GT(profile.synced.at("forward"), 0);
  EXPECT_LT(profile.synced.at("forward"), profile.forward);
}

TEST_F(CallbackTest, LoggersWriteToDiskEveryFlushIntervalAndOnAStop) {
  // Reads metrics.csv from inside the fit, after each step's callbacks.
  class CsvReader : public Callback {
   public:
    explicit CsvReader(std::string path) : path_(std::move(path)) {}
    void on_train_batch_end(
        Trainer& trainer,
        Module&,
        const at::Tensor&,
        const data::Batch&,
        int64_t) override {
      std::ifstream in(path_);
      int64_t lines = 0;
      for (std::string line; std::getline(in, line);) {
        ++lines;
      }
      rows_on_disk.push_back(lines == 0 ? 0 : lines - 1);
      if (trainer.global_step() == 7) {
        std::raise(SIGINT);
      }
    }
    std::vector<int64_t> rows_on_disk;

   private:
    std::string path_;
  };
  auto train = train_loader();
  Trainer trainer(
      options().max_epochs(1).log_every_n_steps(1).flush_logs_every_n_steps(3));
  auto csv = std::make_shared<log::CsvLogger>(trainer.log_dir());
  auto reader = std::make_shared<CsvReader>(csv->path());
  trainer.add_logger(csv).add_callback(reader);
  const FitResult result = trainer.fit(*make_module(0), train);
  EXPECT_TRUE(result.interrupted);
  // Step n's row is logged after its callbacks; rows reach the disk after
  // steps 3 and 6.
  EXPECT_EQ(reader->rows_on_disk, (std::vector<int64_t>{0, 0, 0, 3, 3, 3, 6}));
  // The stop wrote the rest: steps 1 to 7.
  std::ifstream in(csv->path());
  int64_t lines = 0;
  for (std::string line; std::getline(in, line);) {
    ++lines;
  }
  EXPECT_EQ(lines, 1 + 7);
}

TEST_F(CallbackTest, CheckpointsRunAfterTheOtherCallbacksWhateverTheOrder) {
  // The command line adds ModelCheckpoint before EarlyStopping; the file
  // written after a validation must still hold EarlyStopping's count after
  // that validation, or a resumed run stops one check late.
  auto train = train_loader();
  auto add_callbacks = [](Trainer& trainer) {
    trainer.add_callback(std::make_shared<ModelCheckpoint>(
        ModelCheckpointOptions().save_last(true)));
    auto stopper = std::make_shared<EarlyStopping>(
        EarlyStoppingOptions("score").patience(2).verbose(false));
    trainer.add_callback(stopper);
    return stopper;
  };
  ScriptedClassifier first(std::move(*make_module(0)), {0.5, 0.6});
  Trainer trainer(options().max_epochs(2));
  add_callbacks(trainer);
  const FitResult cut = trainer.fit(first, train, &val_loader_);
  EXPECT_EQ(
      dynamic_cast<ModelCheckpoint*>(trainer.callbacks().back().get()) !=
          nullptr,
      true);
  CheckpointState saved;
  auto module = make_module(0);
  load_checkpoint(cut.checkpoint_path, *module, &saved);
  const auto states = nlohmann::json::parse(saved.callbacks);
  EXPECT_EQ(
      states.at("EarlyStopping{monitor=score,mode=min}").at("wait_count"), 1);

  ScriptedClassifier second(std::move(*make_module(0)), {0.7});
  Trainer again(options().max_epochs(10));
  auto stopper = add_callbacks(again);
  const FitResult rest =
      again.fit(second, train, &val_loader_, cut.checkpoint_path);
  EXPECT_EQ(rest.epochs, 3);
  EXPECT_EQ(stopper->stopped_epoch(), 2);
}

TEST_F(CallbackTest, ACheckpointListsItselfAmongTheKeptOnes) {
  ScriptedClassifier module(std::move(*make_module(0)), {0.5, 0.2});
  auto train = train_loader();
  Trainer trainer(options().max_epochs(2));
  trainer.add_callback(std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions().monitor("score").save_top_k(1).save_last(true)));
  trainer.fit(module, train, &val_loader_);
  const std::string dir = trainer.log_dir() + "/checkpoints";
  const std::string best = dir + "/epoch=1-step=16.ckpt";
  CheckpointState saved;
  auto fresh = make_module(0);
  load_checkpoint(best, *fresh, &saved);
  const auto state = nlohmann::json::parse(saved.callbacks)
                         .at("ModelCheckpoint{monitor=score,mode=min,every_n_"
                             "epochs=1,every_n_train_steps=0}");
  EXPECT_EQ(state.at("best_model_path"), best);
  EXPECT_EQ(state.at("last_model_path"), dir + "/last.ckpt");
  EXPECT_EQ(state.at("best_k_models").size(), 1u);
  EXPECT_DOUBLE_EQ(state.at("best_k_models").at(best).get<double>(), 0.2);
}

TEST_F(CallbackTest, ModelCheckpointEveryNEpochsSavesOnlyThoseEpochs) {
  auto train = train_loader();
  Trainer trainer(options().max_epochs(5));
  trainer.add_callback(std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions().every_n_epochs(2).save_top_k(-1)));
  trainer.fit(*make_module(0), train, &val_loader_);
  EXPECT_EQ(
      files(trainer.log_dir() + "/checkpoints"),
      (std::set<std::string>{"epoch=1-step=16.ckpt", "epoch=3-step=32.ckpt"}));
}

// Counts training batches; its count is its checkpointed state.
class BatchCounter : public Callback {
 public:
  void on_train_batch_end(
      Trainer&,
      Module&,
      const at::Tensor&,
      const data::Batch&,
      int64_t) override {
    ++batches;
  }
  nlohmann::json state_dict() const override {
    return {{"batches", batches}};
  }
  void load_state_dict(const nlohmann::json& state) override {
    batches = state.at("batches").get<int64_t>();
  }
  int64_t batches = 0;
};

TEST_F(CallbackTest, UserCallbackStateIsSavedAndRestored) {
  auto counter = std::make_shared<BatchCounter>();
  auto train = train_loader();
  Trainer trainer(options().max_epochs(2));
  trainer.add_callback(counter);
  const FitResult cut = trainer.fit(*make_module(0), train);
  EXPECT_EQ(counter->batches, 16);

  CheckpointState state;
  auto module = make_module(0);
  load_checkpoint(cut.checkpoint_path, *module, &state);
  const auto json = nlohmann::json::parse(state.callbacks);
  EXPECT_EQ(json.at(counter->state_key()).at("batches"), 16);

  auto resumed = std::make_shared<BatchCounter>();
  Trainer again(options().max_epochs(3));
  again.add_callback(resumed);
  again.fit(*make_module(0), train, nullptr, cut.checkpoint_path);
  EXPECT_EQ(resumed->batches, 24);
}

TEST_F(CallbackTest, CallbacksWithTheSameStateKeyAreRejected) {
  auto train = train_loader();
  Trainer trainer(options().max_epochs(1));
  trainer.add_callback(std::make_shared<BatchCounter>())
      .add_callback(std::make_shared<BatchCounter>());
  EXPECT_THROWS_WITH(
      ConfigError,
      trainer.fit(*make_module(0), train),
      "two callbacks share the state key");
}

TEST_F(CallbackTest, TimerCountsTimeFromEarlierRunsOfAResumedFit) {
  auto timer = std::make_shared<Timer>(5.0, "step", /*verbose=*/false);
  timer->load_state_dict({{"time_elapsed", {{"train", 4.9999}}}});
  EXPECT_NEAR(timer->time_elapsed(), 4.9999, 1e-9);
  auto train = train_loader();
  Trainer trainer(options().max_epochs(3));
  trainer.add_callback(timer);
  // As if restored from a checkpoint: 4.9999 s of 5 were spent by earlier
  // runs, so the first step crosses the limit.
  const FitResult result = trainer.fit(*make_module(0), train);
  EXPECT_EQ(result.steps, 1);
  EXPECT_GE(timer->time_elapsed(), 5.0);
  EXPECT_THROWS_WITH(ConfigError, Timer(0), "must be positive seconds");
  EXPECT_THROWS_WITH(
      ConfigError, Timer(1, "batch"), "expected step or epoch, got 'batch'");
}

// Sleeps after every training batch, so that fits take measurable time.
class SlowBatches : public Callback {
 public:
  explicit SlowBatches(double seconds) : seconds_(seconds) {}
  void on_train_batch_end(
      Trainer&,
      Module&,
      const at::Tensor&,
      const data::Batch&,
      int64_t) override {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds_));
  }

 private:
  double seconds_;
};

TEST_F(CallbackTest, TimerTimeComesBackFromTheCheckpointOfAResumedFit) {
  auto train = train_loader();
  auto first = std::make_shared<Timer>(100.0, "step", /*verbose=*/false);
  Trainer trainer(options().max_epochs(1));
  trainer.add_callback(first).add_callback(std::make_shared<SlowBatches>(0.05));
  const FitResult cut = trainer.fit(*make_module(0), train);
  ASSERT_GE(first->time_elapsed(), 8 * 0.05);

  // Reads the resumed Timer where the new run's training starts.
  class ElapsedAtStart : public Callback {
   public:
    explicit ElapsedAtStart(std::shared_ptr<Timer> timer)
        : timer_(std::move(timer)) {}
    void on_train_epoch_start(Trainer&, Module&) override {
      elapsed = timer_->time_elapsed();
    }
    double elapsed = -1;

   private:
    std::shared_ptr<Timer> timer_;
  };
  auto second = std::make_shared<Timer>(100.0, "step", /*verbose=*/false);
  auto probe = std::make_shared<ElapsedAtStart>(second);
  Trainer again(options().max_epochs(2));
  again.add_callback(second).add_callback(probe);
  again.fit(*make_module(0), train, nullptr, cut.checkpoint_path);
  EXPECT_GE(probe->elapsed, 8 * 0.05);
  EXPECT_LE(probe->elapsed, first->time_elapsed() + 1.0);
}

TEST_F(CallbackTest, AnEpochTimerLetsTheEpochFinish) {
  auto train = train_loader(); // 8 batches
  // The first batch's sleep runs before the Timer looks: the limit is
  // crossed at its first check.
  auto timer = std::make_shared<Timer>(0.01, "epoch", /*verbose=*/false);
  Trainer trainer(options().max_epochs(3));
  trainer.add_callback(std::make_shared<SlowBatches>(0.02)).add_callback(timer);
  EXPECT_EQ(trainer.fit(*make_module(0), train).steps, 8);
  auto per_step = std::make_shared<Timer>(0.01, "step", /*verbose=*/false);
  Trainer stepwise(options().max_epochs(3));
  stepwise.add_callback(std::make_shared<SlowBatches>(0.02))
      .add_callback(per_step);
  EXPECT_EQ(stepwise.fit(*make_module(0), train).steps, 1);
}

TEST_F(CallbackTest, ValCheckIntervalValidatesWithinTheEpoch) {
  auto count_validations = [&](TrainerOptions options) {
    auto recorder = std::make_shared<RecordingCallback>();
    auto train = train_loader();
    Trainer trainer(options.max_epochs(1).enable_checkpointing(false));
    trainer.add_callback(recorder);
    trainer.fit(*make_module(0), train, &val_loader_);
    return std::count(
        recorder->calls.begin(), recorder->calls.end(), "val_start");
  };
  // 8 batches: a quarter is 2 batches, so after 2, 4, 6 and 8.
  EXPECT_EQ(count_validations(options().val_check_interval(0.25)), 4);
  EXPECT_EQ(count_validations(options().val_check_interval(3)), 3);
  // A fraction rounds to whole optimizer steps: 0.25 * 8 = 2 -> 3 batches.
  EXPECT_EQ(
      count_validations(
          options().val_check_interval(0.25).accumulate_grad_batches(3)),
      3);
  auto train = train_loader();
  EXPECT_THROWS_WITH(
      ConfigError,
      Trainer(options().val_check_interval(9))
          .fit(*make_module(0), train, &val_loader_),
      "trainer.val_check_interval (9) must be at most the number of training "
      "batches per epoch (8)");
  EXPECT_THROWS_WITH(
      ConfigError,
      Trainer(options().val_check_interval(3).accumulate_grad_batches(2))
          .fit(*make_module(0), train, &val_loader_),
      "must be a multiple of trainer.accumulate_grad_batches (2)");
  EXPECT_THROWS_WITH(
      ConfigError,
      Trainer(options().val_check_interval(2.5)),
      "trainer.val_check_interval: expected a fraction in (0, 1] or a whole "
      "number of batches, got 2.5");
}

// Records the targets of every training batch and how evaluation ran.
class ObservingClassifier : public ImageClassifier {
 public:
  explicit ObservingClassifier(ImageClassifier&& base)
      : ImageClassifier(std::move(base)) {}
  at::Tensor training_step(
      const data::Batch& batch,
      int64_t batch_idx,
      MetricCollection& metrics) override {
    targets.push_back(batch.target.clone());
    // With one channel both layouts count as contiguous; the channel
    // stride tells them apart.
    channels_last_input = batch.input.stride(1) == 1;
    return ImageClassifier::training_step(batch, batch_idx, metrics);
  }
  void validation_step(
      const data::Batch& batch,
      int64_t batch_idx,
      MetricCollection& metrics) override {
    ++val_batches;
    inference_mode = c10::InferenceMode::is_enabled();
    grad_mode = at::GradMode::is_enabled();
    ImageClassifier::validation_step(batch, batch_idx, metrics);
  }
  std::vector<at::Tensor> targets;
  int64_t val_batches = 0;
  bool inference_mode = false;
  bool grad_mode = true;
  bool channels_last_input = false;
};

TEST_F(CallbackTest, OverfitBatchesRepeatsTheSameBatchesEveryEpoch) {
  ObservingClassifier module(std::move(*make_module(0)));
  auto train = train_loader();
  Trainer(options().max_epochs(3).overfit_batches(2))
      .fit(module, train, &val_loader_);
  ASSERT_EQ(module.targets.size(), 6u);
  for (size_t i = 2; i < 6; ++i) {
    EXPECT_TRUE(module.targets[i].equal(module.targets[i % 2])) << i;
  }
  EXPECT_FALSE(module.targets[0].equal(module.targets[1]));
  EXPECT_EQ(module.val_batches, 3 * 2); // two validation batches per epoch
}

TEST_F(CallbackTest, InferenceModeFlagChoosesHowEvaluationTurnsGradsOff) {
  ObservingClassifier inference(std::move(*make_module(0)));
  Trainer(options()).validate(inference, val_loader_);
  EXPECT_TRUE(inference.inference_mode);
  EXPECT_FALSE(inference.grad_mode);
  ObservingClassifier no_grad(std::move(*make_module(0)));
  Trainer(options().inference_mode(false)).validate(no_grad, val_loader_);
  EXPECT_FALSE(no_grad.inference_mode);
  EXPECT_FALSE(no_grad.grad_mode);
}

TEST_F(CallbackTest, ChannelsLastConvertsWeightsAndInputsAndTrainsTheSame) {
  // Three channels: with one, both layouts are the same strides.
  auto [images, labels] = hotloop::testing::quadrant_images(128, kSize, 1);
  data::ImageTransformOptions transform;
  transform.mean = {0.3, 0.3, 0.3};
  transform.std = {0.3, 0.3, 0.3};
  auto rgb = std::make_shared<data::ImageClassificationDataset>(
      images.unsqueeze(1).repeat({1, 3, 1, 1}), labels, transform);
  data::DataLoader train(rgb, data::DataLoaderOptions(32).shuffle(true));
  data::DataLoader val(rgb, data::DataLoaderOptions(64));
  auto make_rgb = [] {
    seed_everything(0);
    models::FashionCnnOptions model = small_model();
    model.in_channels = 3;
    optim::OptimizerOptions sgd;
    sgd.name = "sgd";
    sgd.lr = 0.05;
    optim::SchedulerOptions none;
    none.name = "none";
    return ObservingClassifier(ImageClassifier(
        torch::nn::AnyModule(models::FashionCnn(model)), sgd, none));
  };
  ObservingClassifier standard = make_rgb();
  const FitResult a =
      Trainer(options().max_epochs(1).enable_checkpointing(false))
          .fit(standard, train, &val);
  ObservingClassifier last = make_rgb();
  const FitResult b =
      Trainer(options().max_epochs(1).enable_checkpointing(false).channels_last(
                  true))
          .fit(last, train, &val);
  EXPECT_FALSE(standard.channels_last_input);
  EXPECT_TRUE(last.channels_last_input);
  int64_t converted = 0;
  for (const auto& parameter : last.parameters()) {
    if (parameter.dim() == 4) {
      EXPECT_TRUE(parameter.is_contiguous(at::MemoryFormat::ChannelsLast));
      EXPECT_FALSE(parameter.is_contiguous());
      ++converted;
    }
  }
  EXPECT_GT(converted, 0);
  // Same math in another memory order: equal up to summation order.
  EXPECT_NEAR(a.metrics.at("val_loss"), b.metrics.at("val_loss"), 1e-4);
  EXPECT_NEAR(a.metrics.at("train_loss"), b.metrics.at("train_loss"), 1e-4);
}

TEST_F(CallbackTest, ChannelsLastGivesAOneChannelConvItsChannelsLastStrides) {
  // A [C, 1, k, k] weight is contiguous in both formats; only its strides
  // say which one it is, and cuDNN reads them: PyTorch's
  // Module.to(memory_format=channels_last) gives it the channel stride 1.
  auto module = make_module(0);
  auto train = train_loader();
  Trainer(options().max_epochs(1).limit_train_batches(1).channels_last(true))
      .fit(*module, train);
  int64_t one_channel = 0;
  for (const auto& parameter : module->parameters()) {
    if (parameter.dim() == 4) {
      EXPECT_EQ(
          parameter.suggest_memory_format(), at::MemoryFormat::ChannelsLast)
          << parameter.sizes() << " strides " << parameter.strides();
      EXPECT_EQ(parameter.stride(1), 1) << parameter.sizes();
      one_channel += parameter.size(1) == 1;
    }
  }
  EXPECT_EQ(one_channel, 1); // the grayscale model's only conv
}

TEST_F(CallbackTest, PredictReturnsClassProbabilitiesPerBatch) {
  auto module = make_module(0);
  Trainer trainer(options().limit_predict_batches(1));
  const auto outputs = trainer.predict(*module, val_loader_);
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0].sizes(), (at::IntArrayRef{40, 4}));
  EXPECT_TRUE(outputs[0].sum(1).allclose(at::ones({40})));
  EXPECT_EQ(Trainer(options()).predict(*module, val_loader_).size(), 2u);

  class NoPredict : public ImageClassifier {
   public:
    explicit NoPredict(ImageClassifier&& base)
        : ImageClassifier(std::move(base)) {}
    at::Tensor predict_step(const data::Batch& batch, int64_t i) override {
      return Module::predict_step(batch, i);
    }
  };
  NoPredict none(std::move(*make_module(0)));
  EXPECT_THROWS_WITH(
      Error,
      Trainer(options()).predict(none, val_loader_),
      "needs the Module to override predict_step");
}

TEST_F(CallbackTest, ClassifierLogsTopKAccuracy) {
  auto module = make_module(0, /*top_k=*/2);
  const auto metrics = Trainer(options()).validate(*module, val_loader_);
  ASSERT_TRUE(metrics.count("val_acc_top2"));
  EXPECT_GE(metrics.at("val_acc_top2"), metrics.at("val_acc"));
  EXPECT_LE(metrics.at("val_acc_top2"), 1.0);
  EXPECT_THROWS_WITH(
      ConfigError, make_module(0, 0), "model.top_k must be >= 1");
}

TEST_F(CallbackTest, FastDevRunSkipsCheckpointCallbacksAndLoggers) {
  auto logger = std::make_shared<RecordingLogger>();
  auto train = train_loader();
  Trainer trainer(options().fast_dev_run(1));
  trainer.add_logger(logger).add_callback(std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions().dirpath(dir_.file("ckpt"))));
  trainer.fit(*make_module(0), train, &val_loader_);
  EXPECT_TRUE(logger->records.empty());
  EXPECT_TRUE(fs::is_empty(dir_.path()));
}

// A second process of a data-parallel run, as the Trainer sees it: records
// the calls the Trainer makes through the seam and writes no files. Its
// partner saw the same validation batches, so the reduced sums are twice
// its own and the means unchanged.
class RankOneStrategy : public Strategy {
 public:
  void setup(Module& module) override {
    calls += "setup ";
    module_ = &module;
  }
  void before_backward(const at::Tensor& loss, bool sync) override {
    EXPECT_TRUE(loss.requires_grad());
    calls += sync ? "B " : "b ";
  }
  void wait_for_gradients() override {
    calls += "W ";
    // Every gradient of the step exists by now.
    for (const at::Tensor& parameter : module_->parameters()) {
      EXPECT_TRUE(parameter.grad().defined());
    }
  }
  void all_reduce(at::Tensor& values, Reduction op) override {
    // Before the first step the processes compare their data and orders
    // (the maxima of the values and of their negatives); then validation
    // sums.
    ops += op == Reduction::kMax ? "max " : "sum ";
    if (op == Reduction::kSum) {
      values.mul_(2);
    }
  }
  bool any(bool flag) override {
    ++decisions;
    return flag;
  }
  void barrier() override {
    calls += "barrier ";
  }
  void teardown() override {
    calls += "teardown";
  }
  bool is_global_zero() const override {
    return false;
  }
  int64_t rank() const override {
    return 1;
  }
  int64_t world_size() const override {
    return 2;
  }
  std::string calls;
  std::string ops;
  int64_t decisions = 0;

 private:
  Module* module_ = nullptr;
};

TEST_F(CallbackTest, TheStrategySeesEveryBackwardAndDecidesWhoWrites) {
  auto strategy = std::make_shared<RankOneStrategy>();
  auto logger = std::make_shared<RecordingLogger>();
  // Real loggers too, made outside the run folder as a user would: the
  // TensorBoard one is also a callback (histograms, the input grid).
  hotloop::testing::TempDir logs;
  auto csv = std::make_shared<log::CsvLogger>(logs.file("csv"));
  log::TensorBoardLoggerOptions everything;
  everything.histogram_every_n_epochs = 1;
  auto tensorboard =
      std::make_shared<log::TensorBoardLogger>(logs.file("tb"), everything);
  auto module = make_module(0);
  auto train = train_loader();
  Trainer trainer(
      options().max_epochs(1).accumulate_grad_batches(2).num_sanity_val_steps(
          1));
  trainer.set_strategy(strategy).add_logger(logger).add_logger(csv).add_logger(
      tensorboard);
  trainer.add_callback(tensorboard);
  trainer.set_hyperparams({{"optimizer.lr", "0.01"}});
  const FitResult result = trainer.fit(*module, train, &val_loader_);
  // Rank 1's share: 4 of the 8 batches, two per step; only each step's
  // second backward syncs, and the step waits for its gradients once.
  EXPECT_EQ(result.steps, 2);
  EXPECT_EQ(result.world_size, 2);
  EXPECT_EQ(strategy->calls, "setup b B W b B W barrier teardown");
  // The data compared, then the training and the validation order, the
  // largest validation share (for a fractional limit), then the sanity
  // check's and the epoch's validation metrics (their means and confusion
  // counts): each whether any process failed in it, a check that every
  // process logged the same, then one collective.
  EXPECT_EQ(strategy->ops, "max max max max max max sum max max sum ");
  // Its partner's sums were its own (doubled), so the means are those of
  // rank 1's share of the validation split.
  auto share = data::shard(val_loader_, 2, 1, /*training=*/false);
  Trainer alone(options().max_epochs(1).default_root_dir(""));
  EXPECT_DOUBLE_EQ(
      result.metrics.at("val_loss"),
      alone.validate(*module, *share).at("val_loss"));
  // Whether any process validates; whether a loss is finite, for each of
  // the 4 micro-batches; a stop signal and should_stop after every step
  // and at the epoch's end.
  EXPECT_EQ(strategy->decisions, 1 + 4 + 2 * 2 + 2);
  EXPECT_TRUE(trainer.log_dir().empty());
  EXPECT_TRUE(
      result.checkpoint_path.empty() || !fs::exists(result.checkpoint_path));
  EXPECT_TRUE(fs::is_empty(dir_.path()));
  EXPECT_TRUE(logger->records.empty());
  EXPECT_TRUE(logger->hyperparams.empty());
  EXPECT_TRUE(logger->statuses.empty());
  csv.reset();
  EXPECT_FALSE(fs::exists(logs.file("csv/metrics.csv")));
  EXPECT_FALSE(fs::exists(logs.file("csv/hparams.yaml")));
  // The event file holds its version record and nothing else: no scalars,
  // histograms, images or hparams (their tags are stored as plain bytes).
  tensorboard->flush();
  std::ifstream in(tensorboard->writer().path(), std::ios::binary);
  const std::string events(
      (std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(events, HasSubstr("brain.Event:2"));
  for (const char* tag :
       {"train_loss",
        "val_acc",
        "weights/",
        "gradients/",
        "input_samples",
        "_hparams_"}) {
    EXPECT_THAT(events, ::testing::Not(HasSubstr(tag))) << tag;
  }
}

} // namespace
} // namespace hotloop::train
