#include "hotloop/core/error.h"
#include "hotloop/data/concat_dataset.h"
#include "hotloop/data/dataloader.h"
#include "hotloop/data/iterable_dataset.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

namespace hotloop::data {
namespace {

// tests/reference/make_iterable_reference.py's dataset: worker w's stream
// of epoch e yields lengths[w] samples, sample k with target
// 1000 e + 100 w + k and input [target, -target]. Options for the tests
// here: a worker whose reads are slow, a sample that throws, a sample of
// the wrong shape, a stream that never ends.
struct StreamsOptions {
  std::vector<int64_t> lengths;
  bool sized = true;
  int64_t offset = 0;                      // added to every target
  c10::ScalarType spec_dtype = at::kFloat; // the input dtype spec() says
  int64_t slow_worker = -1;
  int64_t fail_at = -1;      // target value whose read throws
  int64_t misshapen_at = -1; // target value given as a [3] input
  int64_t fail_open_worker = -1;
  bool endless = false;
};

class Streams : public IterableDataset {
 public:
  explicit Streams(StreamsOptions options) : options_(std::move(options)) {}

  SampleSpec spec() const override {
    return SampleSpec{{2}, options_.spec_dtype, {}, at::kLong};
  }
  std::optional<int64_t> size() const override {
    if (!options_.sized) {
      return std::nullopt;
    }
    int64_t total = 0;
    for (int64_t n : options_.lengths) {
      total += n;
    }
    return total;
  }
  std::unique_ptr<SampleStream> stream(
      const StreamContext& context) const override {
    ++opened;
    contexts_seen.store(contexts_seen.load() | (1 << context.worker_id));
    if (context.worker_id == options_.fail_open_worker) {
      throw DataError("cannot reach the simulator");
    }
    return std::make_unique<Reader>(options_, context);
  }

  mutable std::atomic<int> opened{0};
  mutable std::atomic<int> contexts_seen{0};

 private:
  class Reader : public SampleStream {
   public:
    Reader(const StreamsOptions& options, const StreamContext& context)
        : options_(options), context_(context) {}
    std::optional<Example> next() override {
      const int64_t w = context_.worker_id;
      if (!options_.endless &&
          k_ >= options_.lengths.at(static_cast<size_t>(w))) {
        return std::nullopt;
      }
      if (options_.endless && k_ > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      }
      if (w == options_.slow_worker) {
        std::this_thread::sleep_for(std::chrono::milliseconds(15));
      }
      const int64_t t =
          options_.offset + 1000 * context_.epoch + 100 * w + k_++;
      if (t == options_.fail_at) {
        throw std::runtime_error("sensor " + std::to_string(t) + " is off");
      }
      const auto v = static_cast<float>(t);
      return Example{
          t == options_.misshapen_at ? at::tensor({v, -v, v})
                                     : at::tensor({v, -v}),
          at::scalar_tensor(t, at::kLong)};
    }

   private:
    const StreamsOptions& options_;
    StreamContext context_;
    int64_t k_ = 0;
  };

  StreamsOptions options_;
};

std::vector<std::vector<int64_t>> epoch_targets(DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (auto& batch : loader) {
    const at::Tensor t = batch.target.contiguous();
    out.emplace_back(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
    EXPECT_TRUE(batch.input.select(-1, 0).equal(batch.target.to(at::kFloat)))
        << batch.input;
    EXPECT_TRUE(batch.input.select(-1, 1).equal(-batch.target.to(at::kFloat)));
  }
  return out;
}

struct ReferenceCase {
  std::string line;
  std::string name;
  int64_t workers = 0;
  std::optional<int64_t> batch_size;
  bool drop_last = false;
  int64_t prefetch = 0;
  int64_t epoch = 0;
  std::vector<int64_t> lengths;
  int64_t len = 0;
  std::vector<std::vector<int64_t>> batches;
};

std::vector<ReferenceCase> reference_cases() {
  const std::string path =
      std::string(HOTLOOP_TEST_REFERENCE_DIR) + "/iterable_loader.txt";
  std::ifstream in(path);
  if (!in) {
    throw std::runtime_error("cannot open reference file " + path);
  }
  std::vector<ReferenceCase> cases;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string kind;
    fields >> kind;
    if (kind == "case") {
      ReferenceCase c;
      c.line = line;
      std::string key, batch_size, lengths;
      fields >> c.name >> key >> c.workers >> key >> batch_size >> key >>
          c.drop_last >> key >> c.prefetch >> key >> c.epoch >> key >>
          lengths >> key >> c.len;
      if (batch_size != "none") {
        c.batch_size = std::stoll(batch_size);
      }
      std::istringstream items(lengths);
      for (std::string item; std::getline(items, item, ',');) {
        c.lengths.push_back(std::stoll(item));
      }
      cases.push_back(std::move(c));
    } else if (kind == "batch") {
      std::vector<int64_t> batch;
      for (int64_t t = 0; fields >> t;) {
        batch.push_back(t);
      }
      cases.back().batches.push_back(std::move(batch));
    }
  }
  if (cases.empty()) {
    throw std::runtime_error("no cases in " + path);
  }
  return cases;
}

DataLoaderOptions options_of(const ReferenceCase& c) {
  DataLoaderOptions options;
  options.batch_size(c.batch_size)
      .drop_last(c.drop_last)
      .num_workers(c.workers);
  if (c.prefetch > 0) {
    options.prefetch_factor(c.prefetch);
  }
  return options;
}

TEST(IterableLoader, GivesPyTorchsBatchesInPyTorchsOrder) {
  for (const ReferenceCase& c : reference_cases()) {
    SCOPED_TRACE(c.line);
    DataLoader loader(
        std::make_shared<Streams>(StreamsOptions{c.lengths}), options_of(c));
    EXPECT_EQ(loader.num_batches(), c.len);
    EXPECT_EQ(loader.length(), c.len);
    // Again and again: worker timing must not change the order.
    for (int round = 0; round < 3; ++round) {
      loader.set_epoch(c.epoch);
      EXPECT_EQ(epoch_targets(loader), c.batches) << "round " << round;
    }
  }
}

TEST(IterableLoader, ASlowWorkerDelaysButDoesNotReorder) {
  for (const ReferenceCase& c : reference_cases()) {
    if (c.workers < 2) {
      continue;
    }
    SCOPED_TRACE(c.line);
    StreamsOptions streams{c.lengths};
    streams.slow_worker = 0;
    DataLoader loader(std::make_shared<Streams>(streams), options_of(c));
    loader.set_epoch(c.epoch);
    EXPECT_EQ(epoch_targets(loader), c.batches);
  }
}

TEST(IterableLoader, EachEpochOpensNewStreamsWithItsNumber) {
  for (const bool persistent : {false, true}) {
    SCOPED_TRACE(persistent ? "persistent workers" : "workers per epoch");
    const auto streams = std::make_shared<Streams>(StreamsOptions{{3, 2}});
    std::atomic<int> inits{0};
    DataLoader loader(
        streams,
        DataLoaderOptions(2)
            .num_workers(2)
            .persistent_workers(persistent)
            .worker_init_fn([&](int64_t) { ++inits; }));
    const std::vector<std::vector<int64_t>> epoch0{
        {0, 1}, {100, 101}, {2}}; // worker 0: 0 1 2; worker 1: 100 101
    const std::vector<std::vector<int64_t>> epoch1{
        {1000, 1001}, {1100, 1101}, {1002}};
    EXPECT_EQ(epoch_targets(loader), epoch0);
    EXPECT_EQ(epoch_targets(loader), epoch1);
    EXPECT_EQ(streams->opened.load(), 4);
    EXPECT_EQ(streams->contexts_seen.load(), 0b11);
    // As PyTorch's: persistent workers start (and run worker_init_fn) once.
    EXPECT_EQ(inits.load(), persistent ? 2 : 4);
  }
}

TEST(IterableLoader, AnEpochLeftEarlyLeavesNothingToTheNext) {
  for (const auto& [workers, persistent] :
       std::vector<std::pair<int64_t, bool>>{
           {0, false}, {2, false}, {2, true}}) {
    SCOPED_TRACE(hotloop::detail::str_cat(workers, " ", persistent));
    DataLoader loader(
        std::make_shared<Streams>(StreamsOptions{{7, 4}}),
        DataLoaderOptions(3).num_workers(workers).persistent_workers(
            persistent));
    auto it = loader.begin();
    ++it;
    const at::Tensor kept = it->target.clone();
    EXPECT_EQ(kept[0].item<int64_t>(), workers == 0 ? 3 : 100);
    // Epoch 1 from its start, whatever epoch 0 had ready.
    const std::vector<std::vector<int64_t>> epoch1 =
        workers == 0
            ? std::vector<std::vector<
                  int64_t>>{{1000, 1001, 1002}, {1003, 1004, 1005}, {1006}}
            : std::vector<std::vector<int64_t>>{
                  {1000, 1001, 1002},
                  {1100, 1101, 1102},
                  {1003, 1004, 1005},
                  {1103},
                  {1006}};
    EXPECT_EQ(epoch_targets(loader), epoch1);
  }
}

TEST(IterableLoader, AResumedEpochGivesTheBatchesTheStoppedOneWouldHave) {
  for (const int64_t workers : {0, 3}) {
    SCOPED_TRACE(workers);
    const auto streams = std::make_shared<Streams>(StreamsOptions{{9, 5, 1}});
    const DataLoaderOptions options = DataLoaderOptions(2).num_workers(workers);
    DataLoader whole(streams, options);
    whole.set_epoch(4);
    const std::vector<std::vector<int64_t>> all = epoch_targets(whole);

    DataLoader stopped(streams, options);
    stopped.set_epoch(4);
    auto it = stopped.begin(); // batch 0 handed out
    ++it;
    ++it; // batch 2: three handed out
    const DataLoaderState state = stopped.state_dict();
    EXPECT_EQ(state.epoch, 4);
    EXPECT_EQ(state.batches_consumed, 3);

    DataLoader resumed(streams, options);
    resumed.load_state_dict(state);
    const std::vector<std::vector<int64_t>> rest = epoch_targets(resumed);
    EXPECT_EQ(
        rest, std::vector<std::vector<int64_t>>(all.begin() + 3, all.end()));
    // The next epoch is whole again.
    EXPECT_EQ(resumed.state_dict().epoch, 5);
    EXPECT_EQ(epoch_targets(resumed).size(), all.size());
  }
}

TEST(IterableLoader, ACollateGetsEachStreamsSamples) {
  std::vector<int64_t> sizes;
  DataLoader loader(
      std::make_shared<Streams>(StreamsOptions{{5}}),
      DataLoaderOptions(2).collate([&](std::vector<Example> samples) {
        sizes.push_back(static_cast<int64_t>(samples.size()));
        std::vector<at::Tensor> inputs, targets;
        for (const Example& s : samples) {
          inputs.push_back(s.input * 2);
          targets.push_back(s.target);
        }
        return Batch{at::stack(inputs), at::stack(targets)};
      }));
  std::vector<int64_t> firsts;
  for (auto& batch : loader) {
    firsts.push_back(batch.input[0][0].item<int64_t>());
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(firsts, (std::vector<int64_t>{0, 4, 8}));
}

TEST(IterableLoader, AnUnknownSizeLeavesTheLengthUnknownAndTheEpochWhole) {
  StreamsOptions unsized{{4, 3}};
  unsized.sized = false;
  DataLoader loader(
      std::make_shared<Streams>(unsized), DataLoaderOptions(2).num_workers(2));
  EXPECT_FALSE(loader.length().has_value());
  EXPECT_FALSE(loader.dataset_size().has_value());
  EXPECT_THROWS_WITH(
      ConfigError, loader.num_batches(), "does not know its size");
  EXPECT_EQ(
      epoch_targets(loader),
      (std::vector<std::vector<int64_t>>{{0, 1}, {100, 101}, {2, 3}, {102}}));
  EXPECT_THROWS_WITH(ConfigError, loader.dataset(), "IterableDataset");
  EXPECT_EQ(loader.dataset_ptr(), nullptr);
}

TEST(IterableLoader, RefusesWhatAStreamCannotHaveInPyTorchsWords) {
  const auto streams = std::make_shared<Streams>(StreamsOptions{{4}});
  EXPECT_THROWS_WITH(
      ConfigError,
      DataLoader(streams, DataLoaderOptions(2).shuffle(true)),
      "DataLoader with IterableDataset: expected unspecified shuffle option");
  EXPECT_THROWS_WITH(
      ConfigError,
      DataLoader(
          streams,
          DataLoaderOptions(2).sampler(std::make_shared<SequentialSampler>(4))),
      "expected unspecified sampler option");
  EXPECT_THROWS_WITH(
      ConfigError,
      DataLoader(
          streams,
          DataLoaderOptions().batch_sampler(std::make_shared<BatchSampler>(
              std::make_shared<SequentialSampler>(4), 2, false))),
      "expected unspecified batch_sampler option");
  EXPECT_THROWS_WITH(
      ConfigError,
      DataLoader(
          streams,
          DataLoaderOptions().batch_size(std::nullopt).drop_last(true)),
      "batch_size=None");
  EXPECT_THROWS_WITH(
      ConfigError,
      DataLoader(streams, DataLoaderOptions(2).prefetch_factor(2)),
      "prefetch_factor option needs num_workers > 0");
  EXPECT_THROWS_WITH(
      ConfigError,
      DataLoader(
          std::shared_ptr<const IterableDataset>(), DataLoaderOptions(2)),
      "DataLoader needs a dataset");
}

// Says who reads it: sample k (of 2) of a stream has target 1000 readers()
// + 100 reader() + k; ten samples in all, by size().
class WhoReads : public IterableDataset {
 public:
  SampleSpec spec() const override {
    return SampleSpec{{2}, at::kFloat, {}, at::kLong};
  }
  std::optional<int64_t> size() const override {
    return 10;
  }
  std::unique_ptr<SampleStream> stream(
      const StreamContext& context) const override {
    return std::make_unique<Reader>(context);
  }
  bool splits_by_process() const override {
    return true;
  }

 private:
  class Reader : public SampleStream {
   public:
    explicit Reader(const StreamContext& context)
        : first_(1000 * context.readers() + 100 * context.reader()) {}
    std::optional<Example> next() override {
      if (k_ == 2) {
        return std::nullopt;
      }
      const int64_t t = first_ + k_++;
      const auto v = static_cast<float>(t);
      return Example{at::tensor({v, -v}), at::scalar_tensor(t, at::kLong)};
    }

   private:
    int64_t first_;
    int64_t k_ = 0;
  };
};

TEST(IterableLoader, AProcesssShareTellsItsStreamsTheProcessAndCountsItsPart) {
  DataLoader loader(
      std::make_shared<WhoReads>(), DataLoaderOptions(2).num_workers(2));
  // Alone: rank 0 of 1, so the readers are the workers.
  EXPECT_EQ(
      epoch_targets(loader),
      (std::vector<std::vector<int64_t>>{{2000, 2001}, {2100, 2101}}));
  // Rank 1 of 3, two workers each: readers 2 and 3 of 6.
  for (const bool training : {true, false}) {
    const std::unique_ptr<DataLoader> share = shard(loader, 3, 1, training);
    ASSERT_TRUE(share->iterable());
    EXPECT_EQ(share->dataset_size(), 4); // 10 / 3, rounded up
    EXPECT_EQ(share->length(), 2);
    EXPECT_EQ(share->options().num_workers(), 2);
    EXPECT_EQ(
        epoch_targets(*share),
        (std::vector<std::vector<int64_t>>{{6200, 6201}, {6300, 6301}}));
  }
  EXPECT_THROWS_WITH(
      ConfigError,
      shard(loader, 2, 2, /*training=*/true),
      "a data-parallel share needs 0 <= rank < num_replicas, got rank 2 of 2");
  // A share is kept for its own process, refused for another.
  const std::unique_ptr<DataLoader> share = shard(loader, 3, 1, true);
  const std::unique_ptr<DataLoader> again = shard(*share, 3, 1, true);
  EXPECT_EQ(again->dataset_size(), 4);
  EXPECT_EQ(
      epoch_targets(*again),
      (std::vector<std::vector<int64_t>>{{6200, 6201}, {6300, 6301}}));
  EXPECT_THROWS_WITH(
      ConfigError,
      shard(*share, 3, 2, true),
      "the loader's dataset is the share of rank 1 of 3, but this process is "
      "rank 2 of 3");
  // A dataset that does not say it splits by process would give every
  // process the same samples.
  DataLoader unsplit(
      std::make_shared<Streams>(StreamsOptions{{4}}), DataLoaderOptions(2));
  EXPECT_THROWS_WITH(
      ConfigError,
      shard(unsplit, 2, 0, /*training=*/true),
      "the loader's IterableDataset does not split its samples among the 2 "
      "processes of a data-parallel run, so each would read them all");
}

TEST(IterableLoader, AStreamsErrorNamesTheWorkerTheBatchAndTheEpoch) {
  for (const int64_t workers : {0, 2}) {
    SCOPED_TRACE(workers);
    StreamsOptions failing{{6, 6}};
    failing.fail_at = workers == 0 ? 3 : 103;
    DataLoader loader(
        std::make_shared<Streams>(failing),
        DataLoaderOptions(2).num_workers(workers));
    std::vector<int64_t> seen;
    try {
      for (auto& batch : loader) {
        seen.push_back(batch.target[0].item<int64_t>());
      }
      ADD_FAILURE() << "no error";
    } catch (const DataError& e) {
      EXPECT_THAT(
          e.what(),
          ::testing::HasSubstr(
              workers == 0 ? "batch 1 of the stream (epoch 0): sensor 3 is off"
                           : "batch 1 of worker 1's stream (epoch 0): sensor "
                             "103 is off"));
    }
    // Everything before the failing batch came, in order.
    const std::vector<int64_t> before = workers == 0
                                            ? std::vector<int64_t>{0}
                                            : std::vector<int64_t>{0, 100, 2};
    EXPECT_EQ(seen, before);
  }
}

TEST(IterableLoader, AStreamThatFailedIsNotReadAgain) {
  StreamsOptions failing{{8}};
  failing.fail_at = 3;
  DataLoader loader(std::make_shared<Streams>(failing), DataLoaderOptions(2));
  auto it = loader.begin();
  EXPECT_THROWS_WITH(DataError, ++it, "sensor 3 is off");
  ++it; // the epoch ended with the error
  EXPECT_TRUE(it == loader.end());
  // The next epoch opens a new stream.
  EXPECT_EQ(
      epoch_targets(loader),
      (std::vector<std::vector<int64_t>>{
          {1000, 1001}, {1002, 1003}, {1004, 1005}, {1006, 1007}}));
}

TEST(IterableLoader, BadSamplesAndStreamsThatCannotStartAreNamed) {
  StreamsOptions misshapen{{4}};
  misshapen.misshapen_at = 2;
  DataLoader loader(std::make_shared<Streams>(misshapen), DataLoaderOptions(2));
  EXPECT_THROWS_WITH(
      DataError,
      epoch_targets(loader),
      "batch 1 of the stream (epoch 0): sample 0 of the batch has input [3] "
      "and target [] but the dataset's spec says [2] and []");

  // A cast would hide a float target truncated to a class index.
  StreamsOptions doubles{{4}};
  doubles.spec_dtype = at::kDouble;
  DataLoader double_loader(
      std::make_shared<Streams>(doubles), DataLoaderOptions(2));
  EXPECT_THROWS_WITH(
      DataError,
      epoch_targets(double_loader),
      "batch 0 of the stream (epoch 0): sample 0 of the batch has input of "
      "Float and target of Long but the dataset's spec says Double and Long");

  StreamsOptions closed{{4, 4}};
  closed.fail_open_worker = 1;
  DataLoader two(
      std::make_shared<Streams>(closed), DataLoaderOptions(2).num_workers(2));
  EXPECT_THROWS_WITH(
      DataError,
      epoch_targets(two),
      "worker 1's stream of epoch 0 could not start: cannot reach the "
      "simulator");

  DataLoader init(
      std::make_shared<Streams>(StreamsOptions{{4}}),
      DataLoaderOptions(2).num_workers(1).worker_init_fn(
          [](int64_t) { throw std::runtime_error("no GPU for worker"); }));
  EXPECT_THROWS_WITH(
      DataError,
      epoch_targets(init),
      "worker_init_fn failed in worker 0: no GPU for worker");
}

TEST(IterableLoader, TimesOutOnAStreamThatStallsAndStillShutsDown) {
  StreamsOptions stalled{{1}};
  stalled.endless = true;
  const auto start = std::chrono::steady_clock::now();
  {
    DataLoader loader(
        std::make_shared<Streams>(stalled),
        DataLoaderOptions(1).num_workers(1).timeout(0.2));
    auto it = loader.begin(); // the first sample comes at once
    EXPECT_EQ(it->target[0].item<int64_t>(), 0);
    EXPECT_THROWS_WITH(
        Error, ++it, "DataLoader timed out after 0.2 s waiting for batch 1");
    // The stalled worker is joined once its read returns.
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(ChainDataset, EachWorkerReadsTheDatasetsStreamsOneAfterAnother) {
  StreamsOptions second{{1, 2}};
  second.offset = 50;
  const auto chain = std::make_shared<ChainDataset>(
      std::vector<std::shared_ptr<const IterableDataset>>{
          std::make_shared<Streams>(StreamsOptions{{3, 2}}),
          std::make_shared<Streams>(second)});
  EXPECT_EQ(chain->size(), 8);
  DataLoader loader(chain, DataLoaderOptions(2).num_workers(2));
  // Worker 0: 0 1 2, then 50; worker 1: 100 101, then 150 151.
  EXPECT_EQ(
      epoch_targets(loader),
      (std::vector<std::vector<int64_t>>{
          {0, 1}, {100, 101}, {2, 50}, {150, 151}}));
  DataLoader inline_loader(chain, DataLoaderOptions(3));
  inline_loader.set_epoch(2);
  EXPECT_EQ(
      epoch_targets(inline_loader),
      (std::vector<std::vector<int64_t>>{{2000, 2001, 2002}, {2050}}));

  StreamsOptions unsized{{1}};
  unsized.sized = false;
  EXPECT_EQ(
      ChainDataset({chain, std::make_shared<Streams>(unsized)}).size(),
      std::nullopt);
}

TEST(ChainDataset, RefusesNoDatasetsANullOneAndOtherSamples) {
  const auto streams = std::make_shared<Streams>(StreamsOptions{{1}});
  StreamsOptions doubles{{1}};
  doubles.spec_dtype = at::kDouble;
  EXPECT_THROWS_WITH(
      DataError, ChainDataset({}), "ChainDataset: no datasets given");
  EXPECT_THROWS_WITH(
      DataError,
      ChainDataset({streams, nullptr}),
      "ChainDataset: dataset 1 is null");
  EXPECT_THROWS_WITH(
      DataError,
      ChainDataset({streams, std::make_shared<Streams>(doubles)}),
      "ChainDataset: dataset 1's samples are input [2] Double, target [] "
      "Long, dataset 0's input [2] Float, target [] Long");
  const ChainDataset negative(
      {streams, std::make_shared<Streams>(StreamsOptions{{-3}})});
  EXPECT_THROWS_WITH(
      DataError, negative.size(), "ChainDataset: dataset 1's size() is -3");
}

} // namespace
} // namespace hotloop::data
