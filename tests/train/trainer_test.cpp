#include "hotloop/train/trainer.h"
#include "hotloop/core/compat.h"
#include "hotloop/core/error.h"
#include "hotloop/data/image_dataset.h"
#include "hotloop/data/tensor_dataset.h"
#include "hotloop/log/tensorboard_logger.h"
#include "hotloop/models/fashion_cnn.h"
#include "hotloop/models/mlp.h"
#include "hotloop/train/classifier.h"
#include "hotloop/train/grad_scaler.h"
#include "test_util.h"
#include "train/trainer_fixture.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/anomaly_mode.h>
#include <torch/nn/modules/linear.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

namespace hotloop::train {
namespace {

namespace fs = std::filesystem;
using ::hotloop::testing::TempDir;
using ::testing::HasSubstr;

TEST_F(TrainerTest, FitLearnsAndWritesTheRunFolder) {
  auto module = make_module(0);
  auto train = train_loader(1);
  std::ostringstream log;
  Trainer trainer(options().max_epochs(3).enable_progress_bar(true), log);
  const FitResult result = trainer.fit(*module, train, &val_loader_);
  EXPECT_EQ(result.epochs, 3);
  EXPECT_EQ(result.steps, 24);
  EXPECT_GE(result.metrics.at("val_acc"), 0.95);
  EXPECT_LT(result.metrics.at("val_loss"), 0.5);
  EXPECT_GT(result.train_samples_per_s, 0);
  EXPECT_THAT(log.str(), HasSubstr("epoch 3/3  train_loss "));

  const fs::path run = fs::path(dir_.path()) / "t" / "version_0";
  EXPECT_EQ(trainer.log_dir(), run.string());
  EXPECT_EQ(
      result.checkpoint_path, (run / "checkpoints" / "last.ckpt").string());
  EXPECT_TRUE(fs::is_regular_file(result.checkpoint_path));
  std::ifstream in(run / "summary.json");
  const auto summary = nlohmann::json::parse(in);
  EXPECT_EQ(summary.at("epochs"), 3);
  EXPECT_EQ(summary.at("steps"), 24);
  EXPECT_DOUBLE_EQ(
      summary.at("val_acc").get<double>(), result.metrics.at("val_acc"));
  for (const char* key :
       {"val_loss", "train_loss", "train_samples_per_s", "wall_s"}) {
    EXPECT_TRUE(summary.contains(key)) << key;
  }

  Trainer second(options().max_epochs(1));
  auto module2 = make_module(0);
  second.fit(*module2, train, &val_loader_);
  EXPECT_EQ(
      second.log_dir(), (fs::path(dir_.path()) / "t" / "version_1").string());
}

TEST_F(TrainerTest, FitsValidatesAndPredictsOnAStreamAsOnTheSameSamples) {
  // No shuffle: the stream's order is the index order.
  data::DataLoader by_index(train_set_, data::DataLoaderOptions(32));
  auto expected_module = make_module(0);
  Trainer expected_trainer(options().max_epochs(2));
  const FitResult expected =
      expected_trainer.fit(*expected_module, by_index, &val_loader_);

  data::DataLoader stream(
      std::make_shared<StreamOf>(train_set_, /*sized=*/true),
      data::DataLoaderOptions(32));
  data::DataLoader val_stream(
      std::make_shared<StreamOf>(val_set_, /*sized=*/false),
      data::DataLoaderOptions(40));
  auto module = make_module(0);
  std::ostringstream log;
  Trainer trainer(options().max_epochs(2).enable_progress_bar(true), log);
  const FitResult result = trainer.fit(*module, stream, &val_stream);
  EXPECT_THAT(log.str(), HasSubstr("fit: 256 training samples, 8 batches"));
  EXPECT_EQ(result.steps, expected.steps);
  EXPECT_EQ(result.metrics, expected.metrics);
  const auto a = expected_module->parameters();
  const auto b = module->parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(a[i].equal(b[i])) << i;
  }

  // A stream of unknown length: evaluation reads it to its end, a fit
  // needs the batches of an epoch as a count.
  EXPECT_EQ(
      trainer.validate(*module, val_stream),
      expected_trainer.validate(*expected_module, val_loader_));
  const std::vector<at::Tensor> predicted =
      trainer.predict(*module, val_stream);
  const std::vector<at::Tensor> predicted_by_index =
      trainer.predict(*module, val_loader_);
  ASSERT_EQ(predicted.size(), 2u);
  ASSERT_EQ(predicted_by_index.size(), 2u);
  EXPECT_TRUE(predicted[0].equal(predicted_by_index[0]));
  EXPECT_TRUE(predicted[1].equal(predicted_by_index[1]));
  data::DataLoader unsized(
      std::make_shared<StreamOf>(train_set_, /*sized=*/false),
      data::DataLoaderOptions(32).num_workers(2));
  EXPECT_THROWS_WITH(
      ConfigError,
      Trainer(options().max_epochs(1)).fit(*make_module(0), unsized),
      "trainer.limit_train_batches: the training loader's IterableDataset "
      "does not know its size");
  EXPECT_THROWS_WITH(
      ConfigError,
      Trainer(options().max_epochs(1).limit_train_batches(0.5))
          .fit(*make_module(0), unsized),
      "trainer.limit_train_batches=0.5 is a fraction of a loader whose "
      "IterableDataset does not know its size");
  const FitResult limited =
      Trainer(options().max_epochs(1).limit_train_batches(3))
          .fit(*make_module(0), unsized);
  EXPECT_EQ(limited.steps, 3);
}

TEST_F(TrainerTest, AStreamShorterThanTheEpochsCountEndsTheEpochWithAStep) {
  // 8 batches a stream (two workers), accumulated 3 at a time: steps after
  // batches 3, 6 and 8 of each epoch, whatever limit the epoch has - as on
  // the same samples by index.
  const TrainerOptions accumulate =
      options().max_epochs(2).accumulate_grad_batches(3).limit_val_batches(0);
  data::DataLoader by_index(train_set_, data::DataLoaderOptions(32));
  auto expected_module = make_module(0);
  const FitResult expected =
      Trainer(accumulate).fit(*expected_module, by_index);
  ASSERT_EQ(expected.steps, 6);

  // The stream's batches in the index order: worker w reads samples w,
  // w + 2, ..., so a batch of 32 from each worker in turn is no longer the
  // index order; with one worker it is.
  for (const int64_t workers : {0, 1}) {
    SCOPED_TRACE(workers);
    data::DataLoader unsized(
        std::make_shared<StreamOf>(train_set_, /*sized=*/false),
        data::DataLoaderOptions(32).num_workers(workers));
    auto module = make_module(0);
    Trainer trainer(TrainerOptions(accumulate).limit_train_batches(20));
    const FitResult result = trainer.fit(*module, unsized);
    EXPECT_EQ(result.steps, 6);
    EXPECT_EQ(result.epochs, 2);
    EXPECT_EQ(trainer.progress().epoch, 2);
    EXPECT_EQ(trainer.progress().epoch_batches, 0);
    const auto a = expected_module->parameters();
    const auto b = module->parameters();
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(a[i].equal(b[i])) << i;
    }
  }
}

TEST_F(TrainerTest, AFitAndAValidationRunTheirLoadersEpochsToTheirEnd) {
  // Ended, not left one batch short: a loader's workers stop between
  // epochs, and its position is the next epoch's start.
  auto train = train_loader(/*workers=*/1);
  Trainer trainer(options().max_epochs(2));
  trainer.fit(*make_module(0), train, &val_loader_);
  EXPECT_EQ(train.state_dict().epoch, 2);
  EXPECT_EQ(train.state_dict().batches_consumed, 0);
  EXPECT_EQ(val_loader_.state_dict().epoch, 1);
  EXPECT_EQ(val_loader_.state_dict().batches_consumed, 0);
}

TEST_F(TrainerTest, AnEpochWhoseStreamsGiveNoBatchStopsTheFit) {
  // Streams that end at once (a source run dry) would make every epoch one
  // without a step, and a fit bounded by steps alone would never end.
  data::DataLoader empty(
      std::make_shared<StreamOf>(train_set_, /*sized=*/false, /*end=*/0),
      data::DataLoaderOptions(32));
  Trainer trainer(options().max_epochs(-1).max_steps(5).limit_train_batches(2));
  EXPECT_THAT(
      [&] { trainer.fit(*make_module(0), empty); },
      ::testing::ThrowsMessage<DataError>(
          HasSubstr("epoch 0 of the training loader gave no batch: its "
                    "streams ended at once, so there is nothing to train on")));
}

TEST_F(TrainerTest, AStreamsLastBatchValidatesAtTheEpochsEndNotWithin) {
  // 4 batches a stream, an epoch limit of 8, validation every 2 batches:
  // after batch 2 within the epoch, and after batch 4 at the epoch's end,
  // with the epoch counted (as its checkpoints then record).
  struct Positions : Callback {
    std::vector<std::pair<int64_t, int64_t>> seen; // (epoch, epoch_batches)
    void on_validation_end(Trainer& trainer, Module&) override {
      if (!trainer.sanity_checking()) {
        seen.emplace_back(
            trainer.progress().epoch, trainer.progress().epoch_batches);
      }
    }
  };
  data::DataLoader unsized(
      std::make_shared<StreamOf>(train_set_, /*sized=*/false),
      data::DataLoaderOptions(64));
  auto positions = std::make_shared<Positions>();
  Trainer trainer(
      options().max_epochs(2).limit_train_batches(8).val_check_interval(2));
  trainer.add_callback(positions);
  trainer.fit(*make_module(0), unsized, &val_loader_);
  const std::vector<std::pair<int64_t, int64_t>> expected{
      {0, 2}, {1, 0}, {1, 2}, {2, 0}};
  EXPECT_EQ(positions->seen, expected);
}

at::Tensor make_nan(const at::Tensor& loss) {
  return loss * std::numeric_limits<double>::quiet_NaN();
}

bool all_finite(torch::nn::Module& module) {
  for (const auto& parameter : module.parameters()) {
    if (!at::isfinite(parameter).all().item<bool>()) {
      return false;
    }
  }
  return true;
}

TEST_F(TrainerTest, ANonFiniteLossStopsTheFitNamingTheStepOrSkipsIt) {
  auto train = train_loader(); // 8 batches
  {
    OnStepClassifier module(std::move(*make_module(0)), 5, make_nan);
    Trainer trainer(options().max_epochs(2));
    EXPECT_THAT(
        [&] { trainer.fit(module, train, &val_loader_); },
        ::testing::ThrowsMessage<Error>(::testing::AllOf(
            HasSubstr("training diverged: the loss is nan at step 5 (epoch 1, "
                      "batch 5); the last finite loss was "),
            HasSubstr(" at step 4. Lower optimizer.lr, clip gradients "
                      "(trainer.gradient_clip_val), or train in float32"))));
    EXPECT_TRUE(all_finite(module)); // stopped before the step
  }
  {
    std::ostringstream out;
    OnStepClassifier module(std::move(*make_module(0)), 5, make_nan);
    Trainer trainer(
        options().max_epochs(1).on_nonfinite_loss("skip_step").enable_progress_bar(true),
        out);
    const FitResult result = trainer.fit(module, train, &val_loader_);
    EXPECT_EQ(result.steps, 7); // 8 batches, one step skipped
    EXPECT_TRUE(std::isfinite(result.metrics.at("train_loss")));
    EXPECT_TRUE(all_finite(module));
    EXPECT_THAT(
        out.str(),
        HasSubstr("step 5 skipped: the loss is nan "
                  "(trainer.on_nonfinite_loss=skip_step)"));
  }
  {
    // ignore trains on; the NaN weights then reach no histogram error.
    OnStepClassifier module(std::move(*make_module(0)), 5, make_nan);
    Trainer trainer(options().max_epochs(1).on_nonfinite_loss("ignore"));
    log::TensorBoardLoggerOptions histograms;
    histograms.histogram_every_n_epochs = 1;
    auto tensorboard = std::make_shared<log::TensorBoardLogger>(
        (fs::path(dir_.path()) / "tb").string(), histograms);
    trainer.add_logger(tensorboard).add_callback(tensorboard);
    const FitResult result = trainer.fit(module, train, &val_loader_);
    EXPECT_EQ(result.steps, 8);
    EXPECT_FALSE(all_finite(module));
  }
  EXPECT_THAT(
      [&] { Trainer(options().on_nonfinite_loss("skip")); },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr(
          "trainer.on_nonfinite_loss: expected stop, skip_step or ignore, got "
          "'skip'")));
}

// Whether cuDNN's benchmark mode was on in each training and evaluation
// step, with the batch's size.
class BenchmarkRecorder : public ImageClassifier {
 public:
  using Seen = std::vector<std::pair<int64_t, bool>>;
  explicit BenchmarkRecorder(ImageClassifier&& base)
      : ImageClassifier(std::move(base)) {}
  at::Tensor training_step(
      const data::Batch& batch,
      int64_t batch_idx,
      MetricCollection& metrics) override {
    trained.emplace_back(batch.size(), at::globalContext().benchmarkCuDNN());
    return ImageClassifier::training_step(batch, batch_idx, metrics);
  }
  void validation_step(
      const data::Batch& batch,
      int64_t batch_idx,
      MetricCollection& metrics) override {
    validated.emplace_back(
        batch.size(), at::globalContext().benchmarkCuDNN());
    ImageClassifier::validation_step(batch, batch_idx, metrics);
  }
  Seen trained;
  Seen validated;
};

TEST_F(TrainerTest, CudnnBenchmarksTheLoadersBatchShapeButNotALastSmallerOne) {
  using Seen = BenchmarkRecorder::Seen;
  // 40 samples in batches of 16 and 20 in batches of 8: each epoch ends with
  // a shape met once, which cuDNN's benchmark would time every algorithm
  // of every convolution for.
  data::DataLoader train(quadrants(40, 1), data::DataLoaderOptions(16));
  data::DataLoader val(quadrants(20, 2), data::DataLoaderOptions(8));
  {
    BenchmarkRecorder module(std::move(*make_module(0)));
    Trainer trainer(options().max_epochs(1).num_sanity_val_steps(1));
    trainer.fit(module, train, &val);
    EXPECT_EQ(module.trained, (Seen{{16, true}, {16, true}, {8, false}}));
    // The sanity check's batch, then the epoch's validation.
    EXPECT_EQ(
        module.validated,
        (Seen{{8, true}, {8, true}, {8, true}, {4, false}}));
    EXPECT_TRUE(at::globalContext().benchmarkCuDNN()); // back on after
  }
  {
    // drop_last leaves no short batch; trainer.benchmark=false none tuned.
    data::DataLoader whole(
        quadrants(40, 1), data::DataLoaderOptions(16).drop_last(true));
    BenchmarkRecorder module(std::move(*make_module(0)));
    Trainer(options().max_epochs(1).num_sanity_val_steps(0))
        .fit(module, whole, &val);
    EXPECT_EQ(module.trained, (Seen{{16, true}, {16, true}}));
    BenchmarkRecorder off(std::move(*make_module(0)));
    Trainer(options().max_epochs(1).benchmark(false).num_sanity_val_steps(0))
        .fit(off, train, &val);
    EXPECT_EQ(off.trained, (Seen{{16, false}, {16, false}, {8, false}}));
    EXPECT_EQ(off.validated, (Seen{{8, false}, {8, false}, {4, false}}));
  }
}

// Lightning's logger=True: a library fit's run folder can be reported.
struct CountingLogger : log::Logger {
  void log_metrics(const std::map<std::string, double>&, int64_t) override {
    ++records;
  }
  int records = 0;
};

bool has_event_file(const fs::path& run) {
  for (const auto& entry : fs::directory_iterator(run)) {
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) ==
        0) {
      return true;
    }
  }
  return false;
}

TEST_F(TrainerTest, ARunFolderGetsCsvAndTensorBoardLogsUnlessTurnedOff) {
  auto train = train_loader();
  {
    Trainer trainer(options().max_epochs(1).log_every_n_steps(2));
    auto module = make_module(0);
    trainer.fit(*module, train, &val_loader_);
    const fs::path run(trainer.log_dir());
    std::ifstream csv(run / "metrics.csv");
    std::string header;
    std::getline(csv, header);
    EXPECT_THAT(header, HasSubstr("train_loss"));
    EXPECT_TRUE(has_event_file(run));
  }
  {
    Trainer trainer(options().max_epochs(1).logger(false));
    auto module = make_module(0);
    trainer.fit(*module, train, &val_loader_);
    EXPECT_FALSE(fs::exists(fs::path(trainer.log_dir()) / "metrics.csv"));
    EXPECT_FALSE(has_event_file(trainer.log_dir()));
  }
  {
    // A logger of the caller's own replaces the defaults.
    auto own = std::make_shared<CountingLogger>();
    Trainer trainer(options().max_epochs(1).log_every_n_steps(2));
    trainer.add_logger(own);
    auto module = make_module(0);
    trainer.fit(*module, train, &val_loader_);
    EXPECT_GT(own->records, 0);
    EXPECT_FALSE(fs::exists(fs::path(trainer.log_dir()) / "metrics.csv"));
    EXPECT_FALSE(has_event_file(trainer.log_dir()));
  }
}

TEST_F(TrainerTest, ResumingFromACheckpointMatchesAnUninterruptedRunBitForBit) {
  auto straight = make_module(0);
  auto train = train_loader();
  Trainer(options().max_epochs(4)).fit(*straight, train, &val_loader_);

  auto first_half = make_module(0);
  const FitResult half =
      Trainer(options().max_epochs(2)).fit(*first_half, train, &val_loader_);

  auto resumed =
      make_module(99); // other init: everything must come from the checkpoint
  at::manual_seed(12345); // and so must the RNG state
  const FitResult rest =
      Trainer(options().max_epochs(4))
          .fit(*resumed, train, &val_loader_, half.checkpoint_path);
  EXPECT_EQ(rest.epochs, 4);
  EXPECT_EQ(rest.steps, 32);
  const auto a = straight->parameters();
  const auto b = resumed->parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(a[i].equal(b[i])) << "parameter " << i;
  }
  const auto ba = straight->buffers();
  const auto bb = resumed->buffers();
  for (size_t i = 0; i < ba.size(); ++i) {
    EXPECT_TRUE(ba[i].equal(bb[i])) << "buffer " << i;
  }
}

TEST_F(TrainerTest, ValidateFromTheCheckpointReproducesTheFitMetrics) {
  auto module = make_module(0);
  auto train = train_loader();
  const FitResult result =
      Trainer(options().max_epochs(2)).fit(*module, train, &val_loader_);
  auto fresh = make_module(7);
  Trainer evaluator(options().default_root_dir(""));
  const auto metrics =
      evaluator.validate(*fresh, val_loader_, result.checkpoint_path);
  EXPECT_DOUBLE_EQ(metrics.at("val_acc"), result.metrics.at("val_acc"));
  EXPECT_DOUBLE_EQ(metrics.at("val_loss"), result.metrics.at("val_loss"));
  const auto test = evaluator.test(*fresh, val_loader_);
  EXPECT_DOUBLE_EQ(test.at("test_acc"), result.metrics.at("val_acc"));
  EXPECT_TRUE(fresh->is_training());
}

TEST_F(TrainerTest, AnEvaluationCountsItsConfusionInItsOwnPass) {
  // The sanity check's counts are not kept: a fit stopped by Ctrl-C at its
  // second step has validated nothing after it.
  OnStepClassifier stopped(std::move(*make_module(0)), 2, raise_signal(SIGINT));
  auto train = train_loader();
  Trainer unvalidated(options().max_epochs(1));
  ASSERT_TRUE(unvalidated.fit(stopped, train, &val_loader_).interrupted);
  EXPECT_TRUE(unvalidated.callback_counts().empty());

  auto module = make_module(0);

  Trainer trainer(options().max_epochs(1).default_root_dir(""));
  const FitResult result = trainer.fit(*module, train, &val_loader_);
  ASSERT_EQ(trainer.callback_counts().size(), 1u);
  const at::Tensor confusion = trainer.callback_counts().at("val_confusion");
  // The same counts as the trained model's predictions against the labels.
  const at::Tensor predicted =
      at::cat(trainer.predict(*module, val_loader_)).argmax(1);
  const at::Tensor expected =
      at::zeros({4 * 4}, at::kLong)
          .index_put_(
              {val_set_->labels().to(at::kLong) * 4 + predicted},
              at::ones({64}, at::kLong),
              /*accumulate=*/true)
          .view({4, 4});
  EXPECT_TRUE(confusion.equal(expected)) << confusion << expected;
  EXPECT_DOUBLE_EQ(
      confusion.diagonal().sum().item<double>() / 64,
      result.metrics.at("val_acc"));
  // A test pass counts under its own name, in place of the validation's.
  trainer.test(*module, val_loader_);
  ASSERT_EQ(trainer.callback_counts().size(), 1u);
  EXPECT_TRUE(trainer.callback_counts().at("test_confusion").equal(expected));
}

TEST_F(TrainerTest, AClassifierCountsTheConfusionOfAtMostAThousandClasses) {
  const auto set = std::make_shared<data::TensorDataset>(
      at::randn({8, 4}), at::arange(8, at::kLong));
  data::DataLoader loader(set, data::DataLoaderOptions(4));
  Trainer trainer(options().default_root_dir(""));
  for (const int64_t classes : {ImageClassifier::kConfusionClasses,
                                ImageClassifier::kConfusionClasses + 1}) {
    ImageClassifier module(
        torch::nn::AnyModule(torch::nn::Linear(4, classes)), {}, {});
    trainer.validate(module, loader);
    const auto& counts = trainer.callback_counts();
    if (classes <= ImageClassifier::kConfusionClasses) {
      ASSERT_EQ(counts.count("val_confusion"), 1u);
      EXPECT_EQ(
          counts.at("val_confusion").sizes(),
          (std::vector<int64_t>{classes, classes}));
      EXPECT_EQ(counts.at("val_confusion").sum().item<int64_t>(), 8);
    } else {
      EXPECT_TRUE(counts.empty()) << classes << " classes";
    }
  }
}

TEST(ImageClassifier, LabelSmoothingMixesTheTrainingTargetsAndLeavesValLoss) {
  // PyTorch's CrossEntropyLoss(label_smoothing=eps): (1 - eps) times the
  // true class's negative log-probability plus eps times the mean over the
  // classes, averaged over the batch; val_loss stays the plain one.
  torch::manual_seed(0);
  const at::Tensor input = at::randn({6, 4});
  const at::Tensor target = at::tensor({0, 2, 1, 2, 0, 1}, at::kLong);
  torch::nn::Linear linear(4, 3);
  ImageClassifier module(torch::nn::AnyModule(linear), {}, {}, 1, 0.2);
  const data::Batch batch{input, target};
  MetricCollection train;
  const at::Tensor loss = module.training_step(batch, 0, train);
  const at::Tensor logp = at::log_softmax(linear(input), 1).detach();
  const at::Tensor nll = -logp.gather(1, target.unsqueeze(1)).squeeze(1);
  const double smoothed =
      (0.8 * nll - 0.2 * logp.mean(1)).mean().item<double>();
  EXPECT_NEAR(loss.item<double>(), smoothed, 1e-6);
  EXPECT_GT(std::abs(smoothed - nll.mean().item<double>()), 1e-3);
  MetricCollection val;
  module.validation_step(batch, 0, val);
  EXPECT_NEAR(val.compute().at("val_loss"), nll.mean().item<double>(), 1e-6);
  EXPECT_THAT(
      [&] { ImageClassifier(torch::nn::AnyModule(linear), {}, {}, 1, 1.5); },
      ::testing::ThrowsMessage<ConfigError>(
          HasSubstr("model.label_smoothing must be in [0, 1], got 1.5")));
}

TEST(ImageClassifier, ClassWeightsWeighTheTrainingLossAsPyTorchsCrossEntropy) {
  // Logits straight from the input (an identity network).
  const at::Tensor logits =
      at::tensor(
          {1.0, -0.5, 0.25, 0.3, 0.8, -1.2, -0.7, 0.1, 0.9, 2.0, 0.0, -1.0},
          at::kFloat)
          .view({4, 3});
  const data::Batch batch{logits, at::tensor({0, 1, 2, 2}, at::kLong)};
  ClassifierOptions options;
  options.class_weights = {0.5, 2.0, 1.0};
  const auto training_loss = [&](const ClassifierOptions& o) {
    ImageClassifier module(
        torch::nn::AnyModule(torch::nn::Identity()), {}, {}, o);
    MetricCollection metrics;
    return module.training_step(batch, 0, metrics).item<double>();
  };
  // PyTorch 1.13: torch.nn.CrossEntropyLoss(weight=torch.tensor([0.5, 2.0,
  // 1.0]))(logits, target), and with label_smoothing=0.2.
  EXPECT_NEAR(training_loss(options), 1.121170163154602, 1e-6);
  options.label_smoothing = 0.2;
  EXPECT_NEAR(training_loss(options), 1.216047763824463, 1e-6);
  // val_loss stays the plain CrossEntropyLoss()(logits, target).
  ImageClassifier weighted(
      torch::nn::AnyModule(torch::nn::Identity()), {}, {}, options);
  MetricCollection val;
  weighted.validation_step(batch, 0, val);
  EXPECT_NEAR(val.compute().at("val_loss"), 1.1885740756988525, 1e-6);

  options.class_weights = {1.0, 2.0};
  EXPECT_THAT(
      [&] { training_loss(options); },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr(
          "model.class_weights has 2 weights but the network gives logits "
          "[4, 3]: give one weight per class")));
  const auto refused = [&](std::vector<double> weights) {
    ClassifierOptions bad;
    bad.class_weights = std::move(weights);
    return [bad] {
      ImageClassifier(torch::nn::AnyModule(torch::nn::Identity()), {}, {}, bad);
    };
  };
  EXPECT_THAT(
      refused({1.0, -1.0, 1.0}),
      ::testing::ThrowsMessage<ConfigError>(HasSubstr(
          "model.class_weights[1] is -1, expected a finite weight >= 0")));
  EXPECT_THAT(
      refused({std::nan(""), 1.0, 1.0}),
      ::testing::ThrowsMessage<ConfigError>(HasSubstr(
          "model.class_weights[0] is nan, expected a finite weight >= 0")));
  EXPECT_THAT(
      refused({0.0, 0.0, 0.0}),
      ::testing::ThrowsMessage<ConfigError>(
          HasSubstr("model.class_weights are all 0: no sample would count")));
}

TEST_F(TrainerTest, StepLimitsAndAccumulationSetTheStepCount) {
  auto train = train_loader();
  auto module = make_module(0);
  const auto capped =
      Trainer(options().max_epochs(5).max_steps(5)).fit(*module, train);
  EXPECT_EQ(capped.steps, 5);
  EXPECT_EQ(capped.epochs, 0); // 5 of 8 batches: the epoch is not complete
  const auto accumulated =
      Trainer(options().max_epochs(2).accumulate_grad_batches(3))
          .fit(*make_module(0), train);
  EXPECT_EQ(accumulated.steps, 6); // ceil(8 / 3) per epoch
  const auto limited = Trainer(options().max_epochs(2).limit_train_batches(2))
                           .fit(*make_module(0), train);
  EXPECT_EQ(limited.steps, 4);
}

// A classifier whose learning rate follows a cosine over the fit's length.
std::shared_ptr<ImageClassifier> cosine_module(
    uint64_t seed, const std::string& interval) {
  seed_everything(seed);
  optim::OptimizerOptions optimizer;
  optimizer.name = "sgd";
  optimizer.lr = 0.1;
  optim::SchedulerOptions scheduler;
  scheduler.name = "cosine";
  scheduler.interval = interval;
  return std::make_shared<ImageClassifier>(
      torch::nn::AnyModule(models::FashionCnn(small_model())),
      optimizer,
      scheduler);
}

// max_epochs=-1, as in Lightning: no epoch limit; max_steps (or max_time,
// a callback, a signal) ends the fit, and a schedule's length is max_steps.
TEST_F(TrainerTest, MaxEpochsMinusOneTrainsUntilAnotherLimitStops) {
  auto train = train_loader(); // 8 batches an epoch
  std::ostringstream log;
  const FitResult endless =
      Trainer(
          options().max_epochs(-1).max_steps(20).enable_progress_bar(true),
          log)
          .fit(*make_module(0), train);
  EXPECT_EQ(endless.steps, 20);
  EXPECT_EQ(endless.epochs, 2); // and 4 batches of the third
  EXPECT_THAT(log.str(), HasSubstr("epoch 2  "));
  EXPECT_THAT(log.str(), ::testing::Not(HasSubstr("/-1")));

  // The schedule spans max_steps, as with an epoch limit past them.
  auto a = cosine_module(0, "step");
  Trainer(options().max_epochs(-1).max_steps(20)).fit(*a, train);
  auto b = cosine_module(0, "step");
  Trainer(options().max_epochs(3).max_steps(20)).fit(*b, train);
  const auto pa = a->parameters();
  const auto pb = b->parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(pa[i].equal(pb[i])) << i;
  }
  // With no end at all, a schedule that needs the length says what to set.
  EXPECT_THAT(
      [&] { Trainer(options().max_epochs(-1)).fit(*cosine_module(0, "step"), train); },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr(
          "lr_scheduler: cosine needs the run's length, and "
          "trainer.max_epochs=-1 trains without one: give trainer.max_steps "
          "or lr_scheduler.T_max")));
  EXPECT_THAT(
      [&] {
        Trainer(options().max_epochs(-1).max_steps(20))
            .fit(*cosine_module(0, "epoch"), train);
      },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr(
          "lr_scheduler: cosine needs the run's length, and "
          "trainer.max_epochs=-1 trains without one: give trainer.max_epochs "
          "or lr_scheduler.T_max")));
}

TEST_F(TrainerTest, NoRunFolderWithoutARootDir) {
  auto train = train_loader();
  Trainer trainer(options().default_root_dir("").max_epochs(1));
  const auto result = trainer.fit(*make_module(0), train);
  EXPECT_TRUE(result.checkpoint_path.empty());
  EXPECT_TRUE(trainer.log_dir().empty());
  EXPECT_TRUE(fs::is_empty(dir_.path()));
}

TEST(Trainer, InvalidOptionsNameTheOption) {
  EXPECT_THAT(
      [] { Trainer(TrainerOptions().max_epochs(0)); },
      ::testing::ThrowsMessage<ConfigError>(
          HasSubstr("trainer.max_epochs must be positive or -1, got 0")));
  EXPECT_THAT(
      [] { Trainer(TrainerOptions().max_epochs(-2)); },
      ::testing::ThrowsMessage<ConfigError>(
          HasSubstr("trainer.max_epochs must be positive or -1, got -2")));
  EXPECT_THAT(
      [] { Trainer(TrainerOptions().accumulate_grad_batches(0)); },
      ::testing::ThrowsMessage<ConfigError>(
          HasSubstr("trainer.accumulate_grad_batches must be >= 1, got 0")));
  EXPECT_THAT(
      [] { Trainer(TrainerOptions().gradient_clip_val(-1)); },
      ::testing::ThrowsMessage<ConfigError>(
          HasSubstr("trainer.gradient_clip_val must be >= 0, got -1")));
  EXPECT_THAT(
      [] { Trainer(TrainerOptions().benchmark_limit(-1)); },
      ::testing::ThrowsMessage<ConfigError>(
          HasSubstr("trainer.benchmark_limit must be >= 0, got -1")));
  EXPECT_THAT(
      [] { Trainer(TrainerOptions().profiler_skip_steps(-1)); },
      ::testing::ThrowsMessage<ConfigError>(
          HasSubstr("trainer.profiler_skip_steps must be >= 0, got -1")));
  EXPECT_THAT(
      [] { Trainer(TrainerOptions().peak_tflops(-2)); },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr(
          "trainer.peak_tflops must be >= 0 (0: measure the device), got "
          "-2")));
}

} // namespace
} // namespace hotloop::train

namespace hotloop::train {
namespace {

TEST_F(TrainerTest, SigintCheckpointsMidEpochAndAResumeMatchesBitForBit) {
  auto train = train_loader(2);
  auto straight = make_module(0);
  const FitResult straight_result =
      Trainer(options().max_epochs(2)).fit(*straight, train, &val_loader_);

  // Interrupted in the 11th step: epoch 2, batch 3 of 8.
  OnStepClassifier interrupted(
      std::move(*make_module(0)), 11, raise_signal(SIGINT));
  std::ostringstream log;
  const FitResult cut = Trainer(options().max_epochs(2), log)
                            .fit(interrupted, train, &val_loader_);
  EXPECT_TRUE(cut.interrupted);
  EXPECT_EQ(cut.steps, 11);
  EXPECT_EQ(cut.epochs, 1);
  EXPECT_THAT(
      log.str(),
      HasSubstr("interrupted by signal 2 in epoch 2 after batch 3 (step 11)"));
  // The guard is gone: SIGINT has its previous handler again.
  struct sigaction current {};
  sigaction(SIGINT, nullptr, &current);
  EXPECT_EQ(current.sa_handler, SIG_DFL);

  auto resumed = make_module(99);
  std::ostringstream resume_log;
  const FitResult rest =
      Trainer(options().max_epochs(2), resume_log)
          .fit(*resumed, train, &val_loader_, cut.checkpoint_path);
  // The same words as the interrupt's.
  EXPECT_THAT(
      resume_log.str(), HasSubstr("in epoch 2 after batch 3 (step 11)"));
  EXPECT_FALSE(rest.interrupted);
  EXPECT_EQ(rest.steps, 16);
  // The epoch's running means came back too: train_loss is the mean over
  // all of epoch 2's batches, not only those after the resume.
  for (const char* metric : {"train_loss", "val_loss", "val_acc"}) {
    EXPECT_EQ(rest.metrics.at(metric), straight_result.metrics.at(metric))
        << metric;
  }
  const auto a = straight->parameters();
  const auto b = resumed->parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(a[i].equal(b[i])) << "parameter " << i;
  }
}

} // namespace
} // namespace hotloop::train

namespace hotloop::train {
namespace {

// Records the dtype of the logits its training steps computed.
class DtypeRecordingClassifier : public ImageClassifier {
 public:
  explicit DtypeRecordingClassifier(ImageClassifier&& base)
      : ImageClassifier(std::move(base)) {}
  at::Tensor training_step(
      const data::Batch& batch,
      int64_t batch_idx,
      MetricCollection& metrics) override {
    logits_dtype = forward(batch.input).scalar_type();
    return ImageClassifier::training_step(batch, batch_idx, metrics);
  }
  at::ScalarType logits_dtype = at::kFloat;
};

TEST_F(TrainerTest, Bf16MixedRunsTheStepUnderAutocastAndStillLearns) {
  DtypeRecordingClassifier module(std::move(*make_module(0)));
  auto train = train_loader();
  const FitResult result =
      Trainer(options().max_epochs(3).precision("bf16-mixed"))
          .fit(module, train, &val_loader_);
  EXPECT_EQ(module.logits_dtype, at::kBFloat16);
  EXPECT_GE(result.metrics.at("val_acc"), 0.9);
  for (const auto& p : module.parameters()) {
    EXPECT_EQ(p.scalar_type(), at::kFloat); // master weights stay float32
  }
  // Autocast is off again after the fit.
  EXPECT_EQ(
      module.forward(val_set_->get(0, {}).input.unsqueeze(0)).scalar_type(),
      at::kFloat);
}

TEST_F(TrainerTest, Bf16TrueTrainsInBfloat16) {
  DtypeRecordingClassifier module(std::move(*make_module(0)));
  auto train = train_loader();
  const FitResult result =
      Trainer(options().max_epochs(1).precision("bf16-true"))
          .fit(module, train, &val_loader_);
  EXPECT_EQ(module.logits_dtype, at::kBFloat16);
  EXPECT_EQ(module.parameters()[0].scalar_type(), at::kBFloat16);
  EXPECT_TRUE(std::isfinite(result.metrics.at("train_loss")));
}

TEST_F(TrainerTest, SixtyFourTrueTrainsInFloat64) {
  DtypeRecordingClassifier module(std::move(*make_module(0)));
  auto train = train_loader();
  const FitResult result = Trainer(options().max_epochs(1).precision("64-true"))
                               .fit(module, train, &val_loader_);
  EXPECT_EQ(module.logits_dtype, at::kDouble);
  for (const at::Tensor& parameter : module.parameters()) {
    EXPECT_EQ(parameter.scalar_type(), at::kDouble);
  }
  EXPECT_TRUE(std::isfinite(result.metrics.at("train_loss")));
  EXPECT_GT(result.metrics.at("val_acc"), 0.5);
}

TEST_F(TrainerTest, PrecisionErrorsNameTheOption) {
  EXPECT_THROWS_WITH(
      ConfigError,
      Trainer(options().precision("fp8")),
      "trainer.precision: expected one of 32-true, 16-mixed, bf16-mixed, "
      "bf16-true, 64-true, got 'fp8'");
  auto module = make_module(0);
  auto train = train_loader();
  Trainer trainer(options().precision("16-mixed"));
  EXPECT_THROWS_WITH(
      ConfigError,
      trainer.fit(*module, train),
      "trainer.precision=16-mixed needs a CUDA device; use bf16-mixed on CPU");
}

} // namespace
} // namespace hotloop::train

namespace hotloop::train {
namespace {

// Counts its steps, in order, so tests can see what the Trainer ran.
class CountingClassifier : public ImageClassifier {
 public:
  explicit CountingClassifier(ImageClassifier&& base)
      : ImageClassifier(std::move(base)) {}
  at::Tensor training_step(
      const data::Batch& batch,
      int64_t batch_idx,
      MetricCollection& metrics) override {
    calls.push_back('t');
    return ImageClassifier::training_step(batch, batch_idx, metrics);
  }
  void validation_step(
      const data::Batch& batch,
      int64_t batch_idx,
      MetricCollection& metrics) override {
    calls.push_back('v');
    ImageClassifier::validation_step(batch, batch_idx, metrics);
  }
  void test_step(
      const data::Batch& batch,
      int64_t batch_idx,
      MetricCollection& metrics) override {
    calls.push_back('s');
    ImageClassifier::test_step(batch, batch_idx, metrics);
  }
  std::string calls;
};

TEST_F(TrainerTest, SanityValidationRunsBeforeTheFirstTrainingStep) {
  CountingClassifier module(std::move(*make_module(0)));
  auto train = train_loader();
  Trainer(options().max_epochs(1).limit_train_batches(3))
      .fit(module, train, &val_loader_);
  // 2 sanity batches, 3 training batches, then the 2 batches of validation.
  EXPECT_EQ(module.calls, "vvtttvv");
}

TEST_F(TrainerTest, FastDevRunRunsAFewBatchesOnceAndWritesNothing) {
  CountingClassifier module(std::move(*make_module(0)));
  auto train = train_loader();
  Trainer trainer(options().max_epochs(5).fast_dev_run(2));
  const FitResult result = trainer.fit(module, train, &val_loader_);
  EXPECT_EQ(module.calls, "ttvv");
  EXPECT_EQ(result.steps, 2);
  EXPECT_EQ(result.epochs, 1);
  EXPECT_TRUE(result.checkpoint_path.empty());
  EXPECT_TRUE(fs::is_empty(dir_.path()));
}

TEST_F(TrainerTest, MaxTimeStopsAfterTheStepThatCrossesIt) {
  auto train = train_loader();
  const FitResult result = Trainer(options().max_epochs(50).max_time(1e-9))
                               .fit(*make_module(0), train);
  EXPECT_EQ(result.steps, 1);
  EXPECT_EQ(result.epochs, 0);
}

// One SGD step with lr 1 moves each weight by minus its clipped gradient.
at::Tensor update_after_clipping(const std::string& algorithm, double clip) {
  // Plain SGD (no momentum or decay) so the update is the gradient itself.
  optim::OptimizerOptions sgd;
  sgd.name = "sgd";
  sgd.lr = 1.0;
  sgd.momentum = 0.0;
  optim::SchedulerOptions none;
  none.name = "none";
  ImageClassifier plain(
      torch::nn::AnyModule(models::FashionCnn(small_model())), sgd, none);
  std::vector<at::Tensor> before;
  for (const auto& p : plain.parameters()) {
    before.push_back(p.detach().clone());
  }
  auto dataset = quadrants(32, 1);
  data::DataLoader loader(dataset, data::DataLoaderOptions(32));
  Trainer(TrainerOptions()
              .accelerator("cpu")
              .default_root_dir("")
              .enable_progress_bar(false)
              .max_steps(1)
              .gradient_clip_val(clip)
              .gradient_clip_algorithm(algorithm))
      .fit(plain, loader);
  std::vector<at::Tensor> deltas;
  const auto after = plain.parameters();
  for (size_t i = 0; i < after.size(); ++i) {
    deltas.push_back((before[i] - after[i].detach()).reshape({-1}));
  }
  return at::cat(deltas);
}

TEST(TrainerClipping, ValueClampsEachGradientAndNormBoundsTheirNorm) {
  const at::Tensor by_value = update_after_clipping("value", 1e-3);
  // Exact up to float32 rounding of the weights (~0.5) the step changes.
  EXPECT_NEAR(by_value.abs().max().item<double>(), 1e-3, 1e-7);
  const at::Tensor by_norm = update_after_clipping("norm", 1e-2);
  EXPECT_NEAR(by_norm.norm().item<double>(), 1e-2, 1e-6);
  EXPECT_THROWS_WITH(
      ConfigError,
      Trainer(TrainerOptions().gradient_clip_algorithm("max")),
      "trainer.gradient_clip_algorithm: expected norm or value, got 'max'");
}

TEST_F(TrainerTest, DeterministicTurnsOnDeterministicAlgorithms) {
  auto train = train_loader();
  Trainer(options().max_epochs(1).limit_train_batches(1).deterministic(true))
      .fit(*make_module(0), train);
  EXPECT_TRUE(at::globalContext().deterministicAlgorithms());
  Trainer(options().max_epochs(1).limit_train_batches(1))
      .fit(*make_module(0), train);
  EXPECT_FALSE(at::globalContext().deterministicAlgorithms());
}

} // namespace
} // namespace hotloop::train

namespace hotloop::train {
namespace {

TEST_F(TrainerTest, OneLoaderCanServeTrainingAndValidation) {
  // Validation runs in inference mode; the loader's reused batch buffers
  // must still be usable by autograd in the next training step.
  for (int64_t workers : {0, 1}) {
    auto loader = train_loader(workers);
    const FitResult result =
        Trainer(options().max_epochs(2)).fit(*make_module(0), loader, &loader);
    EXPECT_EQ(result.steps, 16) << workers << " workers";
  }
}

} // namespace
} // namespace hotloop::train

namespace hotloop::train {
namespace {

// A classifier whose schedule steps once per epoch.
std::shared_ptr<ImageClassifier> epoch_scheduled_module(
    uint64_t seed, const std::string& schedule) {
  seed_everything(seed);
  optim::OptimizerOptions optimizer;
  optimizer.name = "adam";
  optimizer.lr = 1e-2;
  optim::SchedulerOptions scheduler;
  scheduler.name = schedule;
  scheduler.interval = "epoch";
  scheduler.step_size = 1;
  scheduler.gamma = 0.5;
  scheduler.mode = "max"; // plateau on val_loss: halves after every epoch
  scheduler.patience = 0;
  scheduler.factor = 0.5;
  return std::make_shared<ImageClassifier>(
      torch::nn::AnyModule(models::FashionCnn(small_model())),
      optimizer,
      scheduler);
}

TEST_F(TrainerTest, AResumeFromAnEpochEndKeepsPerEpochSchedulesInStep) {
  for (const std::string schedule : {"step", "plateau"}) {
    SCOPED_TRACE(schedule);
    auto train = train_loader();
    auto straight = epoch_scheduled_module(0, schedule);
    const FitResult whole =
        Trainer(options().max_epochs(3)).fit(*straight, train, &val_loader_);
    auto first = epoch_scheduled_module(0, schedule);
    const FitResult cut =
        Trainer(options().max_epochs(2)).fit(*first, train, &val_loader_);
    auto resumed = epoch_scheduled_module(9, schedule);
    const FitResult rest =
        Trainer(options().max_epochs(3))
            .fit(*resumed, train, &val_loader_, cut.checkpoint_path);
    const auto a = straight->parameters();
    const auto b = resumed->parameters();
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(a[i].equal(b[i])) << "parameter " << i;
    }
    EXPECT_EQ(rest.metrics.at("val_loss"), whole.metrics.at("val_loss"));
  }
}

TEST_F(TrainerTest, SigtermWithoutCheckpointCallbacksStillLeavesACheckpoint) {
  OnStepClassifier module(std::move(*make_module(0)), 3, raise_signal(SIGTERM));
  auto train = train_loader();
  std::ostringstream log;
  Trainer trainer(options().max_epochs(2).enable_checkpointing(false), log);
  const FitResult cut = trainer.fit(module, train);
  EXPECT_TRUE(cut.interrupted);
  EXPECT_EQ(cut.steps, 3);
  const std::string saved = trainer.log_dir() + "/checkpoints/last.ckpt";
  EXPECT_EQ(cut.checkpoint_path, saved);
  EXPECT_THAT(
      log.str(),
      HasSubstr(
          "interrupted by signal 15 in epoch 1 after batch 3 (step 3); "
          "resume from " +
          saved));
  const FitResult rest = Trainer(options().max_epochs(2))
                             .fit(*make_module(1), train, nullptr, saved);
  EXPECT_EQ(rest.steps, 16);
}

TEST_F(TrainerTest, CheckValEveryNEpochsAndSanityStepsChooseWhenToValidate) {
  CountingClassifier module(std::move(*make_module(0)));
  auto train = train_loader();
  data::DataLoader val(val_set_, data::DataLoaderOptions(16)); // 4 batches
  Trainer(options()
              .max_epochs(3)
              .limit_train_batches(1)
              .check_val_every_n_epoch(2)
              .num_sanity_val_steps(-1))
      .fit(module, train, &val);
  // All 4 batches as the sanity check, then epoch 2 and the last epoch.
  EXPECT_EQ(module.calls, "vvvvttvvvvtvvvv");
}

TEST_F(TrainerTest, LimitTestBatchesBoundsTheTestRun) {
  CountingClassifier module(std::move(*make_module(0)));
  data::DataLoader val(val_set_, data::DataLoaderOptions(16));
  Trainer(options().limit_test_batches(3)).test(module, val);
  EXPECT_EQ(module.calls, "sss");
}

TEST_F(TrainerTest, AnomalyDetectionIsOffUnlessAsked) {
  auto train = train_loader();
  Trainer(options().max_steps(1).detect_anomaly(true))
      .fit(*make_module(0), train);
  EXPECT_TRUE(torch::autograd::AnomalyMode::is_enabled());
  Trainer(options().max_steps(1)).fit(*make_module(0), train);
  EXPECT_FALSE(torch::autograd::AnomalyMode::is_enabled());
}

TEST_F(TrainerTest, EvaluationAppliesTheRuntimeSettingsToo) {
  auto module = make_module(0);
  Trainer(options().deterministic(true)).validate(*module, val_loader_);
  EXPECT_TRUE(at::globalContext().deterministicAlgorithms());
  Trainer(options()).test(*module, val_loader_);
  EXPECT_FALSE(at::globalContext().deterministicAlgorithms());
}

// Draws a random number where training starts.
// Records the evaluation batch hooks as "<hook><batch_idx>[<batch size>]",
// with "s" in the sanity check and "grad" where autograd was on.
class EvaluationBatchHooks : public Callback {
 public:
  void on_validation_batch_start(
      Trainer& t, Module&, const data::Batch& b, int64_t i) override {
    add(t, "vs", b, i);
  }
  void on_validation_batch_end(
      Trainer& t, Module&, const data::Batch& b, int64_t i) override {
    add(t, "ve", b, i);
  }
  void on_test_batch_start(
      Trainer& t, Module&, const data::Batch& b, int64_t i) override {
    add(t, "ts", b, i);
  }
  void on_test_batch_end(
      Trainer& t, Module&, const data::Batch& b, int64_t i) override {
    add(t, "te", b, i);
  }
  void on_predict_batch_end(
      Trainer& t,
      Module&,
      const at::Tensor& outputs,
      const data::Batch& b,
      int64_t i) override {
    add(t, "p", b, i);
    calls.back() += "->" + std::to_string(outputs.size(0));
  }
  std::vector<std::string> calls;

 private:
  void add(
      Trainer& t, const std::string& hook, const data::Batch& b, int64_t i) {
    calls.push_back(
        hook + std::to_string(i) + "[" + std::to_string(b.input.size(0)) + "]" +
        (t.sanity_checking() ? "s" : "") +
        (at::GradMode::is_enabled() ? "grad" : ""));
  }
};

TEST_F(TrainerTest, EvaluationBatchHooksRunAroundEachStepWithItsBatch) {
  auto module = make_module(0);
  auto train = train_loader();
  auto hooks = std::make_shared<EvaluationBatchHooks>();
  Trainer trainer(
      options().max_epochs(1).limit_train_batches(2).num_sanity_val_steps(1));
  trainer.add_callback(hooks);
  trainer.fit(*module, train, &val_loader_);
  // 64 validation samples in batches of 40: the sanity check's one batch,
  // then the epoch's two.
  EXPECT_EQ(
      hooks->calls,
      (std::vector<std::string>{
          "vs0[40]s", "ve0[40]s", "vs0[40]", "ve0[40]", "vs1[24]", "ve1[24]"}));
  hooks->calls.clear();
  trainer.test(*module, val_loader_);
  EXPECT_EQ(
      hooks->calls,
      (std::vector<std::string>{"ts0[40]", "te0[40]", "ts1[24]", "te1[24]"}));
  hooks->calls.clear();
  trainer.predict(*module, val_loader_);
  EXPECT_EQ(
      hooks->calls, (std::vector<std::string>{"p0[40]->40", "p1[24]->24"}));
}

class FirstDraw : public Callback {
 public:
  void on_fit_start(Trainer&, Module&) override {
    value = at::rand({1}).item<double>();
  }
  double value = 0;
};

TEST_F(TrainerTest, TheSanityCheckDoesNotMoveTheRandomGenerators) {
  // A validation_step that draws random numbers.
  class RandomValidation : public ImageClassifier {
   public:
    explicit RandomValidation(ImageClassifier&& base)
        : ImageClassifier(std::move(base)) {}
    void validation_step(
        const data::Batch& batch,
        int64_t batch_idx,
        MetricCollection& metrics) override {
      at::rand({16});
      ImageClassifier::validation_step(batch, batch_idx, metrics);
    }
  };
  auto draw_at_start = [&](int64_t sanity_steps) {
    RandomValidation module(std::move(*make_module(0)));
    auto train = train_loader();
    auto draw = std::make_shared<FirstDraw>();
    Trainer trainer(
        options().max_steps(1).seed(5).num_sanity_val_steps(sanity_steps));
    trainer.add_callback(draw);
    trainer.fit(module, train, &val_loader_);
    return draw->value;
  };
  EXPECT_EQ(draw_at_start(0), draw_at_start(2));
}

} // namespace
} // namespace hotloop::train

namespace hotloop::train {
namespace {

// The first parameter before the first step and after each step.
class WeightRecorder : public Callback {
 public:
  void on_train_epoch_start(Trainer&, Module& module) override {
    weights.push_back(module.parameters()[0].detach().cpu().clone());
  }
  void on_train_batch_end(
      Trainer&,
      Module& module,
      const at::Tensor&,
      const data::Batch&,
      int64_t) override {
    weights.push_back(module.parameters()[0].detach().cpu().clone());
  }
  std::vector<at::Tensor> weights;
};

TEST_F(TrainerTest, Fp16MixedSkipsTheStepOfAnOverflowAndHalvesTheScale) {
  if (!at::hasCUDA() || at::getNumGPUs() == 0) {
    GTEST_SKIP() << "needs a CUDA build of LibTorch and a GPU";
  }
  auto train = train_loader();
  // The third step's loss is infinite, as in an fp16 overflow.
  OnStepClassifier module(
      std::move(*make_module(0)), 3, [](const at::Tensor& loss) {
        return loss * INFINITY;
      });
  auto recorder = std::make_shared<WeightRecorder>();
  Trainer trainer(
      options().max_epochs(1).precision("16-mixed").accelerator("cuda"));
  trainer.add_callback(recorder);
  const FitResult result = trainer.fit(module, train, &val_loader_);
  const auto& weights = recorder->weights;
  ASSERT_EQ(weights.size(), 9u);
  EXPECT_TRUE(weights[3].equal(weights[2]))
      << "the overflowing step changed the weights";
  EXPECT_FALSE(weights[4].equal(weights[3]));
  EXPECT_GE(result.metrics.at("val_acc"), 0.5);

  // The scale halves at every skipped step - the injected one, and any
  // early step whose fp16 gradients overflowed at the initial 2^16 while
  // the scale calibrates - and the growth tracker counts the good steps
  // since the last skip.
  int64_t skipped = 0;
  int64_t since_skip = 0;
  for (size_t step = 1; step < weights.size(); ++step) {
    const bool skip = weights[step].equal(weights[step - 1]);
    skipped += skip ? 1 : 0;
    since_skip = skip ? 0 : since_skip + 1;
  }
  GradScaler scaler;
  CheckpointState state;
  state.scaler = &scaler;
  auto fresh = make_module(1);
  load_checkpoint(result.checkpoint_path, *fresh, &state);
  EXPECT_EQ(scaler.get_scale(), std::ldexp(65536.0, -skipped));
  EXPECT_EQ(scaler.growth_tracker(), since_skip);
}

TEST_F(TrainerTest, ANonFiniteLossOnTheGpuStopsAtTheNextReadNamingTheSteps) {
  if (!at::hasCUDA() || at::getNumGPUs() == 0) {
    GTEST_SKIP() << "needs a CUDA build of LibTorch and a GPU";
  }
  auto train = train_loader(); // 8 batches
  const auto gpu = [&] {
    return options().max_epochs(1).accelerator("cuda").log_every_n_steps(4);
  };
  {
    // Finite losses, two of them 3e38 (a float32 sum of them overflows;
    // their gradients are zero): read at steps 4 and 8, the fit ends.
    OnStepClassifier module(
        std::move(*make_module(0)), {5, 6}, [](const at::Tensor& loss) {
          return loss * 0 + 3e38;
        });
    EXPECT_EQ(Trainer(gpu()).fit(module, train, &val_loader_).steps, 8);
  }
  // +inf and -inf at the steps that read the sum, before their backward
  // spoils the weights; a NaN between reads, whose later losses are NaN too.
  const std::vector<std::tuple<int64_t, double, std::string>> cases = {
      {4, INFINITY, "between step 1 and step 4"},
      {8, -INFINITY, "between step 5 and step 8"},
      {6,
       std::numeric_limits<double>::quiet_NaN(),
       "between step 5 and step 8"},
  };
  for (const auto& [step, value, steps] : cases) {
    OnStepClassifier module(
        std::move(*make_module(0)),
        step,
        [value = value](const at::Tensor& loss) { return loss * value; });
    Trainer trainer(gpu());
    EXPECT_THAT(
        [&] { trainer.fit(module, train, &val_loader_); },
        ::testing::ThrowsMessage<Error>(HasSubstr(
            "training diverged: a loss was not finite " + steps +
            " (read every trainer.log_every_n_steps=4 steps on cuda:0)")))
        << "a loss of " << value << " at step " << step;
  }
}

TEST_F(TrainerTest, Fp16MixedResumesOnTheGpuBitForBit) {
  if (!at::hasCUDA() || at::getNumGPUs() == 0) {
    GTEST_SKIP() << "needs a CUDA build of LibTorch and a GPU";
  }
  auto cuda_options = [&] {
    return options()
        .precision("16-mixed")
        .accelerator("cuda")
        .deterministic(true);
  };
  auto train = train_loader();
  auto straight = make_module(0);
  Trainer(cuda_options().max_epochs(2)).fit(*straight, train, &val_loader_);
  auto first = make_module(0);
  const FitResult cut = Trainer(cuda_options().max_epochs(2).max_steps(11))
                            .fit(*first, train, &val_loader_);
  auto resumed = make_module(7);
  Trainer(cuda_options().max_epochs(2))
      .fit(*resumed, train, &val_loader_, cut.checkpoint_path);
  const auto a = straight->parameters();
  const auto b = resumed->parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(a[i].equal(b[i])) << "parameter " << i;
  }
}

} // namespace
} // namespace hotloop::train

namespace hotloop::train {
namespace {

TEST_F(TrainerTest, LimitsTakeFractionsOfTheLoaderAsLightningDoes) {
  auto train = train_loader(); // 8 batches
  CountingClassifier module(std::move(*make_module(0)));
  data::DataLoader val(val_set_, data::DataLoaderOptions(16)); // 4 batches
  const FitResult result = Trainer(options()
                                       .max_epochs(2)
                                       .num_sanity_val_steps(0)
                                       .limit_train_batches(0.5)
                                       .limit_val_batches(0.25))
                               .fit(module, train, &val);
  EXPECT_EQ(result.steps, 8);
  EXPECT_EQ(module.calls, "ttttvttttv");
  EXPECT_THROWS_WITH(
      ConfigError,
      Trainer(options().limit_train_batches(0.1)).fit(*make_module(0), train),
      "trainer.limit_train_batches=0.1 of 8 batches is none: raise it or "
      "give a whole number");
  EXPECT_THROWS_WITH(
      ConfigError,
      Trainer(options().limit_val_batches(2.5)),
      "trainer.limit_val_batches: expected -1 (all), 0 (none), a fraction in "
      "(0, 1) or a whole number of batches, got 2.5");
  EXPECT_THROWS_WITH(
      ConfigError,
      Trainer(options().limit_train_batches(0)),
      "trainer.limit_train_batches: expected -1 (all), a fraction in (0, 1) "
      "or a whole number of batches, got 0");
}

} // namespace
} // namespace hotloop::train

namespace hotloop::train {
namespace {

// A linear classifier trained by plain SGD: no BatchNorm (whose batch
// statistics differ between one batch and its halves) and no momentum or
// adaptive rates (which would hide a gradient's scale).
std::shared_ptr<ImageClassifier> linear_sgd() {
  seed_everything(4);
  optim::OptimizerOptions optimizer;
  optimizer.name = "sgd";
  optimizer.lr = 0.5;
  optimizer.momentum = 0;
  optim::SchedulerOptions scheduler;
  scheduler.name = "none";
  return std::make_shared<ImageClassifier>(
      torch::nn::AnyModule(models::Mlp(models::MlpOptions(kSize * kSize, 4))),
      optimizer,
      scheduler);
}

TEST_F(TrainerTest, AccumulatedHalfBatchesStepAsOneWholeBatch) {
  // Two micro-batches of 16 with accumulate_grad_batches=2 give the
  // gradient of one batch of 32: each loss is divided by the count.
  data::DataLoader whole(train_set_, data::DataLoaderOptions(32));
  data::DataLoader halves(train_set_, data::DataLoaderOptions(16));
  auto one = linear_sgd();
  auto two = linear_sgd();
  const FitResult a = Trainer(options().max_epochs(1)).fit(*one, whole);
  const FitResult b =
      Trainer(options().max_epochs(1).accumulate_grad_batches(2))
          .fit(*two, halves);
  EXPECT_EQ(a.steps, 8);
  EXPECT_EQ(b.steps, 8);
  const auto x = one->parameters();
  const auto y = two->parameters();
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_TRUE(at::allclose(x[i], y[i], 1e-5, 1e-6))
        << "parameter " << i << " differs by "
        << (x[i] - y[i]).abs().max().item<double>();
  }
  // The step really moved the weights far beyond that tolerance.
  EXPECT_GT(
      (x[0] - linear_sgd()->parameters()[0]).abs().max().item<double>(), 1e-2);
}

TEST_F(TrainerTest, TheSeedFlagSeedsTheGeneratorsAtTheStartOfFit) {
  auto draw = [&](int64_t seed, uint64_t before) {
    auto module = make_module(0);
    auto train = train_loader();
    at::manual_seed(before); // what ran before the fit
    auto first = std::make_shared<FirstDraw>();
    Trainer trainer(options().max_steps(1).seed(seed));
    trainer.add_callback(first);
    trainer.fit(*module, train);
    return first->value;
  };
  EXPECT_EQ(draw(7, 1), draw(7, 2));
  EXPECT_NE(draw(7, 1), draw(8, 1));
  EXPECT_NE(draw(-1, 1), draw(-1, 2)); // -1 leaves the generators alone
}

// trainer.sdpa_backend allows attention that one kernel alone (LibTorch
// 2.x's switches), "auto" all of them again; 1.13 has math only, and a
// name that is no backend, or one this LibTorch lacks, is a ConfigError
// naming the option.
TEST_F(TrainerTest, SdpaBackendAllowsTheNamedAttentionKernelAlone) {
  auto train = train_loader();
  const auto fit = [&](const std::string& backend) {
    Trainer(options().max_steps(1).sdpa_backend(backend))
        .fit(*make_module(0), train);
  };
  // The ConfigError a backend is refused with; "" where it was taken.
  const auto refusal = [&](const std::string& backend) -> std::string {
    try {
      fit(backend);
      return "";
    } catch (const ConfigError& e) {
      return e.what();
    }
  };
  EXPECT_THAT(
      refusal("fast"),
      HasSubstr("trainer.sdpa_backend: expected auto, flash, efficient, "
                "cudnn or math, got 'fast'"));
  fit("math");
#if HOTLOOP_TORCH_VERSION >= 200
  EXPECT_TRUE(at::globalContext().userEnabledMathSDP());
  EXPECT_FALSE(at::globalContext().userEnabledFlashSDP());
  EXPECT_FALSE(at::globalContext().userEnabledMemEfficientSDP());
  fit("flash");
  EXPECT_TRUE(at::globalContext().userEnabledFlashSDP());
  EXPECT_FALSE(at::globalContext().userEnabledMathSDP());
  fit("auto");
  EXPECT_TRUE(at::globalContext().userEnabledFlashSDP());
  EXPECT_TRUE(at::globalContext().userEnabledMathSDP());
  EXPECT_TRUE(at::globalContext().userEnabledMemEfficientSDP());
#else
  EXPECT_THAT(
      refusal("flash"),
      HasSubstr("trainer.sdpa_backend=flash: LibTorch 1.13 has no such "
                "attention kernel to choose"));
  fit("auto");
#endif
}

TEST_F(TrainerTest, BenchmarkFlagSetsCudnnsAlgorithmSearch) {
  auto train = train_loader();
  Trainer(options().max_steps(1)).fit(*make_module(0), train);
  EXPECT_TRUE(at::globalContext().benchmarkCuDNN()); // on by default
  EXPECT_EQ(at::globalContext().benchmarkLimitCuDNN(), 10); // PyTorch's
  Trainer(options().max_steps(1).benchmark_limit(3))
      .fit(*make_module(0), train);
  EXPECT_EQ(at::globalContext().benchmarkLimitCuDNN(), 3);
  Trainer(options().max_steps(1)).fit(*make_module(0), train);
  EXPECT_EQ(at::globalContext().benchmarkLimitCuDNN(), 10);
  Trainer(options().max_steps(1).benchmark(false)).fit(*make_module(0), train);
  EXPECT_FALSE(at::globalContext().benchmarkCuDNN());
  // Timing-based choices are not deterministic.
  Trainer(options().max_steps(1).deterministic(true))
      .fit(*make_module(0), train);
  EXPECT_FALSE(at::globalContext().benchmarkCuDNN());

  // The model summary's one sample is no shape to tune for: the search is
  // off for it alone.
  class FlagRecorder : public ImageClassifier {
   public:
    explicit FlagRecorder(ImageClassifier&& base)
        : ImageClassifier(std::move(base)) {}
    at::Tensor training_step(
        const data::Batch& batch,
        int64_t batch_idx,
        MetricCollection& metrics) override {
      flags += at::globalContext().benchmarkCuDNN() ? "T" : "t";
      return ImageClassifier::training_step(batch, batch_idx, metrics);
    }
    at::Tensor predict_step(
        const data::Batch& batch, int64_t batch_idx) override {
      flags += at::globalContext().benchmarkCuDNN() ? "P" : "p";
      return ImageClassifier::predict_step(batch, batch_idx);
    }
    std::string flags;
  };
  FlagRecorder recorder(std::move(*make_module(0)));
  Trainer(options().max_steps(2)).fit(recorder, train);
  EXPECT_EQ(recorder.flags, "pTT");
  EXPECT_TRUE(at::globalContext().benchmarkCuDNN());
}

TEST_F(TrainerTest, EvaluationRunsInEvalModeAndTrainingInTrainMode) {
  // Records the module's mode in each kind of step.
  class ModeRecorder : public ImageClassifier {
   public:
    explicit ModeRecorder(ImageClassifier&& base)
        : ImageClassifier(std::move(base)) {}
    at::Tensor training_step(
        const data::Batch& batch,
        int64_t batch_idx,
        MetricCollection& metrics) override {
      modes += is_training() ? "T" : "t";
      return ImageClassifier::training_step(batch, batch_idx, metrics);
    }
    void validation_step(
        const data::Batch& batch,
        int64_t batch_idx,
        MetricCollection& metrics) override {
      modes += is_training() ? "V" : "v";
      ImageClassifier::validation_step(batch, batch_idx, metrics);
    }
    at::Tensor predict_step(
        const data::Batch& batch, int64_t batch_idx) override {
      modes += is_training() ? "P" : "p";
      return ImageClassifier::predict_step(batch, batch_idx);
    }
    std::string modes;
  };
  ModeRecorder module(std::move(*make_module(0)));
  auto train = train_loader();
  data::DataLoader val(val_set_, data::DataLoaderOptions(32)); // 2 batches
  Trainer trainer(
      options().max_epochs(2).limit_train_batches(2).num_sanity_val_steps(1));
  trainer.fit(module, train, &val);
  // The sanity batch, the model summary's one sample through predict_step,
  // then two epochs. Upper case would be the wrong mode.
  EXPECT_EQ(module.modes, "vpTTvvTTvv");
  module.modes.clear();
  trainer.predict(module, val);
  EXPECT_EQ(module.modes, "pp");
}

TEST_F(TrainerTest, ValidationMetricsAreExactOverAnUnevenLastBatch) {
  // An untrained model, neither all right nor all wrong, so that the
  // counts below can tell a weighting error.
  auto module = make_module(0, /*top_k=*/2);
  // val_loader_: 64 samples in batches of 40 and 24.
  const std::map<std::string, double> metrics =
      Trainer(options()).validate(*module, val_loader_);

  // The same metrics over all 64 samples at once.
  data::DataLoader all(val_set_, data::DataLoaderOptions(64));
  // The batch lives in the iterator, which must outlive the reference.
  auto it = all.begin();
  const data::Batch& batch = *it;
  module->eval();
  const at::NoGradGuard no_grad;
  const at::Tensor logits = module->forward(batch.input);
  const double correct = logits.argmax(1).eq(batch.target).sum().item<double>();
  const double top2 = std::get<1>(logits.topk(2, 1))
                          .eq(batch.target.unsqueeze(1))
                          .any(1)
                          .sum()
                          .item<double>();
  EXPECT_NEAR(metrics.at("val_acc"), correct / 64, 1e-12);
  EXPECT_NEAR(metrics.at("val_acc_top2"), top2 / 64, 1e-12);
  EXPECT_NEAR(
      metrics.at("val_loss"),
      at::cross_entropy_loss(logits, batch.target).item<double>(),
      1e-6);
  EXPECT_GT(correct, 0);
  EXPECT_LT(top2, 64);
  EXPECT_GT(top2, correct);
}

TEST_F(TrainerTest, AMidEpochResumeRefusesADifferentLoader) {
  auto train = train_loader();
  OnStepClassifier interrupted(
      std::move(*make_module(0)), 3, raise_signal(SIGTERM));
  std::ostringstream log;
  const FitResult cut =
      Trainer(options().max_epochs(2), log).fit(interrupted, train);
  ASSERT_TRUE(cut.interrupted);
  ASSERT_FALSE(cut.checkpoint_path.empty());

  data::DataLoader reseeded(
      train_set_, data::DataLoaderOptions(32).shuffle(true).seed(4));
  EXPECT_THROWS_WITH(
      ConfigError,
      Trainer(options().max_epochs(2), log)
          .fit(*make_module(0), reseeded, nullptr, cut.checkpoint_path),
      cut.checkpoint_path +
          ": written mid-epoch, and resuming there needs the training loader "
          "it had; now seed 4 (was 3) - resume with the run's data settings, "
          "or from a checkpoint written at an epoch end");
  data::DataLoader rebatched(
      train_set_, data::DataLoaderOptions(64).shuffle(true).seed(3));
  EXPECT_THROWS_WITH(
      ConfigError,
      Trainer(options().max_epochs(2), log)
          .fit(*make_module(0), rebatched, nullptr, cut.checkpoint_path),
      "now batch_size 64 (was 32), batches per epoch 4 (was 8)");
  // The same loader resumes.
  const FitResult rest =
      Trainer(options().max_epochs(2), log)
          .fit(*make_module(0), train, nullptr, cut.checkpoint_path);
  EXPECT_EQ(rest.steps, 16);
}

TEST_F(TrainerTest, AMidEpochResumeRefusesASamplerThatDrawsAnotherEpoch) {
  const auto weighted = [&](uint64_t seed) {
    return data::DataLoader(
        train_set_,
        data::DataLoaderOptions(32).sampler(
            std::make_shared<data::WeightedRandomSampler>(
                std::vector<double>(train_set_->size(), 1.0),
                train_set_->size(),
                true,
                seed)));
  };
  auto train = weighted(1);
  OnStepClassifier interrupted(
      std::move(*make_module(0)), 3, raise_signal(SIGTERM));
  std::ostringstream log;
  const FitResult cut =
      Trainer(options().max_epochs(2), log).fit(interrupted, train);
  ASSERT_TRUE(cut.interrupted);
  // The loader's options are the same; its sampler's draws are not.
  auto redrawn = weighted(2);
  EXPECT_THROWS_WITH(
      ConfigError,
      Trainer(options().max_epochs(2), log)
          .fit(*make_module(0), redrawn, nullptr, cut.checkpoint_path),
      "resuming there needs the training loader it had; now a sampler or "
      "batch sampler that draws another epoch - resume with the run's data "
      "settings");
  auto same = weighted(1);
  EXPECT_EQ(
      Trainer(options().max_epochs(2), log)
          .fit(*make_module(0), same, nullptr, cut.checkpoint_path)
          .steps,
      16);
}

TEST_F(TrainerTest, TheCallersStreamAndTheModulesModeAreLeftAsTheyWere) {
  auto module = make_module(0);
  auto train = train_loader();
  std::ostringstream log;
  log << std::setprecision(9);
  Trainer trainer(options().max_epochs(1).enable_progress_bar(true), log);
  trainer.fit(*module, train, &val_loader_);
  EXPECT_EQ(log.precision(), 9);
  EXPECT_EQ(log.flags() & std::ios::floatfield, std::ios::fmtflags{});
  std::ostringstream numbers;
  Trainer quiet(options().max_epochs(1).enable_progress_bar(true), numbers);
  quiet.validate(*module, val_loader_);
  numbers.str("");
  numbers << 0.99609375 << " " << 0.0479;
  EXPECT_EQ(numbers.str(), "0.996094 0.0479");
  // Evaluation restores the mode the module had, either way.
  module->eval();
  trainer.validate(*module, val_loader_);
  EXPECT_FALSE(module->is_training());
  trainer.test(*module, val_loader_);
  EXPECT_FALSE(module->is_training());
  module->train();
  trainer.test(*module, val_loader_);
  EXPECT_TRUE(module->is_training());
}

// The values a short fit gave before the training step moved into its own
// loop files: accumulation, norm clipping, a step schedule, mid-epoch
// validation and a loader thread all take part. A change that alters what
// the loop computes (the order of the step, a skipped schedule step, a
// lost accumulation division) moves these far beyond the tolerance, which
// only allows for other CPUs' kernels rounding differently.
TEST_F(TrainerTest, AShortFitGivesThePinnedLossMetricsAndWeights) {
  auto module = make_module(0);
  auto train = train_loader(1);
  Trainer trainer(options()
                      .max_epochs(2)
                      .accumulate_grad_batches(2)
                      .gradient_clip_val(0.5)
                      .val_check_interval(0.5)
                      .num_threads(1));
  const FitResult result = trainer.fit(*module, train, &val_loader_);
  EXPECT_EQ(result.epochs, 2);
  EXPECT_EQ(result.steps, 8);
  double sum = 0;
  double squares = 0;
  for (const at::Tensor& parameter : module->parameters()) {
    sum += parameter.sum().item<double>();
    squares += parameter.square().sum().item<double>();
  }
  const auto pinned = [](double actual, double expected, const char* name) {
    EXPECT_NEAR(actual, expected, 1e-6 * std::max(1.0, std::abs(expected)))
        << name << " is " << std::setprecision(17) << actual;
  };
  pinned(result.metrics.at("train_loss"), 0.0314661935553886, "train_loss");
  pinned(result.metrics.at("val_loss"), 0.013665989972651005, "val_loss");
  pinned(result.metrics.at("val_acc"), 1.0, "val_acc");
  pinned(sum, 31.948222823441029, "the parameters' sum");
  pinned(squares, 24.897854778915644, "the parameters' sum of squares");
  std::ifstream in(fs::path(trainer.log_dir()) / "summary.json");
  const auto summary = nlohmann::json::parse(in);
  for (const char* key : {"train_loss", "val_loss", "val_acc"}) {
    EXPECT_EQ(summary.at(key).get<double>(), result.metrics.at(key)) << key;
  }
  EXPECT_EQ(summary.at("steps"), 8);
}

} // namespace
} // namespace hotloop::train

namespace hotloop::train {
namespace {

// A classifier that places itself: a buffer stays on the meta device,
// which no whole-module move could take (a copy out of meta fails), as a
// decoder on a second GPU would stay there.
class SelfPlaced : public ImageClassifier {
 public:
  explicit SelfPlaced(ImageClassifier&& base)
      : ImageClassifier(std::move(base)) {
    register_buffer("elsewhere", at::empty({4}, at::Device(at::kMeta)));
  }
  std::optional<c10::Device> input_device() const override {
    return placed_;
  }
  void set_input_device(std::optional<c10::Device> device) {
    placed_ = device;
  }
  at::Tensor training_step(
      const data::Batch& batch,
      int64_t batch_idx,
      MetricCollection& metrics) override {
    devices_seen.insert(batch.input.device().str());
    return ImageClassifier::training_step(batch, batch_idx, metrics);
  }
  std::set<std::string> devices_seen;

 private:
  std::optional<c10::Device> placed_ = c10::Device(at::kCPU);
};

TEST_F(TrainerTest, AModuleThatPlacesItselfKeepsItsDevices) {
  SelfPlaced module(std::move(*make_module(3)));
  auto train = train_loader();
  Trainer trainer(
      options().max_epochs(1).enable_checkpointing(false).logger(false));
  const FitResult result = trainer.fit(module, train, &val_loader_);
  EXPECT_EQ(result.epochs, 1);
  EXPECT_TRUE(module.named_buffers()["elsewhere"].is_meta());
  EXPECT_EQ(module.devices_seen, (std::set<std::string>{"cpu"}));
  // Without the hook the Trainer moves the whole module, which this one's
  // meta buffer cannot survive.
  module.set_input_device(std::nullopt);
  EXPECT_ANY_THROW(Trainer(options().max_epochs(1).logger(false))
                       .fit(module, train, &val_loader_));
}

} // namespace
} // namespace hotloop::train
