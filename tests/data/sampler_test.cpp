#include "hotloop/data/sampler.h"

#include "hotloop/core/compat.h"
#include "hotloop/core/error.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#ifndef HOTLOOP_TEST_REFERENCE_DIR
#define HOTLOOP_TEST_REFERENCE_DIR "tests/reference"
#endif

namespace hotloop::data {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// One line of tests/reference/samplers.txt:
// "<sampler> <key>=<value> ... : <indices...>".
struct Case {
  std::string line;
  std::map<std::string, std::string> args;
  std::vector<int64_t> expected;

  const std::string& arg(const std::string& key) const {
    const auto it = args.find(key);
    if (it == args.end()) {
      throw std::out_of_range("no " + key + " in reference case: " + line);
    }
    return it->second;
  }
  bool has(const std::string& key) const {
    return args.count(key) != 0;
  }
  int64_t integer(const std::string& key) const {
    return std::stoll(arg(key));
  }
  uint64_t seed() const {
    return std::stoull(arg("seed"));
  }
  bool flag(const std::string& key) const {
    return integer(key) != 0;
  }
  template <typename T>
  std::vector<T> list(const std::string& key) const {
    std::vector<T> values;
    std::istringstream in(arg(key));
    std::string item;
    while (std::getline(in, item, ',')) {
      // strtod reads Python's repr of a double back exactly.
      values.push_back(static_cast<T>(std::stod(item)));
    }
    return values;
  }
};

// The reference cases of one sampler, in file order; at least one.
std::vector<Case> reference_cases(const std::string& sampler) {
  const std::string path =
      std::string(HOTLOOP_TEST_REFERENCE_DIR) + "/samplers.txt";
  std::ifstream in(path);
  if (!in) {
    throw std::runtime_error("cannot open reference file " + path);
  }
  std::vector<Case> cases;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name;
    if (line.empty() || line[0] == '#' || !(fields >> name) ||
        name != sampler) {
      continue;
    }
    Case c;
    c.line = line;
    for (std::string field; fields >> field && field != ":";) {
      const size_t eq = field.find('=');
      c.args[field.substr(0, eq)] = field.substr(eq + 1);
    }
    for (int64_t index = 0; fields >> index;) {
      c.expected.push_back(index);
    }
    cases.push_back(std::move(c));
  }
  if (cases.empty()) {
    throw std::runtime_error(
        "no " + sampler + " cases in " + path +
        " (regenerate with tests/reference/make_sampler_reference.py)");
  }
  return cases;
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> out(static_cast<size_t>(n));
  std::iota(out.begin(), out.end(), int64_t{0});
  return out;
}

std::vector<int64_t> sorted(std::vector<int64_t> values) {
  std::sort(values.begin(), values.end());
  return values;
}

template <typename F>
void expect_config_error(F&& make, const std::string& message) {
  EXPECT_THAT(
      [&] { make(); },
      ::testing::ThrowsMessage<ConfigError>(::testing::StrEq(message)));
}

TEST(SequentialSampler, MatchesPyTorch) {
  for (const Case& c : reference_cases("sequential")) {
    const SequentialSampler sampler(c.integer("n"));
    EXPECT_EQ(sampler.indices(c.integer("epoch")), c.expected) << c.line;
    EXPECT_EQ(sampler.size(), static_cast<int64_t>(c.expected.size()));
  }
}

TEST(SequentialSampler, GivesTheSameOrderEveryEpoch) {
  const SequentialSampler sampler(5);
  EXPECT_EQ(sampler.indices(0), iota(5));
  EXPECT_EQ(sampler.indices(7), iota(5));
}

TEST(RandomSampler, MatchesPyTorchWithAndWithoutReplacement) {
  for (const Case& c : reference_cases("random")) {
    std::optional<int64_t> num_samples;
    if (c.has("num_samples")) {
      num_samples = c.integer("num_samples");
    }
    const RandomSampler sampler(
        c.integer("n"), c.flag("replacement"), num_samples, c.seed());
    EXPECT_EQ(sampler.indices(c.integer("epoch")), c.expected) << c.line;
    EXPECT_EQ(sampler.size(), static_cast<int64_t>(c.expected.size()))
        << c.line;
  }
}

TEST(RandomSampler, SameEpochGivesSameIndicesInAnyCallOrder) {
  const RandomSampler sampler(50, false, std::nullopt, 3);
  const auto epoch2 = sampler.indices(2);
  sampler.indices(0);
  sampler.indices(9);
  EXPECT_EQ(sampler.indices(2), epoch2);
  EXPECT_EQ(RandomSampler(50, false, std::nullopt, 3).indices(2), epoch2);
}

TEST(RandomSampler, EpochsAndSeedsGiveDifferentOrders) {
  const RandomSampler sampler(50, false, std::nullopt, 3);
  EXPECT_NE(sampler.indices(0), sampler.indices(1));
  EXPECT_NE(
      sampler.indices(0), RandomSampler(50, false, std::nullopt, 9).indices(0));
}

TEST(RandomSampler, EpochEIsSeededWithSeedPlusEWrappingAround) {
  const auto expected = RandomSampler(20, false, std::nullopt, 7).indices(0);
  EXPECT_EQ(RandomSampler(20, false, std::nullopt, 5).indices(2), expected);
  EXPECT_EQ(RandomSampler(20, false, std::nullopt, 9).indices(-2), expected);
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  EXPECT_EQ(RandomSampler(20, false, std::nullopt, max).indices(8), expected);
}

TEST(RandomSampler, WithoutReplacementRepeatsWholePermutations) {
  const RandomSampler sampler(6, false, 15, 1);
  const auto indices = sampler.indices(0);
  ASSERT_EQ(indices.size(), 15u);
  EXPECT_EQ(sorted({indices.begin(), indices.begin() + 6}), iota(6));
  EXPECT_EQ(sorted({indices.begin() + 6, indices.begin() + 12}), iota(6));
  const std::set<int64_t> tail(indices.begin() + 12, indices.end());
  EXPECT_EQ(tail.size(), 3u);
}

TEST(RandomSampler, WithReplacementDrawsInRange) {
  const RandomSampler sampler(4, true, 1000, 2);
  const auto indices = sampler.indices(0);
  ASSERT_EQ(indices.size(), 1000u);
  EXPECT_EQ(std::set<int64_t>(indices.begin(), indices.end()).size(), 4u);
  EXPECT_EQ(*std::min_element(indices.begin(), indices.end()), 0);
  EXPECT_EQ(*std::max_element(indices.begin(), indices.end()), 3);
}

TEST(RandomSampler, CanBeReadFromManyThreadsAtOnce) {
  const RandomSampler sampler(1000, false, std::nullopt, 11);
  const auto expected = sampler.indices(4);
  std::vector<std::vector<int64_t>> results(4);
  std::vector<std::thread> threads;
  for (auto& result : results) {
    threads.emplace_back([&] { result = sampler.indices(4); });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  for (const auto& result : results) {
    EXPECT_EQ(result, expected);
  }
}

TEST(SubsetRandomSampler, MatchesPyTorch) {
  for (const Case& c : reference_cases("subset")) {
    const SubsetRandomSampler sampler(c.list<int64_t>("indices"), c.seed());
    EXPECT_EQ(sampler.indices(c.integer("epoch")), c.expected) << c.line;
    EXPECT_EQ(sampler.size(), static_cast<int64_t>(c.expected.size()));
  }
}

TEST(SubsetRandomSampler, GivesEachSubsetIndexOnceInANewOrderEachEpoch) {
  std::vector<int64_t> subset;
  for (int64_t i = 0; i < 40; ++i) {
    subset.push_back(3 * i + 1);
  }
  const SubsetRandomSampler sampler(subset, 5);
  EXPECT_EQ(sampler.size(), 40);
  EXPECT_EQ(sorted(sampler.indices(0)), subset);
  EXPECT_EQ(sorted(sampler.indices(1)), subset);
  EXPECT_NE(sampler.indices(0), sampler.indices(1));
}

TEST(SubsetRandomSampler, EmptySubsetGivesEmptyEpochs) {
  const SubsetRandomSampler sampler({}, 0);
  EXPECT_EQ(sampler.size(), 0);
  EXPECT_THAT(sampler.indices(3), IsEmpty());
}

// The reference comes from PyTorch 1.13. LibTorch 2.x's multinomial draws
// a single sample with replacement by the exponential race it uses without
// replacement (seen on 2.11: index 2, as without replacement, where 1.13
// gives 4), so with 2.x that case must equal the draw without replacement.
TEST(WeightedRandomSampler, MatchesPyTorchWithAndWithoutReplacement) {
  for (const Case& c : reference_cases("weighted")) {
    const auto weights = c.list<double>("weights");
    const int64_t num_samples = c.integer("num_samples");
    const bool replacement = c.flag("replacement");
    const WeightedRandomSampler sampler(
        weights, num_samples, replacement, c.seed());
    EXPECT_EQ(sampler.size(), num_samples);
    const std::vector<int64_t> drawn = sampler.indices(c.integer("epoch"));
    if (HOTLOOP_TORCH_VERSION >= 200 && replacement && num_samples == 1) {
      const WeightedRandomSampler race(weights, 1, false, c.seed());
      EXPECT_EQ(drawn, race.indices(c.integer("epoch"))) << c.line;
    } else {
      EXPECT_EQ(drawn, c.expected) << c.line;
    }
  }
}

TEST(WeightedRandomSampler, NeverDrawsZeroWeightsWithReplacement) {
  const WeightedRandomSampler sampler({0, 1, 0, 2, 0}, 500, true, 1);
  for (int64_t index : sampler.indices(0)) {
    EXPECT_TRUE(index == 1 || index == 3) << index;
  }
}

TEST(WeightedRandomSampler, WithoutReplacementDrawsEachIndexAtMostOnce) {
  const WeightedRandomSampler sampler({5, 1, 1, 1, 1, 1, 1, 1}, 8, false, 2);
  EXPECT_EQ(sorted(sampler.indices(0)), iota(8));
  EXPECT_NE(sampler.indices(0), sampler.indices(1));
}

TEST(DistributedSampler, MatchesPyTorchForEveryRankShuffleAndDropLast) {
  for (const Case& c : reference_cases("distributed")) {
    const DistributedSampler sampler(
        c.integer("n"),
        c.integer("num_replicas"),
        c.integer("rank"),
        c.flag("shuffle"),
        c.seed(),
        c.flag("drop_last"));
    EXPECT_EQ(sampler.indices(c.integer("epoch")), c.expected) << c.line;
    EXPECT_EQ(sampler.size(), static_cast<int64_t>(c.expected.size()))
        << c.line;
  }
}

TEST(DistributedSampler, PadsByRepeatingTheStartLikePyTorch) {
  // 0..9 padded to 12 with 0, 1; rank r takes positions r, r + 3, ...
  EXPECT_THAT(
      DistributedSampler(10, 3, 2, /*shuffle=*/false).indices(0),
      ElementsAre(2, 5, 8, 1));
  // [0, 1] padded to 5: the list repeats as often as needed.
  for (int64_t rank = 0; rank < 5; ++rank) {
    EXPECT_THAT(
        DistributedSampler(2, 5, rank, false).indices(0),
        ElementsAre(rank % 2));
  }
  EXPECT_THAT(
      DistributedSampler(10, 3, 1, false, 0, /*drop_last=*/true).indices(0),
      ElementsAre(1, 4, 7));
}

TEST(DistributedSampler, SizesFollowPyTorchArithmetic) {
  EXPECT_EQ(DistributedSampler(10, 3, 0).size(), 4);
  EXPECT_EQ(DistributedSampler(10, 3, 0).total_size(), 12);
  EXPECT_EQ(DistributedSampler(10, 3, 0, true, 0, true).size(), 3);
  EXPECT_EQ(DistributedSampler(10, 3, 0, true, 0, true).total_size(), 9);
  EXPECT_EQ(DistributedSampler(12, 4, 3, true, 0, true).size(), 3);
  EXPECT_EQ(DistributedSampler(3, 8, 7, true, 0, true).size(), 0);
  EXPECT_EQ(DistributedSampler(3, 8, 7).size(), 1);
  EXPECT_EQ(DistributedSampler(0, 2, 1).size(), 0);
}

TEST(DistributedSampler, RanksTogetherCoverEveryIndex) {
  for (int64_t n = 0; n <= 13; ++n) {
    for (int64_t replicas = 1; replicas <= 5; ++replicas) {
      for (bool drop_last : {false, true}) {
        std::vector<int64_t> all;
        for (int64_t rank = 0; rank < replicas; ++rank) {
          const DistributedSampler sampler(
              n, replicas, rank, true, 3, drop_last);
          const auto indices = sampler.indices(1);
          EXPECT_EQ(static_cast<int64_t>(indices.size()), sampler.size());
          all.insert(all.end(), indices.begin(), indices.end());
        }
        const std::set<int64_t> distinct(all.begin(), all.end());
        if (drop_last) {
          // Disjoint shares of floor(n / replicas) * replicas indices.
          EXPECT_EQ(all.size(), distinct.size());
          EXPECT_EQ(static_cast<int64_t>(all.size()), n / replicas * replicas);
        } else {
          EXPECT_EQ(static_cast<int64_t>(distinct.size()), n)
              << "n=" << n << " replicas=" << replicas;
          EXPECT_LT(all.size(), static_cast<size_t>(n + replicas));
        }
        for (int64_t index : all) {
          EXPECT_TRUE(index >= 0 && index < n);
        }
      }
    }
  }
}

TEST(DistributedSampler, ShufflesDifferentlyEachEpochAndSeed) {
  const DistributedSampler sampler(100, 2, 1, true, 0);
  EXPECT_EQ(sampler.indices(3), sampler.indices(3));
  EXPECT_NE(sampler.indices(0), sampler.indices(1));
  EXPECT_NE(
      sampler.indices(0), DistributedSampler(100, 2, 1, true, 9).indices(0));
}

TEST(BatchSampler, SplitsLikePyTorch) {
  for (const Case& c : reference_cases("batch")) {
    const BatchSampler batch_sampler(
        std::make_shared<SequentialSampler>(c.integer("n")),
        c.integer("batch_size"),
        c.flag("drop_last"));
    const auto batches = batch_sampler.batches(c.integer("epoch"));
    std::vector<int64_t> sizes, flat;
    for (const auto& batch : batches) {
      sizes.push_back(static_cast<int64_t>(batch.size()));
      flat.insert(flat.end(), batch.begin(), batch.end());
    }
    EXPECT_EQ(sizes, c.list<int64_t>("sizes")) << c.line;
    EXPECT_EQ(flat, c.expected) << c.line;
    EXPECT_EQ(batch_sampler.size(), static_cast<int64_t>(batches.size()));
  }
}

TEST(BatchSampler, SizesAndDropLastFollowTheSampler) {
  for (int64_t n = 1; n <= 12; ++n) {
    for (int64_t batch_size = 1; batch_size <= 5; ++batch_size) {
      for (bool drop_last : {false, true}) {
        auto sampler =
            std::make_shared<RandomSampler>(n, false, std::nullopt, 4);
        const BatchSampler batch_sampler(sampler, batch_size, drop_last);
        const auto batches = batch_sampler.batches(2);
        ASSERT_EQ(static_cast<int64_t>(batches.size()), batch_sampler.size());
        const int64_t total = sampler->size();
        EXPECT_EQ(
            batch_sampler.size(),
            drop_last ? total / batch_size
                      : (total + batch_size - 1) / batch_size);
        std::vector<int64_t> flat;
        for (size_t b = 0; b < batches.size(); ++b) {
          if (drop_last || b + 1 < batches.size()) {
            EXPECT_EQ(static_cast<int64_t>(batches[b].size()), batch_size);
          }
          flat.insert(flat.end(), batches[b].begin(), batches[b].end());
        }
        auto indices = sampler->indices(2);
        indices.resize(flat.size());
        EXPECT_EQ(flat, indices);
      }
    }
  }
}

TEST(BatchSampler, EmptySamplerGivesNoBatches) {
  const BatchSampler batch_sampler(
      std::make_shared<SubsetRandomSampler>(std::vector<int64_t>{}), 4, false);
  EXPECT_EQ(batch_sampler.size(), 0);
  EXPECT_THAT(batch_sampler.batches(0), IsEmpty());
}

TEST(BatchSampler, ExposesItsOptions) {
  auto sampler = std::make_shared<SequentialSampler>(7);
  const BatchSampler batch_sampler(sampler, 3, true);
  EXPECT_EQ(&batch_sampler.sampler(), sampler.get());
  EXPECT_EQ(batch_sampler.batch_size(), 3);
  EXPECT_TRUE(batch_sampler.drop_last());
}

// A sampler of the user's own: `order` rotated left by the epoch.
class Rotating final : public Sampler {
 public:
  explicit Rotating(std::vector<int64_t> order) : order_(std::move(order)) {}
  std::vector<int64_t> indices(int64_t epoch) const override {
    std::vector<int64_t> out = order_;
    if (!out.empty()) {
      std::rotate(
          out.begin(),
          out.begin() + epoch % static_cast<int64_t>(out.size()),
          out.end());
    }
    return out;
  }
  int64_t size() const override {
    return static_cast<int64_t>(order_.size());
  }

 private:
  std::vector<int64_t> order_;
};

TEST(DistributedSamplerWrapper, TakesEveryRanksPositionOfTheWrappedEpoch) {
  auto inner = std::make_shared<Rotating>(std::vector<int64_t>{7, 3, 9, 1, 5});
  // Training: [7 3 9 1 5] padded with its start to [7 3 9 1 5 7].
  EXPECT_THAT(
      DistributedSamplerWrapper(inner, 2, 0).indices(0), ElementsAre(7, 9, 5));
  EXPECT_THAT(
      DistributedSamplerWrapper(inner, 2, 1).indices(0), ElementsAre(3, 1, 7));
  // Evaluation: every index once.
  EXPECT_THAT(
      DistributedSamplerWrapper(inner, 2, 1, false).indices(0),
      ElementsAre(3, 1));
  EXPECT_EQ(DistributedSamplerWrapper(inner, 2, 1, false).size(), 2);
  // The wrapped sampler's epoch: [3 9 1 5 7] in epoch 1.
  EXPECT_THAT(
      DistributedSamplerWrapper(inner, 2, 0).indices(1), ElementsAre(3, 1, 7));
  // Fewer indices than ranks: the list repeats as often as needed.
  auto two = std::make_shared<Rotating>(std::vector<int64_t>{4, 6});
  for (int64_t rank = 0; rank < 5; ++rank) {
    EXPECT_THAT(
        DistributedSamplerWrapper(two, 5, rank).indices(0),
        ElementsAre(rank % 2 == 0 ? 4 : 6));
  }
}

TEST(DistributedSamplerWrapper, SplitsAsDistributedSamplerSplitsTheDataset) {
  // Lightning's wrapper is a DistributedSampler without shuffling over the
  // wrapped sampler's list: position for position the same split.
  for (int64_t n = 0; n <= 11; ++n) {
    std::vector<int64_t> order;
    for (int64_t i = n; i > 0; --i) {
      order.push_back(10 * i + 3);
    }
    auto wrapped = std::make_shared<Rotating>(order);
    const std::vector<int64_t> list = wrapped->indices(3);
    for (int64_t replicas = 1; replicas <= 4; ++replicas) {
      for (int64_t rank = 0; rank < replicas; ++rank) {
        for (bool pad : {true, false}) {
          const DistributedSamplerWrapper share(wrapped, replicas, rank, pad);
          std::vector<int64_t> expected;
          const std::vector<int64_t> positions =
              pad ? DistributedSampler(n, replicas, rank, false).indices(3)
                  : ShardSampler(n, replicas, rank).indices(3);
          for (int64_t position : positions) {
            expected.push_back(list[static_cast<size_t>(position)]);
          }
          EXPECT_EQ(share.indices(3), expected)
              << "n=" << n << " replicas=" << replicas << " rank=" << rank
              << " pad=" << pad;
          EXPECT_EQ(share.size(), static_cast<int64_t>(expected.size()));
        }
      }
    }
  }
}

// A batch sampler of the user's own: fixed batches of varying size.
class FixedBatches final : public BatchSamplerBase {
 public:
  explicit FixedBatches(
      std::vector<std::vector<int64_t>> batches, int64_t size = -1)
      : batches_(std::move(batches)),
        size_(size < 0 ? static_cast<int64_t>(batches_.size()) : size) {}
  std::vector<std::vector<int64_t>> batches(int64_t /*epoch*/) const override {
    return batches_;
  }
  int64_t size() const override {
    return size_;
  }

 private:
  std::vector<std::vector<int64_t>> batches_;
  int64_t size_;
};

std::vector<std::vector<int64_t>> five_batches() {
  return {{0, 1}, {2}, {3, 4, 5}, {6}, {7, 8}};
}

TEST(DistributedBatchSampler, TakesEveryRanksBatchPaddedWithTheFirstOnes) {
  using Batches = std::vector<std::vector<int64_t>>;
  auto inner = std::make_shared<FixedBatches>(five_batches());
  const DistributedBatchSampler rank0(inner, 2, 0);
  const DistributedBatchSampler rank1(inner, 2, 1);
  EXPECT_EQ(rank0.batches(0), (Batches{{0, 1}, {3, 4, 5}, {7, 8}}));
  // Batches 1 and 3, then batch 5 is batch 0 again: both ranks take 3.
  EXPECT_EQ(rank1.batches(0), (Batches{{2}, {6}, {0, 1}}));
  EXPECT_EQ(rank0.size(), 3);
  EXPECT_EQ(rank1.size(), 3);
  const DistributedBatchSampler unpadded(inner, 2, 1, /*pad=*/false);
  EXPECT_EQ(unpadded.batches(0), (Batches{{2}, {6}}));
  EXPECT_EQ(unpadded.size(), 2);
  EXPECT_EQ(
      DistributedBatchSampler(inner, 3, 2, false).batches(0),
      (Batches{{3, 4, 5}}));
  EXPECT_EQ(&rank1.batch_sampler(), inner.get());
}

TEST(DistributedBatchSampler, NamesAMiscountOrAnEmptyBatchOfTheWrappedOne) {
  // The split would hide both: 4 batches said, 5 given, gives 2 each.
  const DistributedBatchSampler miscounted(
      std::make_shared<FixedBatches>(five_batches(), 4), 2, 0);
  try {
    miscounted.batches(2);
    ADD_FAILURE() << "expected a DataError";
  } catch (const DataError& error) {
    EXPECT_STREQ(
        error.what(),
        "the batch sampler gave 5 batches for epoch 2 but its size() is 4; "
        "the loader's length comes from size()");
  }
  auto batches = five_batches();
  batches[3].clear();
  const DistributedBatchSampler with_empty(
      std::make_shared<FixedBatches>(batches), 2, 0);
  try {
    with_empty.batches(0);
    ADD_FAILURE() << "expected a DataError";
  } catch (const DataError& error) {
    EXPECT_STREQ(
        error.what(),
        "the batch sampler's batch 3 of epoch 0 is empty; every batch needs "
        "at least one sample index");
  }
}

TEST(LengthGroupedSampler, MatchesTheReferenceGrouping) {
  for (const Case& c : reference_cases("length_grouped")) {
    std::optional<int64_t> mult;
    if (c.has("mega_batch_mult")) {
      mult = c.integer("mega_batch_mult");
    }
    const LengthGroupedSampler sampler(
        c.list<int64_t>("lengths"), c.integer("batch_size"), c.seed(), mult);
    EXPECT_EQ(sampler.indices(c.integer("epoch")), c.expected) << c.line;
    EXPECT_EQ(sampler.size(), static_cast<int64_t>(c.expected.size()));
  }
}

TEST(LengthGroupedSampler, BatchesSamplesOfSimilarLengthLongestFirst) {
  // 400 samples of lengths 1..400 in a scrambled order.
  std::vector<int64_t> lengths(400);
  for (int64_t i = 0; i < 400; ++i) {
    lengths[static_cast<size_t>(i)] = (i * 7919) % 400 + 1;
  }
  const LengthGroupedSampler sampler(lengths, 8, /*seed=*/3);
  EXPECT_EQ(sampler.megabatch_size(), 8 * 12); // 400 / 32 = 12
  const std::vector<int64_t> order = sampler.indices(0);
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> all(400);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(sorted, all); // each index once
  EXPECT_EQ(lengths[static_cast<size_t>(order[0])], 400);
  // Padding to each batch's longest: far less than with a random order.
  auto padding = [&](const std::vector<int64_t>& indices) {
    int64_t pad = 0;
    for (size_t start = 0; start < indices.size(); start += 8) {
      int64_t longest = 0;
      int64_t sum = 0;
      for (size_t k = start; k < start + 8; ++k) {
        const int64_t length = lengths[static_cast<size_t>(indices[k])];
        longest = std::max(longest, length);
        sum += length;
      }
      pad += 8 * longest - sum;
    }
    return pad;
  };
  const int64_t grouped = padding(order);
  const int64_t random =
      padding(RandomSampler(400, false, std::nullopt, 3).indices(0));
  EXPECT_LT(grouped * 5, random) << grouped << " against " << random;
  EXPECT_NE(sampler.indices(1), order); // a new order every epoch
  // The default megabatch: n / (4 batch_size), within [1, 50].
  EXPECT_EQ(LengthGroupedSampler(lengths, 1).megabatch_size(), 50);
  EXPECT_EQ(LengthGroupedSampler(lengths, 200).megabatch_size(), 200);
  EXPECT_EQ(LengthGroupedSampler(lengths, 8, 0, 3).megabatch_size(), 24);
}

TEST(Samplers, InvalidArgumentsNameTheArgumentAndValue) {
  expect_config_error(
      [] {
        LengthGroupedSampler({3, 1}, 0);
      },
      "LengthGroupedSampler: batch_size should be a positive integer value, "
      "but got batch_size=0");
  expect_config_error(
      [] {
        LengthGroupedSampler({3, 1}, 2, 0, 0);
      },
      "LengthGroupedSampler: mega_batch_mult should be positive, got 0");
  expect_config_error(
      [] {
        LengthGroupedSampler({3, -1}, 2);
      },
      "LengthGroupedSampler: lengths[1] is -1, expected a length >= 0");
  expect_config_error(
      [] { SequentialSampler(-1); },
      "n should be a non-negative integer value, but got n=-1");

  expect_config_error(
      [] { RandomSampler(-2); },
      "n should be a non-negative integer value, but got n=-2");
  expect_config_error(
      [] { RandomSampler(0); },
      "num_samples should be a positive integer value, but got "
      "num_samples=0");
  expect_config_error(
      [] { RandomSampler(5, false, 0); },
      "num_samples should be a positive integer value, but got "
      "num_samples=0");
  expect_config_error(
      [] { RandomSampler(5, true, -3); },
      "num_samples should be a positive integer value, but got "
      "num_samples=-3");
  expect_config_error(
      [] { RandomSampler(0, true, 4); },
      "cannot draw num_samples=4 samples from an empty data source (n=0)");

  expect_config_error(
      [] {
        WeightedRandomSampler({1, 2}, 0);
      },
      "num_samples should be a positive integer value, but got "
      "num_samples=0");
  expect_config_error(
      [] {
        WeightedRandomSampler({1, -0.5}, 3);
      },
      "weights should be non-negative and finite, but got weights[1]=-0.5");
  expect_config_error(
      [] {
        WeightedRandomSampler({std::numeric_limits<double>::infinity(), 1}, 3);
      },
      "weights should be non-negative and finite, but got weights[0]=inf");
  expect_config_error(
      [] {
        WeightedRandomSampler({1, std::numeric_limits<double>::quiet_NaN()}, 3);
      },
      "weights should be non-negative and finite, but got weights[1]=nan");
  expect_config_error(
      [] {
        WeightedRandomSampler({0, 0}, 3);
      },
      "weights should have a positive, finite sum, but got sum=0");
  expect_config_error(
      [] { WeightedRandomSampler({}, 1); },
      "weights should have a positive, finite sum, but got sum=0");
  expect_config_error(
      [] {
        WeightedRandomSampler({1e308, 1e308}, 1);
      },
      "weights should have a positive, finite sum, but got sum=inf");
  expect_config_error(
      [] {
        WeightedRandomSampler({1, 2, 3}, 4, false);
      },
      "cannot draw num_samples=4 samples without replacement from 3 "
      "weights");

  expect_config_error(
      [] { DistributedSampler(-1, 2, 0); },
      "n should be a non-negative integer value, but got n=-1");
  expect_config_error(
      [] { DistributedSampler(10, 0, 0); },
      "num_replicas should be a positive integer value, but got "
      "num_replicas=0");
  expect_config_error(
      [] { DistributedSampler(10, 3, 3); },
      "Invalid rank 3, rank should be in the interval [0, 2]");
  expect_config_error(
      [] { DistributedSampler(10, 3, -1); },
      "Invalid rank -1, rank should be in the interval [0, 2]");

  expect_config_error(
      [] { DistributedSamplerWrapper(nullptr, 2, 0); },
      "DistributedSamplerWrapper: expected a sampler, got a null pointer");
  expect_config_error(
      [] {
        DistributedSamplerWrapper(std::make_shared<SequentialSampler>(4), 2, 2);
      },
      "DistributedSamplerWrapper: expected 0 <= rank < num_replicas, got "
      "rank 2 of 2");
  expect_config_error(
      [] { DistributedBatchSampler(nullptr, 2, 0); },
      "DistributedBatchSampler: expected a batch sampler, got a null pointer");
  expect_config_error(
      [] {
        DistributedBatchSampler(
            std::make_shared<FixedBatches>(five_batches()), 0, 0);
      },
      "DistributedBatchSampler: expected 0 <= rank < num_replicas, got "
      "rank 0 of 0");

  expect_config_error(
      [] { BatchSampler(nullptr, 2, false); },
      "sampler should be a Sampler, but got a null pointer");
  expect_config_error(
      [] { BatchSampler(std::make_shared<SequentialSampler>(4), 0, false); },
      "batch_size should be a positive integer value, but got batch_size=0");
  expect_config_error(
      [] { BatchSampler(std::make_shared<SequentialSampler>(4), -2, true); },
      "batch_size should be a positive integer value, but got "
      "batch_size=-2");
}

} // namespace
} // namespace hotloop::data
