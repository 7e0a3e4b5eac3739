#include "hotloop/train/metrics.h"
#include "hotloop/core/error.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cmath>

namespace hotloop::train {
namespace {

TEST(MeanMetric, WeightsBatchMeansBySizeSoAnUnevenLastBatchAddsUpExactly) {
  // Per-sample losses 1..10 in batches of 4, 4, 2.
  MeanMetric metric;
  metric.update((1 + 2 + 3 + 4) / 4.0, 4);
  metric.update((5 + 6 + 7 + 8) / 4.0, 4);
  metric.update((9 + 10) / 2.0, 2);
  EXPECT_DOUBLE_EQ(metric.compute(), 5.5);
  EXPECT_DOUBLE_EQ(metric.weight(), 10);
  metric.reset();
  EXPECT_TRUE(std::isnan(metric.compute()));
}

TEST(MetricCollection, LogsDetachedTensorsAsPlainNumbers) {
  MetricCollection metrics;
  const at::Tensor w = at::ones({}, at::TensorOptions().requires_grad(true));
  metrics.log("loss", w * 3, 2);
  metrics.log("loss", 6.0, 1);
  EXPECT_DOUBLE_EQ(metrics.get("loss"), 4.0);
  EXPECT_TRUE(std::isnan(metrics.get("missing")));
  EXPECT_EQ(metrics.compute().size(), 1u);
  EXPECT_DOUBLE_EQ(metrics.last().at("loss"), 6.0);
  metrics.log("loss", w * 5, 1);
  EXPECT_DOUBLE_EQ(metrics.last().at("loss"), 5.0);
}

TEST(MetricCollection, CountsAddUpOverBatchesAndStayOutOfTheMeans) {
  MetricCollection metrics;
  metrics.count("hits", at::tensor({1, 0, 2}, at::kLong));
  metrics.count("hits", at::tensor({0, 3, 1}, at::kLong));
  metrics.log("val_acc", 0.5, 2);
  EXPECT_TRUE(
      metrics.counts().at("hits").equal(at::tensor({1, 3, 3}, at::kLong)));
  EXPECT_EQ(metrics.compute().size(), 1u);
  EXPECT_EQ(metrics.state().count("hits"), 0u);
  try {
    metrics.count("hits", at::tensor({1, 1}, at::kLong));
    FAIL() << "a count of another shape was added";
  } catch (const Error& e) {
    EXPECT_STREQ(
        e.what(),
        "the count 'hits' was [3] and is now added [2]: every batch must "
        "count the same shape");
  }
  // A checkpoint's means replace the means only.
  metrics.load_state({{"val_acc", {1.0, 4.0}}});
  EXPECT_DOUBLE_EQ(metrics.get("val_acc"), 0.25);
  EXPECT_TRUE(
      metrics.counts().at("hits").equal(at::tensor({1, 3, 3}, at::kLong)));
  metrics.reset();
  EXPECT_TRUE(metrics.counts().empty());
  // Counted under an evaluation's InferenceMode, the total is a normal
  // tensor, which the sum over processes can update afterwards.
  {
    const c10::InferenceMode evaluation;
    metrics.count("hits", at::ones({2}, at::kLong));
    metrics.count("hits", at::ones({2}, at::kLong));
  }
  metrics.counts().at("hits").mul_(2);
  EXPECT_TRUE(metrics.counts().at("hits").equal(at::full({2}, 4, at::kLong)));
}

TEST(ConfusionCounts, CountEachTrueClassAgainstItsHighestScore) {
  // Three classes; the scores pick 0, 2, 2, 1, 0 for targets 0, 2, 1, 1, 0;
  // the last row ties classes 0 and 2 and counts as 0, argmax's pick.
  const at::Tensor logits = at::tensor({0.7,
                                        0.2,
                                        0.1,
                                        0.1,
                                        0.1,
                                        0.8,
                                        0.2,
                                        0.3,
                                        0.5,
                                        0.1,
                                        0.6,
                                        0.3,
                                        0.4,
                                        0.2,
                                        0.4})
                                .view({5, 3});
  const at::Tensor target = at::tensor({0, 2, 1, 1, 0}, at::kLong);
  const at::Tensor counts = confusion_counts(logits, target);
  EXPECT_EQ(counts.scalar_type(), at::kLong);
  EXPECT_TRUE(counts.equal(
      at::tensor({2, 0, 0, 0, 1, 1, 0, 0, 1}, at::kLong).view({3, 3})))
      << counts;
  try {
    confusion_counts(logits, target.narrow(0, 0, 4));
    FAIL() << "four targets for five rows were counted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "confusion counts need a target [5], got [4]");
  }
  EXPECT_THROW(confusion_counts(logits.view({-1}), target), Error);
}

TEST(MetricCollection, LogLastLogsEachMetricsLatestValueWithItsWeight) {
  MetricCollection step;
  step.log("train_loss", at::full({}, 9.0), 4);
  step.log("train_loss", at::full({}, 2.0), 3); // the latest counts
  step.log("train_acc", 0.5, 3);
  MetricCollection epoch;
  epoch.log("train_loss", 1.0, 1);
  epoch.log_last(step);
  epoch.log_last(step);
  EXPECT_DOUBLE_EQ(epoch.get("train_loss"), (1.0 + 2 * 2.0 * 3) / 7);
  EXPECT_DOUBLE_EQ(epoch.get("train_acc"), 0.5);
  EXPECT_DOUBLE_EQ(epoch.state().at("train_acc").second, 6);
  EXPECT_DOUBLE_EQ(epoch.last().at("train_loss"), 2.0);
}

TEST(MeanMetric, AcceleratorTensorsAreSummedOnTheDevice) {
  if (!at::hasCUDA()) {
    GTEST_SKIP() << "needs a CUDA build of LibTorch and a GPU";
  }
  MeanMetric mean;
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  mean.update(at::full({}, 2.0, cuda), 3);
  mean.update(4.0, 1);
  mean.update(at::full({}, 1.0, cuda), 4);
  EXPECT_DOUBLE_EQ(mean.compute(), (6.0 + 4.0 + 4.0) / 8);
}

// A sum continued from a checkpoint adds in the order of the uninterrupted
// one: 1e16 + 1 rounds to 1e16, so ((1e16 + 1) - 1e16) + 1 is 1 while
// (1e16 + 1) + (-1e16 + 1) is 0. On the CPU sums are host doubles; on a GPU
// the device sum must take the loaded one over.
TEST(MeanMetric, AResumedSumAddsInTheOrderOfAnUninterruptedOne) {
  std::vector<at::Device> devices{at::kCPU};
  if (at::hasCUDA() && at::getNumGPUs() > 0) {
    devices.emplace_back(at::kCUDA);
  }
  const std::vector<double> values = {1e16, 1.0, -1e16, 1.0};
  for (const at::Device& device : devices) {
    SCOPED_TRACE(device.str());
    auto value = [&](size_t i) {
      return at::full({}, values[i], at::device(device).dtype(at::kDouble));
    };
    MeanMetric straight;
    MeanMetric first_half;
    for (size_t i = 0; i < values.size(); ++i) {
      straight.update(value(i));
      if (i < 2) {
        first_half.update(value(i));
      }
    }
    MeanMetric resumed;
    resumed.load(first_half.sum(), first_half.weight());
    resumed.update(value(2));
    resumed.update(value(3));
    EXPECT_EQ(straight.sum(), 1.0);
    EXPECT_EQ(resumed.sum(), straight.sum());
    EXPECT_EQ(resumed.compute(), 0.25);
  }
}

TEST(CountCorrect, CountsTopKHitsOverUnevenBatches) {
  const at::Tensor logits =
      at::tensor({0.1f, 0.7f, 0.2f, 0.5f, 0.3f, 0.2f, 0.2f, 0.3f, 0.5f})
          .view({3, 3});
  const at::Tensor target = at::tensor({1, 1, 0}, at::kLong);
  EXPECT_EQ(count_correct(logits, target, 1), 1);
  EXPECT_EQ(count_correct(logits, target, 2), 2);
  EXPECT_EQ(count_correct(logits, target, 3), 3);
  // The same count, left as a tensor where the logits are.
  const at::Tensor count = correct_count(logits, target, 2);
  EXPECT_EQ(count.dim(), 0);
  EXPECT_EQ(count.scalar_type(), at::kLong);
  EXPECT_EQ(count.item<int64_t>(), 2);
}

} // namespace
} // namespace hotloop::train
