#include "hotloop/train/batch_mixing.h"

#include "hotloop/core/error.h"
#include "hotloop/models/mlp.h"
#include "hotloop/train/classifier.h"
#include "hotloop/train/metrics.h"
#include "test_util.h"
#include "train/trainer_fixture.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hotloop::train {
namespace {

using ::hotloop::testing::Reference;
using ::hotloop::testing::to_tensor;

// make_batch_mixing_reference.py's batch.
data::Batch reference_batch() {
  const at::Tensor i = at::arange(4 * 2 * 6 * 5, at::kLong);
  data::Batch batch;
  batch.input =
      ((i * 37).remainder(23) - 11).to(at::kFloat).div(8).reshape({4, 2, 6, 5});
  batch.target = at::tensor({3, 1, 0, 2}, at::kLong);
  return batch;
}

TEST(BatchMixing, DrawsAndMixesAsTorchvisionsMixUpAndCutMix) {
  const auto& reference = Reference::get("batch_mixing.txt");
  struct Case {
    std::string name;
    uint64_t seed;
    BatchMixingOptions options;
  };
  std::vector<Case> cases = {
      {"mixup", 11, BatchMixingOptions().mixup_alpha(0.2)},
      {"cutmix", 20, BatchMixingOptions().cutmix_alpha(1.0)},
      {"cutmix_small_alpha", 21, BatchMixingOptions().cutmix_alpha(0.3)}};
  for (uint64_t seed : {13, 14, 15, 16}) {
    cases.push_back(
        {"both_" + std::to_string(seed),
         seed,
         BatchMixingOptions().mixup_alpha(0.8).cutmix_alpha(1.0)});
  }
  const data::Batch batch = reference_batch();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    at::manual_seed(c.seed);
    const MixedBatch mixed = mix_batch(batch, c.options);
    EXPECT_EQ(mixed.lam, reference.one(c.name, "lam", "lam").values.at(0));
    EXPECT_TRUE(mixed.input.equal(
        to_tensor(reference.one(c.name, "input", "x"), at::kFloat)));
    EXPECT_TRUE(mixed.target.equal(batch.target));
    EXPECT_TRUE(mixed.rolled_target.equal(at::tensor({2, 3, 1, 0}, at::kLong)));
  }
  // The input batch itself is left as it was.
  EXPECT_TRUE(batch.input.equal(reference_batch().input));
}

TEST(BatchMixing, TheClassifiersLossIsTorchvisionsSoftTargetLoss) {
  // torchvision mixes one-hot labels and takes the cross-entropy of the
  // mix; hotloop mixes the two labels' losses, which is the same number.
  models::MlpOptions mlp(2 * 6 * 5, 4);
  mlp.hidden({8});
  torch::nn::AnyModule network(models::Mlp(std::move(mlp)));
  const auto mixing = BatchMixingOptions().mixup_alpha(0.4).cutmix_alpha(1.0);
  for (const double smoothing : {0.0, 0.1}) {
    ImageClassifier module(network, {}, {}, 1, smoothing, mixing);
    for (uint64_t seed : {13, 15}) { // a CutMix, a MixUp
      const data::Batch batch = reference_batch();
      MetricCollection metrics;
      at::manual_seed(seed);
      const at::Tensor loss = module.training_step(batch, 0, metrics);
      at::manual_seed(seed);
      const MixedBatch mixed = mix_batch(batch, mixing);
      const at::Tensor logits = network.forward(mixed.input);
      const at::Tensor one_hot = at::one_hot(batch.target, 4).to(at::kFloat);
      const at::Tensor soft =
          one_hot.roll(1, 0).mul_(1.0 - mixed.lam).add_(one_hot.mul(mixed.lam));
      const at::Tensor expected = at::cross_entropy_loss(
          logits, soft, {}, at::Reduction::Mean, -100, smoothing);
      EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 1e-6)
          << "seed " << seed << " smoothing " << smoothing;
    }
  }
}

TEST_F(TrainerTest, CudaGraphsRefuseAClassifierThatMixesItsBatches) {
  ImageClassifier module(
      torch::nn::AnyModule(models::FashionCnn(small_model())),
      {},
      {},
      1,
      0.0,
      BatchMixingOptions().mixup_alpha(0.2));
  auto train = train_loader();
  EXPECT_THROWS_WITH(
      ConfigError,
      Trainer(options().max_epochs(1).cuda_graphs(true)).fit(module, train),
      "trainer.cuda_graphs=true cannot capture this module's training step: "
      "model.mixup_alpha and model.cutmix_alpha draw a new mix for every "
      "batch on the host, which a captured step would replay as one");
  // Without mixing there is no obstacle.
  EXPECT_EQ(make_module(0)->cuda_graph_obstacle(), "");
}

TEST(BatchMixing, BadInputAndOptionsNameTheOption) {
  data::Batch flat;
  flat.input = at::zeros({4, 60});
  flat.target = at::zeros({4}, at::kLong);
  EXPECT_THROWS_WITH(
      ConfigError,
      mix_batch(flat, BatchMixingOptions().cutmix_alpha(1.0)),
      "model.cutmix_alpha cuts boxes out of image batches [B, C, H, W]; this "
      "batch's input is [4, 60]");
  // MixUp takes any shape.
  EXPECT_EQ(
      mix_batch(flat, BatchMixingOptions().mixup_alpha(1.0)).input.sizes(),
      at::IntArrayRef({4, 60}));
  EXPECT_THROWS_WITH(
      ConfigError,
      BatchMixingOptions().mixup_alpha(-1).check(),
      "model.mixup_alpha must be >= 0, got -1");
  EXPECT_THROWS_WITH(
      ConfigError,
      BatchMixingOptions().cutmix_alpha(-0.5).check(),
      "model.cutmix_alpha must be >= 0, got -0.5");
}

} // namespace
} // namespace hotloop::train
