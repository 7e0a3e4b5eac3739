#include "hotloop/train/batch_size_finder.h"

#include "hotloop/core/error.h"
#include "hotloop/core/memory.h"
#include "hotloop/data/tensor_dataset.h"
#include "hotloop/models/mlp.h"
#include "test_util.h"
#include "trainer_fixture.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>

namespace hotloop::train {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The sizes a strategy tries when every batch up to `limit` fits and the
// dataset holds `dataset` samples, and where it ends.
std::pair<int64_t, std::vector<int64_t>> search(
    const std::string& mode,
    int64_t limit,
    int64_t max_trials,
    int64_t dataset = 1 << 30) {
  std::vector<int64_t> tried;
  const detail::FitsBatch fits = [&](int64_t size) {
    tried.push_back(size);
    return size <= limit;
  };
  const detail::FitsBatch covers = [&](int64_t size) {
    return size >= dataset;
  };
  const int64_t size = mode == "power"
      ? detail::power_scaling(fits, covers, 2, max_trials)
      : detail::binary_scaling(fits, covers, 2, max_trials);
  return {size, tried};
}

// The sequences below are Lightning's _run_power_scaling and
// _run_binary_scaling run on the same answers.
TEST(BatchSizeSearch, PowerDoublesUntilABatchFailsAndTakesTheLastThatFit) {
  const auto [size, tried] = search("power", 100, 25);
  EXPECT_EQ(size, 64);
  EXPECT_THAT(tried, ElementsAre(2, 4, 8, 16, 32, 64, 128));
  // Nothing but 1 fits: down to it, up once more.
  const auto [one, down] = search("power", 1, 25);
  EXPECT_EQ(one, 1);
  EXPECT_THAT(down, ElementsAre(2, 1, 2));
  // Out of trials: the last that fit (Lightning would return 16, untried).
  const auto [short_size, short_tried] = search("power", 100, 3);
  EXPECT_EQ(short_size, 8);
  EXPECT_THAT(short_tried, ElementsAre(2, 4, 8));
  EXPECT_EQ(search("power", 0, 25).first, 0);
}

TEST(BatchSizeSearch, BinsearchBisectsBetweenTheLastFitAndTheFirstFailure) {
  const auto [size, tried] = search("binsearch", 100, 25);
  EXPECT_EQ(size, 100);
  EXPECT_THAT(
      tried, ElementsAre(2, 4, 8, 16, 32, 64, 128, 96, 112, 104, 100, 102, 101));
  const auto [short_size, short_tried] = search("binsearch", 100, 3);
  EXPECT_EQ(short_size, 16);
  EXPECT_THAT(short_tried, ElementsAre(2, 4, 8, 16));
}

TEST(BatchSizeSearch, ABatchAsLargeAsTheDatasetEndsTheSearch) {
  for (const char* mode : {"power", "binsearch"}) {
    const auto [size, tried] = search(mode, 1 << 20, 25, /*dataset=*/40);
    EXPECT_EQ(size, 64) << mode;
    EXPECT_THAT(tried, ElementsAre(2, 4, 8, 16, 32, 64)) << mode;
  }
}

TEST(ScaleLearningRate, LinearAndSquareRootRules) {
  EXPECT_DOUBLE_EQ(scale_learning_rate(0.1, 64, 256, "linear"), 0.4);
  EXPECT_DOUBLE_EQ(scale_learning_rate(0.1, 64, 256, "sqrt"), 0.2);
  EXPECT_DOUBLE_EQ(scale_learning_rate(0.1, 64, 256, "none"), 0.1);
  EXPECT_THROWS_WITH(
      ConfigError,
      scale_learning_rate(0.1, 64, 256, "square"),
      "must be none, linear or sqrt, got 'square'");
}

// An MLP on wide rows: each sample in a batch costs tens of kilobytes of
// activations and gradients, so memory grows with the batch.
class ScaleBatchSizeTest : public ::testing::Test {
 protected:
  ScaleBatchSizeTest() {
    seed_everything(0);
    rows_ = std::make_shared<data::TensorDataset>(
        at::randn({kRows, kWidth}), at::randint(0, 4, {kRows}, at::kLong));
    const models::Mlp mlp(
        models::MlpOptions(kWidth, 4).hidden({2048, 2048}));
    optim::OptimizerOptions optimizer;
    optimizer.name = "sgd";
    optimizer.lr = 1e-3;
    optim::SchedulerOptions scheduler;
    scheduler.name = "none";
    module_ = std::make_shared<ImageClassifier>(
        torch::nn::AnyModule(mlp), optimizer, scheduler, 1);
  }
  LoaderForBatchSize loaders() {
    return [this](int64_t size) {
      return std::make_unique<data::DataLoader>(
          rows_, data::DataLoaderOptions(size).shuffle(true).seed(1));
    };
  }
  static TrainerOptions trainer() {
    return TrainerOptions().accelerator("cpu").num_threads(1);
  }
  static constexpr int64_t kRows = 4096;
  static constexpr int64_t kWidth = 1024;
  std::shared_ptr<data::TensorDataset> rows_;
  std::shared_ptr<ImageClassifier> module_;
};

TEST_F(ScaleBatchSizeTest, StaysWithinTheMemoryBudgetMeasuredOnRealSteps) {
  release_freed_host_memory();
  // Room for the gradients and momentum (50 MB) and a thousand or two
  // samples' activations above what is held now.
  const int64_t budget = resident_bytes() + (160 << 20);
  std::vector<at::Tensor> before;
  for (const at::Tensor& p : module_->parameters()) {
    before.push_back(p.detach().clone());
  }
  std::ostringstream out;
  const BatchSizeSearch result = scale_batch_size(
      *module_,
      loaders(),
      trainer(),
      BatchSizeFinderOptions().max_memory(budget).steps_per_trial(2),
      &out);
  EXPECT_EQ(result.max_memory, budget);
  ASSERT_GE(result.trials.size(), 2u);
  // Doubling from 2 while it fits, then one failure: measured over the
  // budget or predicted to be.
  int64_t expected = 2;
  for (size_t i = 0; i + 1 < result.trials.size(); ++i) {
    const BatchSizeTrial& trial = result.trials[i];
    EXPECT_EQ(trial.batch_size, expected);
    EXPECT_TRUE(trial.fits);
    EXPECT_TRUE(trial.measured);
    EXPECT_GT(trial.peak_bytes, 0);
    EXPECT_LE(trial.peak_bytes, budget);
    EXPECT_GT(trial.samples_per_s, 0);
    expected *= 2;
  }
  const BatchSizeTrial& failed = result.trials.back();
  EXPECT_EQ(failed.batch_size, expected);
  EXPECT_FALSE(failed.fits);
  EXPECT_GT(failed.peak_bytes, budget);
  EXPECT_EQ(result.batch_size, expected / 2);
  EXPECT_LT(result.batch_size, kRows); // the budget, not the dataset, ended it
  EXPECT_THAT(
      out.str(),
      HasSubstr("scale_batch_size: batch size " +
                std::to_string(result.batch_size) + "\n"));
  // The module is as it was.
  size_t i = 0;
  for (const at::Tensor& p : module_->parameters()) {
    EXPECT_TRUE(p.equal(before[i++]));
  }
  // A budget below what the process already holds fits nothing.
  EXPECT_THROWS_WITH(
      ConfigError,
      scale_batch_size(
          *module_, loaders(), trainer(), BatchSizeFinderOptions().max_memory(1 << 20)),
      "scale_batch_size: no batch size fits: a batch of 1 peaked at");
}

TEST_F(ScaleBatchSizeTest, WithoutABudgetTheDatasetSizeEndsIt) {
  // A small table: the whole of it fits long before memory runs short.
  rows_ = std::make_shared<data::TensorDataset>(
      at::randn({100, kWidth}), at::randint(0, 4, {100}, at::kLong));
  const BatchSizeSearch result = scale_batch_size(
      *module_,
      loaders(),
      trainer(),
      BatchSizeFinderOptions().mode("binsearch").steps_per_trial(1));
  EXPECT_EQ(result.batch_size, 128);
  EXPECT_EQ(result.trials.size(), 7u);
  EXPECT_GT(result.max_memory, resident_bytes());
  EXPECT_THROWS_WITH(
      ConfigError,
      scale_batch_size(
          *module_, loaders(), trainer(), BatchSizeFinderOptions().mode("linear")),
      "scale_batch_size: mode must be power or binsearch, got 'linear'");
}

} // namespace
} // namespace hotloop::train
