#include "hotloop/data/dataloader.h"
#include "hotloop/core/error.h"
#include "hotloop/data/concat_dataset.h"
#include "hotloop/data/image_dataset.h"
#include "hotloop/data/tensor_dataset.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <numeric>
#include <set>
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
  Example get(int64_t index, const SampleContext&) const override {
    if (index == fail_at_) {
      throw DataError("sample " + std::to_string(index) + " is broken");
    }
    return Example{
        at::full({1}, static_cast<float>(index)),
        at::scalar_tensor(index, at::kLong)};
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

TEST(ConcatDataset, IndexesItsDatasetsOneAfterAnotherAsPyTorchsDoes) {
  const auto a = std::make_shared<IndexDataset>(3); // samples 0, 1, 2
  const auto b = std::make_shared<TensorDataset>(
      at::tensor({100.0f, 101.0f}).view({2, 1}),
      at::tensor({100, 101}, at::kLong));
  const auto concat = std::make_shared<ConcatDataset>(
      std::vector<std::shared_ptr<const Dataset>>{a, b, a});
  EXPECT_EQ(concat->size(), 8);
  EXPECT_EQ(concat->locate(4), std::make_pair(size_t{1}, int64_t{1}));
  EXPECT_EQ(concat->locate(5), std::make_pair(size_t{2}, int64_t{0}));
  EXPECT_EQ(concat->get(4, {}).target.item<int64_t>(), 101);
  EXPECT_EQ(concat->get(7, {}).input.item<float>(), 2.0f);
  // Batches that straddle the datasets, each run read with its dataset's
  // get_batch into its rows.
  DataLoader loader(concat, DataLoaderOptions(3));
  EXPECT_EQ(
      epoch_targets(loader),
      (std::vector<std::vector<int64_t>>{{0, 1, 2}, {100, 101, 0}, {1, 2}}));
  EXPECT_THROWS_WITH(
      Error,
      concat->get(8, {}),
      "sample index 8 is out of range for a dataset of 8");
}

TEST(ConcatDataset, RefusesNoneAnEmptyOneAndOtherSampleShapesNamingThem) {
  using List = std::vector<std::shared_ptr<const Dataset>>;
  const auto a = std::make_shared<IndexDataset>(3);
  EXPECT_THROWS_WITH(
      DataError, ConcatDataset(List{}), "ConcatDataset: no datasets given");
  EXPECT_THROWS_WITH(
      DataError,
      ConcatDataset(List{a, std::make_shared<IndexDataset>(0)}),
      "ConcatDataset: dataset 1 is empty");
  const auto wide = std::make_shared<TensorDataset>(
      at::zeros({2, 2}), at::zeros({2}, at::kLong));
  EXPECT_THROWS_WITH(
      DataError,
      ConcatDataset(List{a, wide}),
      "ConcatDataset: dataset 1's samples are input [2] Float, target [] "
      "Long, dataset 0's input [1] Float, target [] Long");
  // In position order: the first fault is named.
  EXPECT_THROWS_WITH(
      DataError,
      ConcatDataset(List{a, std::make_shared<IndexDataset>(0), wide}),
      "ConcatDataset: dataset 1 is empty");
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
    auto options = DataLoaderOptions(32).shuffle(true).seed(42);
    if (workers > 0) {
      options.num_workers(workers).prefetch_factor(prefetch);
    }
    DataLoader loader(dataset, options);
    std::vector<at::Tensor> out;
    for (int epoch = 0; epoch < 2; ++epoch) {
      for (auto& batch : loader) {
        out.push_back(batch.input);
        out.push_back(batch.target);
      }
    }
    return out;
  };
  const auto reference = collect(0, 0);
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

TEST(DataLoader, WorkerErrorsReachTheConsumerNamingTheSample) {
  for (int64_t workers : {0, 2}) {
    DataLoader loader(
        std::make_shared<IndexDataset>(20, /*fail_at=*/13),
        DataLoaderOptions(4).num_workers(workers));
    EXPECT_THAT(
        [&] { epoch_targets(loader); },
        ::testing::ThrowsMessage<DataError>(::testing::StrEq(
            "sample 13 (batch 3 of epoch 0): sample 13 is broken")))
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
                    "(timeout option)")));
}

TEST(DataLoader, InvalidOptionsAreRejectedAsPyTorchRejectsThem) {
  auto dataset = std::make_shared<IndexDataset>(4);
  auto rejects = [&](DataLoaderOptions options, const std::string& message) {
    EXPECT_THAT(
        [&] { DataLoader(dataset, options); },
        ::testing::ThrowsMessage<ConfigError>(::testing::StrEq(message)));
  };
  rejects(
      DataLoaderOptions(0),
      "batch_size should be a positive integer value, but got batch_size=0");
  rejects(
      DataLoaderOptions(1).num_workers(-1),
      "num_workers option should be non-negative, got -1; use num_workers=0 "
      "to load in the calling thread");
  rejects(
      DataLoaderOptions(1).timeout(-1),
      "timeout option should be non-negative, got -1");
  rejects(
      DataLoaderOptions(1).prefetch_factor(2),
      "prefetch_factor option needs num_workers > 0 (it counts batches each "
      "worker prepares ahead)");
  rejects(
      DataLoaderOptions(1).num_workers(1).prefetch_factor(0),
      "prefetch_factor option should be positive, got 0");
  rejects(
      DataLoaderOptions(1).persistent_workers(true),
      "persistent_workers option needs num_workers > 0");
  auto sampler = std::make_shared<SequentialSampler>(4);
  rejects(
      DataLoaderOptions(1).sampler(sampler).shuffle(true),
      "sampler option is mutually exclusive with shuffle");
  auto batches = std::make_shared<BatchSampler>(sampler, 2, false);
  for (const auto& bad :
       {DataLoaderOptions(2).batch_sampler(batches),
        DataLoaderOptions(1).batch_sampler(batches).shuffle(true),
        DataLoaderOptions(1).batch_sampler(batches).sampler(sampler),
        DataLoaderOptions(1).batch_sampler(batches).drop_last(true)}) {
    rejects(
        bad,
        "batch_sampler option is mutually exclusive with batch_size, "
        "shuffle, sampler, and drop_last");
  }
  rejects(
      DataLoaderOptions().batch_size(std::nullopt).drop_last(true),
      "batch_size=None option disables auto-batching and is mutually "
      "exclusive with drop_last");
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

namespace hotloop::data {
namespace {

TEST(ImageClassificationDataset, GetAndGetBatchGiveTheSameValuesInEveryDtype) {
  const at::Tensor images = at::randint(0, 256, {10, 3, 6, 6}).to(at::kByte);
  const at::Tensor labels = at::arange(10) % 3;
  for (auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    ImageTransformOptions transform;
    transform.crop_padding = 2;
    transform.horizontal_flip = true;
    transform.mean = {0.5};
    transform.std = {0.25};
    transform.dtype = dtype;
    ImageClassificationDataset dataset(images, labels, transform);
    EXPECT_EQ(dataset.spec().input_dtype, dtype);
    const std::vector<int64_t> indices = {7, 2, 9};
    const SampleContext context{11, 4};
    Batch batch{at::empty({3, 3, 6, 6}, dtype), at::empty({3}, at::kLong)};
    dataset.get_batch(indices, context, batch);
    for (size_t k = 0; k < indices.size(); ++k) {
      const Example example = dataset.get(indices[k], context);
      EXPECT_TRUE(batch.input[k].equal(example.input)) << dtype << " row " << k;
      EXPECT_EQ(
          batch.target[k].item<int64_t>(), example.target.item<int64_t>());
    }
  }
}

} // namespace
} // namespace hotloop::data

namespace hotloop::data {
namespace {

std::vector<std::vector<int64_t>> targets_of(DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (auto& batch : loader) {
    const at::Tensor t = batch.target.reshape({-1});
    out.emplace_back(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
  }
  return out;
}

// Sample i is the value i.
class Indices : public Dataset {
 public:
  explicit Indices(int64_t n) : n_(n) {}
  int64_t size() const override {
    return n_;
  }
  SampleSpec spec() const override {
    return SampleSpec{{1}, at::kFloat, {}, at::kLong};
  }
  Example get(int64_t index, const SampleContext&) const override {
    return Example{
        at::full({1}, static_cast<float>(index)),
        at::scalar_tensor(index, at::kLong)};
  }

 private:
  int64_t n_;
};

TEST(DataLoader, ShuffleFollowsTorchRandpermSeededWithSeedPlusEpoch) {
  DataLoader loader(
      std::make_shared<Indices>(50),
      DataLoaderOptions(50).shuffle(true).seed(7));
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    at::Generator generator =
        at::make_generator<at::CPUGeneratorImpl>(7 + epoch);
    const at::Tensor expected = at::randperm(50, generator, at::kLong);
    const auto batches = targets_of(loader);
    ASSERT_EQ(batches.size(), 1u);
    EXPECT_TRUE(at::tensor(batches[0], at::kLong).equal(expected))
        << "epoch " << epoch;
  }
}

// Visits the dataset backwards.
class ReverseSampler : public Sampler {
 public:
  explicit ReverseSampler(int64_t n) : n_(n) {}
  std::vector<int64_t> indices(int64_t) const override {
    std::vector<int64_t> out(n_);
    std::iota(out.rbegin(), out.rend(), 0);
    return out;
  }
  int64_t size() const override {
    return n_;
  }

 private:
  int64_t n_;
};

TEST(DataLoader, ASamplerOrBatchSamplerSetsTheOrder) {
  auto sampler = std::make_shared<ReverseSampler>(5);
  DataLoader by_sampler(
      std::make_shared<Indices>(5), DataLoaderOptions(2).sampler(sampler));
  EXPECT_EQ(
      targets_of(by_sampler),
      (std::vector<std::vector<int64_t>>{{4, 3}, {2, 1}, {0}}));
  DataLoader by_batches(
      std::make_shared<Indices>(5),
      DataLoaderOptions().batch_sampler(
          std::make_shared<BatchSampler>(sampler, 3, /*drop_last=*/true)));
  EXPECT_EQ(by_batches.num_batches(), 1);
  EXPECT_EQ(
      targets_of(by_batches), (std::vector<std::vector<int64_t>>{{4, 3, 2}}));
}

TEST(DataLoader, AnIndexOutsideTheDatasetIsNamed) {
  DataLoader loader(
      std::make_shared<Indices>(3),
      DataLoaderOptions(2).sampler(std::make_shared<ReverseSampler>(4)));
  EXPECT_THAT(
      [&] { targets_of(loader); },
      ::testing::ThrowsMessage<DataError>(::testing::HasSubstr(
          "the sampler gave index 3 for a dataset of 3 samples")));
}

TEST(DataLoader, TheDefaultGetBatchStacksSamples) {
  DataLoader loader(std::make_shared<Indices>(5), DataLoaderOptions(2));
  std::vector<at::Tensor> inputs;
  for (auto& batch : loader) {
    inputs.push_back(batch.input.clone());
  }
  ASSERT_EQ(inputs.size(), 3u);
  EXPECT_TRUE(inputs[1].equal(at::tensor({2.0f, 3.0f}).view({2, 1})));
}

TEST(DataLoader, BatchSizeNoneYieldsSamplesWithoutABatchDimension) {
  DataLoader loader(
      std::make_shared<Indices>(3),
      DataLoaderOptions().batch_size(std::nullopt).num_workers(2));
  EXPECT_EQ(loader.num_batches(), 3);
  int64_t expected = 0;
  for (auto& sample : loader) {
    EXPECT_EQ(sample.input.sizes(), at::IntArrayRef({1}));
    EXPECT_EQ(sample.target.dim(), 0);
    EXPECT_EQ(sample.target.item<int64_t>(), expected++);
  }
  EXPECT_EQ(expected, 3);
}

TEST(DataLoader, ACustomCollateBuildsBatchesFromSamples) {
  DataLoader loader(
      std::make_shared<Indices>(5),
      DataLoaderOptions(2).collate([](std::vector<Example> samples) {
        std::vector<at::Tensor> inputs, targets;
        for (auto& s : samples) {
          inputs.push_back(s.input);
          targets.push_back(s.target + 100);
        }
        return Batch{at::stack(inputs), at::stack(targets)};
      }));
  EXPECT_EQ(
      targets_of(loader),
      (std::vector<std::vector<int64_t>>{{100, 101}, {102, 103}, {104}}));
}

TEST(DataLoader, WorkerInitFnRunsInEachWorkerEachTimeWorkersStart) {
  for (bool persistent : {false, true}) {
    std::mutex mutex;
    std::multiset<int64_t> ids;
    std::set<std::thread::id> threads;
    DataLoader loader(
        std::make_shared<Indices>(12),
        DataLoaderOptions(2)
            .num_workers(3)
            .persistent_workers(persistent)
            .worker_init_fn([&](int64_t id) {
              std::lock_guard<std::mutex> lock(mutex);
              ids.insert(id);
              threads.insert(std::this_thread::get_id());
            }));
    targets_of(loader);
    targets_of(loader);
    const size_t starts = persistent ? 1 : 2;
    EXPECT_EQ(ids.size(), 3 * starts) << "persistent " << persistent;
    for (int64_t id = 0; id < 3; ++id) {
      EXPECT_EQ(ids.count(id), starts);
    }
    EXPECT_EQ(threads.count(std::this_thread::get_id()), 0u);
  }
}

TEST(DataLoader, AFailingWorkerInitFnReachesTheConsumer) {
  DataLoader loader(
      std::make_shared<Indices>(4),
      DataLoaderOptions(2).num_workers(1).worker_init_fn(
          [](int64_t) { throw std::runtime_error("no GPU for you"); }));
  EXPECT_THAT(
      [&] { targets_of(loader); },
      ::testing::ThrowsMessage<DataError>(::testing::HasSubstr(
          "worker_init_fn failed in worker 0: no GPU for you")));
}

// Batches of a budget of "tokens", as fairseq makes them: sample i has
// length lengths[i]; the samples, shortest first, go into one batch while
// its count times its longest length stays within `budget`, so batches
// differ in size. They are packed once; each epoch shuffles their order.
class TokenBudgetBatches : public BatchSamplerBase {
 public:
  TokenBudgetBatches(const std::vector<int64_t>& lengths, int64_t budget) {
    std::vector<int64_t> order(lengths.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return lengths[static_cast<size_t>(a)] < lengths[static_cast<size_t>(b)];
    });
    for (int64_t index : order) {
      const int64_t length = lengths[static_cast<size_t>(index)];
      if (packed_.empty() ||
          static_cast<int64_t>(packed_.back().size() + 1) * length > budget) {
        packed_.emplace_back();
      }
      packed_.back().push_back(index);
    }
  }
  std::vector<std::vector<int64_t>> batches(int64_t epoch) const override {
    std::vector<std::vector<int64_t>> out;
    const RandomSampler shuffle(
        static_cast<int64_t>(packed_.size()), false, std::nullopt, 7);
    for (int64_t k : shuffle.indices(epoch)) {
      out.push_back(packed_[static_cast<size_t>(k)]);
    }
    return out;
  }
  int64_t size() const override {
    return static_cast<int64_t>(packed_.size()) + size_error;
  }
  int64_t size_error = 0; // a size() that disagrees with the batches

 private:
  std::vector<std::vector<int64_t>> packed_;
};

TEST(DataLoader, ABatchSamplerOfYourOwnGivesBatchesOfAnySize) {
  std::vector<int64_t> lengths(50);
  for (int64_t i = 0; i < 50; ++i) {
    lengths[static_cast<size_t>(i)] = (i * 17) % 50 + 1;
  }
  auto batches = std::make_shared<TokenBudgetBatches>(lengths, 120);
  const auto epoch0 = batches->batches(0);
  const auto epoch1 = batches->batches(1);
  std::set<size_t> sizes;
  for (const auto& batch : epoch0) {
    sizes.insert(batch.size());
  }
  ASSERT_GT(sizes.size(), 2u); // sizes differ
  ASSERT_NE(epoch0, epoch1);   // and so does the order, epoch to epoch
  for (int64_t workers : {0, 2}) {
    DataLoader loader(
        std::make_shared<Indices>(50),
        DataLoaderOptions().batch_sampler(batches).num_workers(workers));
    EXPECT_EQ(loader.num_batches(), static_cast<int64_t>(epoch0.size()));
    EXPECT_EQ(targets_of(loader), epoch0) << workers << " workers";
    EXPECT_EQ(targets_of(loader), epoch1) << workers << " workers";
  }
  // A resume gives the rest of the epoch's batches.
  DataLoader resumed(
      std::make_shared<Indices>(50),
      DataLoaderOptions().batch_sampler(batches));
  resumed.load_state_dict({1, 3});
  EXPECT_EQ(
      targets_of(resumed),
      std::vector<std::vector<int64_t>>(epoch1.begin() + 3, epoch1.end()));
}

// Batches [0], [], [1]: the second one is empty.
class WithAnEmptyBatch : public BatchSamplerBase {
 public:
  std::vector<std::vector<int64_t>> batches(int64_t) const override {
    return {{0}, {}, {1}};
  }
  int64_t size() const override {
    return 3;
  }
};

TEST(DataLoader, ABatchSamplersEmptyBatchOrWrongSizeIsNamed) {
  auto dataset = std::make_shared<Indices>(50);
  DataLoader empty(
      dataset,
      DataLoaderOptions().batch_sampler(std::make_shared<WithAnEmptyBatch>()));
  EXPECT_THAT(
      [&] { targets_of(empty); },
      ::testing::ThrowsMessage<DataError>(::testing::StrEq(
          "the batch sampler's batch 1 of epoch 0 is empty; every batch "
          "needs at least one sample index")));
  auto miscounted =
      std::make_shared<TokenBudgetBatches>(std::vector<int64_t>(50, 10), 40);
  miscounted->size_error = 1;
  DataLoader wrong(dataset, DataLoaderOptions().batch_sampler(miscounted));
  EXPECT_THAT(
      [&] { targets_of(wrong); },
      ::testing::ThrowsMessage<DataError>(::testing::StrEq(
          "the batch sampler gave 13 batches for epoch 0 but its size() is "
          "14; the loader's length comes from size()")));
}

TEST(DataLoader, AResumedStateGivesTheSameRemainingBatches) {
  auto dataset = std::make_shared<Indices>(40);
  const auto options =
      DataLoaderOptions(6).shuffle(true).seed(5).num_workers(2);
  DataLoader straight(dataset, options);
  targets_of(straight);
  const auto epoch1 = targets_of(straight);

  DataLoader interrupted(dataset, options);
  interrupted.set_epoch(1);
  int64_t taken = 0;
  for (auto& batch : interrupted) {
    (void)batch;
    if (++taken == 3) {
      break;
    }
  }
  const DataLoaderState state = interrupted.state_dict();
  EXPECT_EQ(state.epoch, 1);
  EXPECT_EQ(state.batches_consumed, 3);

  DataLoader resumed(dataset, options);
  resumed.load_state_dict(state);
  EXPECT_EQ(resumed.state_dict().batches_consumed, 3);
  const auto rest = targets_of(resumed);
  EXPECT_EQ(
      rest,
      std::vector<std::vector<int64_t>>(epoch1.begin() + 3, epoch1.end()));
  EXPECT_EQ(resumed.state_dict().epoch, 2);
  EXPECT_EQ(resumed.state_dict().batches_consumed, 0);
  EXPECT_THAT(
      [&] {
        resumed.load_state_dict({0, 8});
      },
      ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr(
          "loader state says 8 batches of epoch 0 were consumed, but an "
          "epoch has 7")));
}

TEST(DataLoader, BatchBuffersAreReusedOnlyOnceTheCallerDropsThem) {
  auto images = at::zeros({40, 1, 2, 2}, at::kByte);
  auto dataset = std::make_shared<ImageClassificationDataset>(
      images, at::zeros({40}, at::kLong));
  DataLoader loader(dataset, DataLoaderOptions(4));
  std::vector<at::Tensor> held;
  std::set<const void*> seen;
  for (auto& batch : loader) {
    for (const auto& h : held) {
      EXPECT_NE(batch.input.data_ptr(), h.data_ptr());
    }
    seen.insert(batch.input.data_ptr());
    if (held.size() < 3) {
      held.push_back(batch.input);
    }
  }
  // Three held buffers, plus two taking turns for the other seven batches:
  // the batch the iterator still points to is in use while the next loads.
  EXPECT_EQ(seen.size(), 5u);
  const at::Tensor view = held[0].view({-1});
  held.clear();
  for (auto& batch : loader) {
    EXPECT_NE(batch.input.data_ptr(), view.data_ptr());
  }
}

TEST(DataLoader, DeviceCpuAndPinMemoryWithoutCudaStillLoad) {
  DataLoader loader(
      std::make_shared<Indices>(6),
      DataLoaderOptions(4).pin_memory(true).device(c10::Device(c10::kCPU)));
  EXPECT_EQ(
      targets_of(loader),
      (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5}}));
}

// A collate for data without labels: the batch's target stays undefined.
Batch inputs_only(std::vector<Example> samples) {
  std::vector<at::Tensor> inputs;
  for (auto& s : samples) {
    inputs.push_back(s.input);
  }
  return Batch{at::stack(inputs), at::Tensor()};
}

TEST(DataLoader, BatchesWithoutTargetsMoveToTheDevice) {
  DataLoader loader(
      std::make_shared<Indices>(5),
      DataLoaderOptions(2).collate(inputs_only).device(c10::Device(c10::kCPU)));
  int64_t rows = 0;
  for (auto& batch : loader) {
    EXPECT_FALSE(batch.target.defined());
    rows += batch.input.size(0);
  }
  EXPECT_EQ(rows, 5);
}

} // namespace
} // namespace hotloop::data

namespace hotloop::data {
namespace {

// Runs only where LibTorch has CUDA and a GPU is present.
TEST(DataLoaderCuda, BatchesArriveOnTheDeviceEqualToTheHostBatches) {
  if (!at::hasCUDA()) {
    GTEST_SKIP() << "needs a CUDA build of LibTorch and a GPU";
  }
  const at::Tensor images = at::randint(0, 256, {70, 1, 8, 8}).to(at::kByte);
  ImageTransformOptions transform;
  transform.crop_padding = 1;
  transform.horizontal_flip = true;
  auto dataset = std::make_shared<ImageClassificationDataset>(
      images, at::arange(70) % 5, transform);
  const auto options = DataLoaderOptions(16).shuffle(true).num_workers(2);
  DataLoader host(dataset, options);
  DataLoader device(
      dataset,
      DataLoaderOptions(options).pin_memory(true).device(
          c10::Device("cuda:0")));
  std::vector<Batch> expected;
  for (auto& batch : host) {
    expected.push_back(batch);
  }
  size_t k = 0;
  for (auto& batch : device) {
    ASSERT_LT(k, expected.size());
    EXPECT_TRUE(batch.input.is_cuda());
    EXPECT_TRUE(batch.input.cpu().equal(expected[k].input)) << "batch " << k;
    EXPECT_TRUE(batch.target.cpu().equal(expected[k].target)) << "batch " << k;
    if (++k == 2) {
      EXPECT_EQ(device.state_dict().batches_consumed, 2);
    }
  }
  EXPECT_EQ(k, expected.size());
}

// A collate's batches are pinned too (PyTorch pins every batch), and a
// batch without a target crosses to the GPU as well.
TEST(DataLoaderCuda, CollateBatchesArePinnedAndMayLackATarget) {
  if (!at::hasCUDA()) {
    GTEST_SKIP() << "needs a CUDA build of LibTorch and a GPU";
  }
  DataLoader pinned(
      std::make_shared<Indices>(5),
      DataLoaderOptions(2).collate(inputs_only).pin_memory(true));
  for (auto& batch : pinned) {
    EXPECT_TRUE(batch.input.is_pinned());
  }
  DataLoader device(
      std::make_shared<Indices>(5),
      DataLoaderOptions(2)
          .collate(inputs_only)
          .pin_memory(true)
          .device(c10::Device("cuda:0")));
  int64_t rows = 0;
  for (auto& batch : device) {
    EXPECT_TRUE(batch.input.is_cuda());
    EXPECT_FALSE(batch.target.defined());
    rows += batch.input.size(0);
  }
  EXPECT_EQ(rows, 5);
}

TEST(DataLoader, AnUnavailableDeviceIsAConfigError) {
  if (at::hasCUDA()) {
    GTEST_SKIP() << "this machine has CUDA";
  }
  EXPECT_THROWS_WITH(
      ConfigError,
      DataLoader(
          std::make_shared<Indices>(4),
          DataLoaderOptions(2).device(c10::Device("cuda:0"))),
      "device option cuda:0: not available (this LibTorch sees 0 cuda "
      "devices)");
}

} // namespace
} // namespace hotloop::data
