#include "hotloop/train/lr_finder.h"

#include "hotloop/core/error.h"
#include "test_util.h"
#include "trainer_fixture.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace hotloop::train {
namespace {

using ::hotloop::testing::Reference;
using ::testing::HasSubstr;

const Reference& reference() {
  return Reference::get("lr_find.txt");
}

TEST(LrFinder, MatchesLightningsRangeTestOnTheReferenceLosses) {
  for (const char* name :
       {"exponential", "linear", "no_early_stop", "non_finite", "too_short"}) {
    SCOPED_TRACE(name);
    const auto settings = reference().all(name, "settings").front();
    LrFinder finder(LrFinderOptions()
                        .mode(settings.name)
                        .min_lr(settings.values[0])
                        .max_lr(settings.values[1])
                        .num_training(static_cast<int64_t>(settings.values[2]))
                        .early_stop_threshold(settings.values[3]));
    const std::vector<double>& input =
        reference().one(name, "input", "losses").values;
    for (size_t step = 0; step < input.size(); ++step) {
      if (finder.record(finder.lr_at(static_cast<int64_t>(step)), input[step])) {
        break;
      }
    }
    const std::vector<double>& rates =
        reference().one(name, "rates", "all").values;
    const std::vector<double>& losses =
        reference().one(name, "losses", "all").values;
    ASSERT_EQ(finder.lrs().size(), rates.size());
    ASSERT_EQ(finder.losses().size(), losses.size());
    for (size_t i = 0; i < rates.size(); ++i) {
      EXPECT_DOUBLE_EQ(finder.lrs()[i], rates[i]) << i;
      if (std::isnan(losses[i])) {
        EXPECT_TRUE(std::isnan(finder.losses()[i])) << i;
      } else {
        EXPECT_DOUBLE_EQ(finder.losses()[i], losses[i]) << i;
      }
    }
    EXPECT_EQ(finder.stopped_early(), rates.size() < input.size());
    const auto expected = static_cast<int64_t>(
        reference().one(name, "suggestion", "index").values.front());
    const std::optional<int64_t> index = finder.suggestion_index();
    if (expected < 0) {
      EXPECT_FALSE(index.has_value());
      EXPECT_FALSE(finder.suggestion().has_value());
    } else {
      ASSERT_TRUE(index.has_value());
      EXPECT_EQ(*index, expected);
      EXPECT_EQ(*finder.suggestion(), finder.lrs()[expected]);
    }
  }
}

TEST(LrFinder, BadOptionsNameWhatIsExpected) {
  EXPECT_THROWS_WITH(
      ConfigError,
      LrFinder(LrFinderOptions().min_lr(1).max_lr(0.1)),
      "lr_find: expected 0 < min_lr < max_lr, got min_lr=1 and max_lr=0.1");
  EXPECT_THROWS_WITH(
      ConfigError,
      LrFinder(LrFinderOptions().num_training(1)),
      "lr_find: num_training must be at least 2, got 1");
  EXPECT_THROWS_WITH(
      ConfigError,
      LrFinder(LrFinderOptions().mode("cosine")),
      "lr_find: mode must be exponential or linear, got 'cosine'");
}

class LrFindTest : public TrainerTest {};

TEST_F(LrFindTest, TestsEveryRateOnTheModelThenPutsItBack) {
  auto module = make_module(7);
  data::DataLoader loader = train_loader();
  std::vector<at::Tensor> before;
  for (const at::Tensor& p : module->parameters()) {
    before.push_back(p.detach().clone());
  }
  for (const at::Tensor& b : module->buffers()) {
    before.push_back(b.detach().clone());
  }
  const RngStates rng = get_rng_states();
  std::ostringstream out;
  // 8 batches per epoch: the test runs over three epochs.
  const LrFinder finder = lr_find(
      *module,
      loader,
      options().accumulate_grad_batches(1),
      LrFinderOptions().min_lr(1e-4).max_lr(0.1).num_training(20).early_stop_threshold(0),
      &out);
  ASSERT_EQ(finder.lrs().size(), 20u);
  EXPECT_FALSE(finder.stopped_early());
  for (int64_t step = 0; step < 20; ++step) {
    EXPECT_DOUBLE_EQ(finder.lrs()[step], finder.lr_at(step));
  }
  EXPECT_DOUBLE_EQ(finder.lrs().back(), 0.1);
  for (const double loss : finder.losses()) {
    EXPECT_TRUE(std::isfinite(loss));
  }
  // The model learns as the rate rises: the smoothed loss falls.
  EXPECT_LT(finder.losses().back(), finder.losses()[1]);
  ASSERT_TRUE(finder.suggestion().has_value());
  EXPECT_GE(*finder.suggestion(), finder.lrs()[10]);
  EXPECT_THAT(out.str(), HasSubstr("lr_find: 20 steps; suggested learning rate "));

  // Nothing of the test is left: weights, buffers, generators, no files.
  size_t i = 0;
  for (const at::Tensor& p : module->parameters()) {
    EXPECT_TRUE(p.equal(before[i++]));
    EXPECT_FALSE(p.grad().defined());
  }
  for (const at::Tensor& b : module->buffers()) {
    EXPECT_TRUE(b.equal(before[i++]));
  }
  EXPECT_TRUE(get_rng_states().cpu.equal(rng.cpu));
  EXPECT_TRUE(std::filesystem::is_empty(dir_.path()));

  // A fit after it equals one without it, bit for bit.
  auto plain = make_module(7);
  data::DataLoader plain_loader = train_loader();
  Trainer(options().max_steps(5).enable_checkpointing(false).logger(false))
      .fit(*plain, plain_loader);
  set_rng_states(rng); // as make_module left the generator
  Trainer(options().max_steps(5).enable_checkpointing(false).logger(false))
      .fit(*module, loader);
  const auto a = plain->parameters();
  const auto b = module->parameters();
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_TRUE(a[k].equal(b[k])) << k;
  }
}

TEST_F(LrFindTest, ADivergingLossEndsTheTestAndTheCsvMarksTheSuggestion) {
  auto module = make_module(3);
  data::DataLoader loader = train_loader();
  const LrFinder finder = lr_find(
      *module,
      loader,
      options(),
      LrFinderOptions().min_lr(1e-4).max_lr(1e4).num_training(60));
  EXPECT_TRUE(finder.stopped_early());
  EXPECT_LT(finder.lrs().size(), 60u);
  EXPECT_GT(finder.lrs().size(), 2u);
  const std::string path = dir_.file("lr_find.csv");
  finder.write_csv(path);
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "step,lr,loss,suggested");
  int64_t rows = 0;
  int64_t marked = -1;
  while (std::getline(in, line)) {
    if (line.size() >= 2 && line.substr(line.size() - 2) == ",1") {
      marked = rows;
    }
    ++rows;
  }
  EXPECT_EQ(rows, static_cast<int64_t>(finder.lrs().size()));
  const std::optional<int64_t> index = finder.suggestion_index();
  EXPECT_EQ(marked, index ? *index : -1);
  // fast_dev_run would train a batch or two: refused.
  EXPECT_THROWS_WITH(
      ConfigError,
      lr_find(*module, loader, options().fast_dev_run(2)),
      "lr_find: trainer.fast_dev_run runs a few batches only");
}

} // namespace
} // namespace hotloop::train
