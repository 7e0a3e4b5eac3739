#include "hotloop/data/dataloader.h"
#include "hotloop/core/error.h"
#include "hotloop/data/image_dataset.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace hotloop::data {
namespace {

using ::testing::HasSubstr;

// Sample i is the value i; optionally slow, optionally failing at one index.
class IndexDataset : public Dataset {
 public:
  explicit IndexDataset(int64_t n, int64_t fail_at = -1, int sleep_ms = 0)
      : n_(n), fail_at_(fail_at), sleep_ms_(sleep_ms) {}
  int64_t size() const override {
    return n_;
  }
  SampleSpec spec() const override {
    return SampleSpec{{1}, at::kFloat, {}, at::kLong};
  }
  void get_batch(
      c10::ArrayRef<int64_t> indices,
      const SampleContext&,
      Batch& out) const override {
    if (sleep_ms_ > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    }
    for (size_t k = 0; k < indices.size(); ++k) {
      if (indices[k] == fail_at_) {
        throw DataError("sample " + std::to_string(indices[k]) + " is broken");
      }
      out.input.data_ptr<float>()[k] = static_cast<float>(indices[k]);
      out.target.data_ptr<int64_t>()[k] = indices[k];
    }
  }

 private:
  int64_t n_, fail_at_;
  int sleep_ms_;
};

std::vector<std::vector<int64_t>> epoch_targets(DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (auto& batch : loader) {
    const at::Tensor t = batch.target;
    out.emplace_back(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
  }
  return out;
}

TEST(DataLoader, SequentialBatchesCoverTheDatasetInOrderWithASmallerLastBatch) {
  DataLoader loader(std::make_shared<IndexDataset>(10), DataLoaderOptions(4));
  EXPECT_EQ(loader.num_batches(), 3);
  const auto batches = epoch_targets(loader);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0], (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(batches[2], (std::vector<int64_t>{8, 9}));
}

TEST(DataLoader, DropLastDropsTheIncompleteBatch) {
  DataLoader loader(
      std::make_shared<IndexDataset>(10), DataLoaderOptions(4).drop_last(true));
  EXPECT_EQ(loader.num_batches(), 2);
  EXPECT_EQ(epoch_targets(loader).size(), 2u);
}

TEST(DataLoader, ShuffleGivesAPermutationThatChangesEveryEpoch) {
  DataLoader loader(
      std::make_shared<IndexDataset>(100), DataLoaderOptions(7).shuffle(true));
  auto flatten = [](const std::vector<std::vector<int64_t>>& batches) {
    std::vector<int64_t> all;
    for (const auto& b : batches) {
      all.insert(all.end(), b.begin(), b.end());
    }
    return all;
  };
  const auto first = flatten(epoch_targets(loader));
  const auto second = flatten(epoch_targets(loader));
  EXPECT_NE(first, second);
  auto sorted = first;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> expected(100);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(sorted, expected);
  loader.set_epoch(0);
  EXPECT_EQ(flatten(epoch_targets(loader)), first);
}

TEST(DataLoader, SameSeedGivesBitwiseIdenticalEpochsForAnyWorkerCount) {
  // Augmented images: the order and every crop/flip must match.
  const at::Tensor images = at::randint(0, 256, {300, 1, 8, 8}).to(at::kByte);
  const at::Tensor labels = at::arange(300) % 10;
  ImageTransformOptions transform;
  transform.crop_padding = 2;
  transform.horizontal_flip = true;
  transform.mean = {0.5};
  transform.std = {0.25};
  auto dataset =
      std::make_shared<ImageClassificationDataset>(images, labels, transform);
  auto collect = [&](int64_t workers, int64_t prefetch) {
    DataLoader loader(
        dataset,
        DataLoaderOptions(32)
            .shuffle(true)
            .seed(42)
            .num_workers(workers)
            .prefetch_factor(prefetch));
    std::vector<at::Tensor> out;
    for (int epoch = 0; epoch < 2; ++epoch) {
      for (auto& batch : loader) {
        out.push_back(batch.input);
        out.push_back(batch.target);
      }
    }
    return out;
  };
  const auto reference = collect(0, 2);
  for (auto [workers, prefetch] : {std::pair{1, 1}, {2, 2}, {4, 3}}) {
    const auto other = collect(workers, prefetch);
    ASSERT_EQ(other.size(), reference.size());
    for (size_t i = 0; i < reference.size(); ++i) {
      ASSERT_TRUE(other[i].equal(reference[i]))
          << workers << " workers, tensor " << i;
    }
  }
}

TEST(DataLoader, LeavingAnEpochEarlyThenStartingAnotherGivesTheFullEpoch) {
  DataLoader loader(
      std::make_shared<IndexDataset>(50), DataLoaderOptions(5).num_workers(2));
  for (auto& batch : loader) {
    (void)batch;
    break;
  }
  EXPECT_EQ(epoch_targets(loader).size(), 10u);
}

TEST(DataLoader, DestroyingALoaderMidEpochDoesNotHang) {
  auto loader = std::make_unique<DataLoader>(
      std::make_shared<IndexDataset>(1000, -1, 2),
      DataLoaderOptions(1).num_workers(3));
  auto it = loader->begin();
  ++it;
  loader.reset();
  SUCCEED();
}

TEST(DataLoader, WorkerErrorsReachTheConsumerWithTheirMessage) {
  for (int64_t workers : {0, 2}) {
    DataLoader loader(
        std::make_shared<IndexDataset>(20, /*fail_at=*/13),
        DataLoaderOptions(4).num_workers(workers));
    EXPECT_THAT(
        [&] { epoch_targets(loader); },
        ::testing::ThrowsMessage<DataError>(HasSubstr("sample 13 is broken")))
        << workers << " workers";
  }
}

TEST(DataLoader, TimeoutRaisesAClearError) {
  DataLoader loader(
      std::make_shared<IndexDataset>(4, -1, /*sleep_ms=*/300),
      DataLoaderOptions(2).num_workers(1).timeout(0.02));
  EXPECT_THAT(
      [&] { epoch_targets(loader); },
      ::testing::ThrowsMessage<Error>(
          HasSubstr("DataLoader timed out after 0.02 s waiting for batch 0 "
                    "(data.timeout)")));
}

TEST(DataLoader, InvalidOptionsNameTheOption) {
  auto dataset = std::make_shared<IndexDataset>(4);
  EXPECT_THAT(
      [&] { DataLoader(dataset, DataLoaderOptions(0)); },
      ::testing::ThrowsMessage<ConfigError>(
          HasSubstr("batch_size must be positive, got 0")));
  EXPECT_THAT(
      [&] { DataLoader(dataset, DataLoaderOptions(1).num_workers(-1)); },
      ::testing::ThrowsMessage<ConfigError>(
          HasSubstr("num_workers must be >= 0, got -1")));
  EXPECT_THAT(
      [&] { DataLoader(dataset, DataLoaderOptions(1).prefetch_factor(0)); },
      ::testing::ThrowsMessage<ConfigError>(
          HasSubstr("prefetch_factor must be positive, got 0")));
}

TEST(ImageClassificationDataset, MismatchedCountsAreRejected) {
  EXPECT_THAT(
      [&] {
        ImageClassificationDataset(
            at::zeros({3, 2, 2}, at::kByte), at::zeros({2}, at::kLong));
      },
      ::testing::ThrowsMessage<DataError>(
          HasSubstr("there are 3 images but 2 labels")));
}

} // namespace
} // namespace hotloop::data
