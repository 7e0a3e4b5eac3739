#include "hotloop/train/language_model.h"
#include "hotloop/data/token_dataset.h"
#include "hotloop/models/gpt.h"
#include "hotloop/train/trainer.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <fstream>

namespace hotloop::train {
namespace {

using ::hotloop::testing::TempDir;

TEST(LanguageModel, LearnsARepeatingTextAndPredictsItsNextBytes) {
  TempDir dir;
  {
    std::ofstream text(dir.file("text.txt"));
    for (int i = 0; i < 200; ++i) {
      text << "abcdefgh";
    }
  }
  auto tokens = std::make_shared<data::TokenDataset>(
      dir.file("text.txt"),
      data::TokenDatasetOptions(16).stride(4).token_bytes(1));
  seed_everything(0);
  const models::Gpt gpt(models::GptOptions()
                            .vocab_size(256)
                            .block_size(16)
                            .n_layer(1)
                            .n_head(2)
                            .n_embd(32));
  optim::OptimizerOptions adamw;
  adamw.lr = 1e-2;
  optim::SchedulerOptions none;
  none.name = "none";
  LanguageModel module(torch::nn::AnyModule(gpt), adamw, none);
  data::DataLoader train(tokens, data::DataLoaderOptions(16).shuffle(true));
  data::DataLoader val(tokens, data::DataLoaderOptions(64));
  Trainer trainer(TrainerOptions()
                      .accelerator("cpu")
                      .max_epochs(3)
                      .default_root_dir("")
                      .enable_progress_bar(false));
  const auto before = trainer.validate(module, val);
  const FitResult result = trainer.fit(module, train, &val);
  // A period-8 pattern: after one cycle of context every byte is certain.
  EXPECT_GT(before.at("val_loss"), 4.0);
  EXPECT_LT(result.metrics.at("val_loss"), 0.1);
  EXPECT_GT(result.metrics.at("val_acc"), 0.95);
  const auto predicted = trainer.predict(module, val);
  ASSERT_FALSE(predicted.empty());
  EXPECT_EQ(predicted[0].sizes(), (at::IntArrayRef{64, 16}));
  EXPECT_EQ(predicted[0].scalar_type(), at::kLong);
}

} // namespace
} // namespace hotloop::train
