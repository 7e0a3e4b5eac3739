#include "hotloop/compress/model_pruning.h"
#include "hotloop/core/error.h"
#include "train/trainer_fixture.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace hotloop::compress {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using train::TrainerTest;

class ModelPruningTest : public TrainerTest {
 protected:
  train::FitResult fit(
      train::Module& module,
      ModelPruningOptions pruning,
      int64_t epochs,
      std::ostream& out,
      const std::string& ckpt = "") {
    train::Trainer trainer(options().max_epochs(epochs), out);
    trainer.add_callback(std::make_shared<ModelPruning>(std::move(pruning)));
    data::DataLoader loader = train_loader();
    return trainer.fit(module, loader, &val_loader_, ckpt);
  }
};

// The small model's prunable tensors, in Lightning's order: every weight,
// then every bias.
const std::vector<std::pair<std::string, int64_t>> kTensors = {
    {"network.features.0.weight", 72},
    {"network.features.1.weight", 8},
    {"network.head.1.weight", 4608},
    {"network.head.3.weight", 64},
    {"network.features.1.bias", 8},
    {"network.head.1.bias", 16},
    {"network.head.3.bias", 4}};

TEST_F(ModelPruningTest, PrunesAtEveryEpochEndAndPrintsLightningsLines) {
  auto module = train::make_module(5);
  std::ostringstream out;
  fit(*module,
      ModelPruningOptions("l1_unstructured")
          .amount(PruningAmount::fraction(0.3))
          .make_pruning_permanent(false)
          .use_lottery_ticket_hypothesis(false)
          .verbose(2),
      3,
      out);
  // Global: 0.3 of what is left, across all 4780 entries, each epoch.
  const int64_t total = 4780;
  int64_t pruned = 0;
  std::vector<int64_t> after;
  for (int epoch = 0; epoch < 3; ++epoch) {
    pruned += std::llround(0.3 * static_cast<double>(total - pruned));
    after.push_back(pruned);
  }
  EXPECT_EQ(after, (std::vector<int64_t>{1434, 2438, 3141}));
  EXPECT_THAT(
      out.str(),
      HasSubstr("Applied `L1Unstructured`. Pruned: 0/4780 (0.00%) -> "
                "1434/4780 (30.00%)\n"));
  EXPECT_THAT(
      out.str(),
      HasSubstr("Applied `L1Unstructured`. Pruned: 1434/4780 (30.00%) -> "
                "2438/4780 (51.00%)\n"));
  EXPECT_THAT(
      out.str(),
      HasSubstr("Applied `L1Unstructured` to `network.features.0.weight` "
                "with amount=0.3. Pruned: 0 (0.00%) -> "));
  int64_t zeros = 0;
  std::vector<std::string> paths;
  for (const PrunedTensor& tensor : pruned_tensors(*module)) {
    paths.push_back(tensor.path);
    const at::Tensor mask = mask_of(*tensor.module, tensor.name);
    zeros += (mask == 0).sum().item<int64_t>();
    // What the forward reads is zero wherever the mask is.
    EXPECT_TRUE(masked_tensor(*tensor.module, tensor.name)
                    .masked_select(mask == 0)
                    .eq(0)
                    .all()
                    .item<bool>());
  }
  EXPECT_EQ(zeros, 3141);
  EXPECT_EQ(paths.size(), kTensors.size());
  // summary.json: each tensor's sparsity and the total.
  std::ifstream in(fs::path(dir_.path()) / "t" / "version_0" / "summary.json");
  const auto summary = nlohmann::json::parse(in);
  ASSERT_TRUE(summary.contains("pruning")) << summary.dump();
  EXPECT_NEAR(
      summary["pruning"]["total_sparsity"].get<double>(),
      3141.0 / 4780.0,
      1e-12);
  EXPECT_EQ(summary["pruning"]["sparsity"].size(), kTensors.size());
  EXPECT_EQ(summary["pruning"]["prunings"], 3);
}

TEST_F(
    ModelPruningTest, PrunedWeightsStayZeroWhileTrainingAndPermanentAtTheEnd) {
  auto module = train::make_module(6);
  std::ostringstream out;
  fit(*module,
      ModelPruningOptions("ln_structured")
          .use_global_unstructured(false)
          .pruning_dim(0)
          .pruning_norm(2)
          .parameters_to_prune({"network.features.0.weight"})
          .amount(PruningAmount::count(2)),
      2,
      out);
  // Permanent: the conv has its plain weight back, 4 of 8 filters zero.
  EXPECT_FALSE(is_pruned(*module));
  const at::Tensor weight =
      module->named_parameters()["network.features.0.weight"];
  const at::Tensor filter_norms = weight.flatten(1).abs().sum(1);
  EXPECT_EQ((filter_norms == 0).sum().item<int64_t>(), 4);
}

// Two epochs, a stop, a resume for the third: the same weights and masks
// as three epochs in one go, bit for bit, with the lottery ticket (the
// starting values are the seeded initialisation) and random pruning (the
// generator state is the checkpoint's).
TEST_F(ModelPruningTest, AResumedFitPrunesOnAsTheUninterruptedOne) {
  const auto pruning = [] {
    return ModelPruningOptions("random_unstructured")
        .amount(PruningAmount::fraction(0.2))
        .make_pruning_permanent(false);
  };
  std::ostringstream out;
  auto whole = train::make_module(7);
  fit(*whole, pruning(), 3, out);

  auto first = train::make_module(7);
  const train::FitResult part = fit(*first, pruning(), 2, out);
  ASSERT_FALSE(part.checkpoint_path.empty());
  // last.ckpt, written again after the second epoch's pruning; and the
  // checkpoint the second epoch's validation wrote before that pruning,
  // from which the resumed fit prunes for epoch 2 first.
  const std::string before_pruning =
      (fs::path(part.checkpoint_path).parent_path() / "epoch=1-step=16.ckpt")
          .string();
  ASSERT_TRUE(fs::is_regular_file(before_pruning));
  // Copies: a resumed fit writes into the folder it resumes from, where
  // its checkpointing replaces both files.
  const fs::path copies = fs::path(dir_.path()) / "resume_from";
  fs::create_directories(copies);
  fs::copy_file(part.checkpoint_path, copies / "last.ckpt");
  fs::copy_file(before_pruning, copies / "before_pruning.ckpt");
  for (const std::string& ckpt :
       {(copies / "last.ckpt").string(),
        (copies / "before_pruning.ckpt").string()}) {
    auto resumed = train::make_module(7);
    fit(*resumed, pruning(), 3, out, ckpt);
    const auto a = whole->named_parameters();
    const auto b = resumed->named_parameters();
    ASSERT_EQ(a.size(), b.size());
    for (const auto& item : a) {
      EXPECT_TRUE(item.value().equal(b[item.key()]))
          << ckpt << " " << item.key();
    }
    const auto buffers_a = whole->named_buffers();
    const auto buffers_b = resumed->named_buffers();
    ASSERT_EQ(buffers_a.size(), buffers_b.size());
    int64_t masks = 0;
    for (const auto& item : buffers_a) {
      EXPECT_TRUE(item.value().equal(buffers_b[item.key()]))
          << ckpt << " " << item.key();
      masks += item.key().find("_mask") != std::string::npos;
    }
    EXPECT_EQ(masks, static_cast<int64_t>(kTensors.size()));
  }
  // The checkpoint loads into a fresh, unpruned model: test and predict
  // see the masked weights.
  auto fresh = train::make_module(8);
  train::Trainer trainer(options(), out);
  const auto metrics =
      trainer.validate(*fresh, val_loader_, part.checkpoint_path);
  EXPECT_TRUE(is_pruned(*fresh));
  auto permanent = train::make_module(8);
  train::load_checkpoint(part.checkpoint_path, *permanent);
  EXPECT_EQ(make_pruning_permanent(*permanent), 7);
  EXPECT_EQ(
      metrics.at("val_loss"),
      trainer.validate(*permanent, val_loader_).at("val_loss"));
}

TEST_F(ModelPruningTest, BadSettingsAreNamedAsLightningNamesThem) {
  EXPECT_THAT(
      [] { ModelPruning(ModelPruningOptions("l2_unstructured")); },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr(
          "The provided `pruning_fn` l2_unstructured isn't available in "
          "PyTorch's built-in functions: ln_structured, l1_unstructured, "
          "random_structured, random_unstructured")));
  EXPECT_THAT(
      [] {
        ModelPruning(ModelPruningOptions("ln_structured")
                         .pruning_dim(0)
                         .pruning_norm(2));
      },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr(
          "Only the \"unstructured\" PRUNING_TYPE is supported with "
          "`use_global_unstructured=True`. Found method LnStructured of "
          "type structured.")));
  EXPECT_THAT(
      [] {
        ModelPruning(ModelPruningOptions("random_structured")
                         .use_global_unstructured(false));
      },
      ::testing::ThrowsMessage<ConfigError>(
          HasSubstr("When requesting `structured` pruning, the `pruning_dim` "
                    "should be provided.")));
  EXPECT_THAT(
      [] {
        ModelPruning(
            ModelPruningOptions("l1_unstructured").parameter_names({"gamma"}));
      },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr(
          "The provided `parameter_names` name: gamma isn't in (weight, "
          "bias)")));
  auto module = train::make_module(5);
  std::ostringstream out;
  EXPECT_THAT(
      [&] {
        fit(*module,
            ModelPruningOptions("l1_unstructured")
                .parameters_to_prune({"network.head.9.weight"}),
            1,
            out);
      },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr(
          "ModelPruning parameters_to_prune: no parameter "
          "'network.head.9.weight' in the model; its parameters: "
          "network.features.0.weight, network.features.1.weight, "
          "network.features.1.bias, network.head.1.weight, "
          "network.head.1.bias, network.head.3.weight, network.head.3.bias")));
  EXPECT_THAT(
      [&] {
        fit(*module,
            ModelPruningOptions("l1_unstructured")
                .use_global_unstructured(false)
                .parameters_to_prune({"network.features.1.bias"})
                .amount(PruningAmount::count(9)),
            1,
            out);
      },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr(
          "pruning 'network.features.1.bias' (L1Unstructured): "
          "L1Unstructured: amount=9 should be smaller than the number of "
          "parameters to prune=8")));
}

} // namespace
} // namespace hotloop::compress
