#include "hotloop/train/language_model.h"
#include "hotloop/data/tensor_dataset.h"
#include "hotloop/data/token_dataset.h"
#include "hotloop/models/gpt.h"
#include "hotloop/train/trainer.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/embedding.h>

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

// Targets below 0 are left out, whether -100 or -1, by a network with a
// loss of its own (Gpt, chunked) and by one without (an embedding table's
// rows as logits), in training and in evaluation's weighted means.
TEST(LanguageModel, IgnoresNegativeTargetsInTheLossAndTheMetrics) {
  seed_everything(3);
  const at::Tensor inputs = at::randint(16, {7, 6}, at::kLong);
  at::Tensor targets = at::randint(16, {7, 6}, at::kLong);
  targets[0].slice(0, 0, 3).fill_(-100); // a prompt
  targets[1][3] = -1;
  targets[4].slice(0, 1).fill_(-100); // padding
  targets[5].slice(0, 3).fill_(-1);
  targets[6].fill_(-100); // the last batch, [6], counts nothing
  const at::Tensor counted = targets.ge(0);

  optim::OptimizerOptions adamw;
  optim::SchedulerOptions none;
  none.name = "none";
  const auto check = [&](torch::nn::AnyModule network, const char* name) {
    LanguageModel module(std::move(network), adamw, none);
    MetricCollection metrics;
    data::Batch batch;
    batch.input = inputs.slice(0, 0, 3);
    batch.target = targets.slice(0, 0, 3);
    const at::Tensor loss = module.training_step(batch, 0, metrics);
    const at::Tensor kept = counted.slice(0, 0, 3);
    const at::Tensor logits = module.forward(batch.input).detach();
    EXPECT_NEAR(
        loss.item<double>(),
        at::cross_entropy_loss(logits.index({kept}), batch.target.index({kept}))
            .item<double>(),
        1e-5)
        << name;

    // Evaluation: one mean over every counted position of the 6 samples,
    // although the batches count 14, 10 and 0 of them.
    const at::Tensor all = module.forward(inputs).detach();
    const at::Tensor want_loss =
        at::cross_entropy_loss(all.index({counted}), targets.index({counted}));
    const at::Tensor want_acc = all.argmax(-1)
                                    .index({counted})
                                    .eq(targets.index({counted}))
                                    .to(at::kDouble)
                                    .mean();
    data::DataLoader loader(
        std::make_shared<data::TensorDataset>(inputs, targets),
        data::DataLoaderOptions(3));
    Trainer trainer(TrainerOptions()
                        .accelerator("cpu")
                        .default_root_dir("")
                        .enable_progress_bar(false));
    const auto metrics_out = trainer.validate(module, loader);
    EXPECT_NEAR(metrics_out.at("val_loss"), want_loss.item<double>(), 1e-5)
        << name;
    EXPECT_NEAR(metrics_out.at("val_acc"), want_acc.item<double>(), 1e-12)
        << name;
    // A batch that counts nothing still logs both metrics, with weight 0,
    // so that every process of a data-parallel run reduces the same ones.
    MetricCollection empty;
    data::Batch nothing;
    nothing.input = inputs.slice(0, 6);
    nothing.target = targets.slice(0, 6);
    module.validation_step(nothing, 0, empty);
    EXPECT_EQ(empty.state().size(), 2u) << name;
    EXPECT_EQ(empty.state().at("val_loss").second, 0.0) << name;
  };
  check(
      torch::nn::AnyModule(models::Gpt(models::GptOptions()
                                           .vocab_size(16)
                                           .block_size(6)
                                           .n_layer(1)
                                           .n_head(2)
                                           .n_embd(8)
                                           .loss_chunk_size(5))),
      "Gpt");
  check(torch::nn::AnyModule(torch::nn::Embedding(16, 16)), "an embedding");
}

} // namespace
} // namespace hotloop::train
