#include "hotloop/train/strategy.h"
#include "hotloop/train/detail/epoch_batches.h"
#include "hotloop/train/detail/evaluation_loop.h"
#include "hotloop/train/metrics.h"
#include "train/trainer_fixture.h"

#include "hotloop/core/error.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hotloop::train {
namespace {

TEST(Strategy, TheSingleProcessOneChangesNothing) {
  Strategy single;
  at::Tensor values = at::tensor({1.5, 2.0}, at::kDouble);
  single.all_reduce(values);
  single.all_reduce(values, Reduction::kMax);
  EXPECT_TRUE(values.equal(at::tensor({1.5, 2.0}, at::kDouble)));
  EXPECT_TRUE(single.any(true));
  EXPECT_FALSE(single.any(false));
  EXPECT_TRUE(single.is_global_zero());
  EXPECT_EQ(single.world_size(), 1);
}

// A process of two whose partner saw one more sample of every metric, with
// the value 0: the sums stay, the weights grow by one.
class PartnerSawOneZero : public Strategy {
 public:
  void all_reduce(at::Tensor& values, Reduction op) override {
    ops.push_back(op);
    shapes.push_back(values.sizes().vec());
    if (op == Reduction::kSum) { // the check before it agrees
      values.view({-1, 2}).select(1, 1).add_(1);
    }
  }
  int64_t world_size() const override {
    return 2;
  }
  std::vector<Reduction> ops;
  std::vector<std::vector<int64_t>> shapes;
};

TEST(Strategy, MetricSumsAndWeightsAreReducedInOneCollective) {
  MetricCollection metrics;
  metrics.log("val_acc", 1.0, 3); // 3 samples, all right
  metrics.log("val_loss", 0.5, 1);
  metrics.log("val_loss", 0.25, 3); // sum 1.25 over 4
  PartnerSawOneZero partner;
  detail::all_reduce_metrics(metrics, partner);
  // First the check that every process logged the same, then the sums.
  ASSERT_EQ(partner.ops.size(), 2u);
  EXPECT_EQ(partner.ops[0], Reduction::kMax);
  EXPECT_EQ(partner.ops[1], Reduction::kSum);
  EXPECT_EQ(partner.shapes[1], (std::vector<int64_t>{4}));
  EXPECT_DOUBLE_EQ(metrics.get("val_acc"), 3.0 / 4.0);
  EXPECT_DOUBLE_EQ(metrics.get("val_loss"), 1.25 / 5.0);

  Strategy single; // one process: no collective at all
  MetricCollection alone;
  alone.log("val_acc", 1.0, 3);
  detail::all_reduce_metrics(alone, single);
  EXPECT_DOUBLE_EQ(alone.get("val_acc"), 1.0);
}

// A partner process that logged and counted the same as this one.
class PartnerDidTheSame : public Strategy {
 public:
  void all_reduce(at::Tensor& values, Reduction op) override {
    if (op == Reduction::kSum) {
      values.mul_(2);
    }
    ++collectives;
  }
  int64_t world_size() const override {
    return 2;
  }
  int collectives = 0;
};

TEST(Strategy, CountsAreSummedInTheMeansCollectiveInPlace) {
  MetricCollection metrics;
  metrics.log("val_acc", 1.0, 3);
  metrics.count(
      "val_confusion", at::tensor({3, 0, 1, 2}, at::kLong).view({2, 2}));
  const at::Tensor counted = metrics.counts().at("val_confusion");
  PartnerDidTheSame partner;
  detail::all_reduce_metrics(metrics, partner);
  EXPECT_EQ(partner.collectives, 2); // the check, then the sums
  EXPECT_TRUE(counted.equal(at::tensor({6, 0, 2, 4}, at::kLong).view({2, 2})));
  EXPECT_EQ(counted.scalar_type(), at::kLong);
  EXPECT_DOUBLE_EQ(metrics.get("val_acc"), 1.0);
}

// A partner process whose stream has `batches` batches: asked at each
// position (0 first) whether a stream has ended, it says so from there on.
class PartnerStreamEnds : public Strategy {
 public:
  explicit PartnerStreamEnds(int64_t batches) : batches_(batches) {}
  bool any(bool flag) override {
    const bool partner_ended = asked++ >= batches_;
    return flag || partner_ended;
  }
  int64_t world_size() const override {
    return 2;
  }
  int64_t asked = 0;

 private:
  int64_t batches_;
};

// Reads a pass of `limit` batches with `partner`: each batch's size, the
// last one's marked by a minus.
std::vector<int64_t> pass(
    data::DataLoader& loader, int64_t limit, Strategy& partner) {
  detail::EpochBatches batches(loader, /*done=*/0, limit, &partner);
  std::vector<int64_t> sizes;
  data::Batch batch;
  bool last = false;
  while (batches.next(batch, last)) {
    sizes.push_back(last ? -batch.size() : batch.size());
  }
  EXPECT_EQ(batches.ran_out(), sizes.size() < static_cast<size_t>(limit));
  return sizes;
}

TEST(EpochBatches, AStreamReadTogetherEndsForEveryProcessAtTheFirstEnd) {
  // This process's stream: 36 samples in batches of 8 (the last of 4).
  data::DataLoader stream(
      std::make_shared<StreamOf>(quadrants(36, 1), /*sized=*/false),
      data::DataLoaderOptions(8));
  const int64_t all = 100;
  PartnerStreamEnds shorter(3);
  EXPECT_EQ(pass(stream, all, shorter), (std::vector<int64_t>{8, 8, -8}));
  // Asked before the first batch and after each read ahead, once each.
  EXPECT_EQ(shorter.asked, 4);
  PartnerStreamEnds longer(9);
  EXPECT_EQ(pass(stream, all, longer), (std::vector<int64_t>{8, 8, 8, 8, -4}));
  EXPECT_EQ(longer.asked, 6);
  PartnerStreamEnds empty(0);
  EXPECT_EQ(pass(stream, all, empty), std::vector<int64_t>{});
  EXPECT_EQ(empty.asked, 1);
  // The limit is every process's: nothing is asked after its batch.
  PartnerStreamEnds limited(9);
  EXPECT_EQ(pass(stream, 2, limited), (std::vector<int64_t>{8, -8}));
  EXPECT_EQ(limited.asked, 2);
  // A map-style loader's shares have equal counts: nothing to ask.
  data::DataLoader by_index(quadrants(36, 1), data::DataLoaderOptions(8));
  PartnerStreamEnds unasked(1);
  EXPECT_EQ(pass(by_index, 5, unasked), (std::vector<int64_t>{8, 8, 8, 8, -4}));
  EXPECT_EQ(unasked.asked, 0);
  // One process alone reads its own stream to its end.
  Strategy single;
  EXPECT_EQ(pass(stream, all, single), (std::vector<int64_t>{8, 8, 8, 8, -4}));
}

} // namespace
} // namespace hotloop::train
