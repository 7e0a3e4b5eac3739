#include "hotloop/train/metrics.h"

#include <ATen/ATen.h>
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
}

TEST(CountCorrect, CountsTopKHitsOverUnevenBatches) {
  const at::Tensor logits =
      at::tensor({0.1f, 0.7f, 0.2f, 0.5f, 0.3f, 0.2f, 0.2f, 0.3f, 0.5f})
          .view({3, 3});
  const at::Tensor target = at::tensor({1, 1, 0}, at::kLong);
  EXPECT_EQ(count_correct(logits, target, 1), 1);
  EXPECT_EQ(count_correct(logits, target, 2), 2);
  EXPECT_EQ(count_correct(logits, target, 3), 3);
}

} // namespace
} // namespace hotloop::train
