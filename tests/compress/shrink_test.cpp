#include "hotloop/compress/shrink.h"
#include "hotloop/compress/prune.h"
#include "hotloop/core/error.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/utils.h>

namespace hotloop::compress {
namespace {

// A trained-looking CNN: random weights and BatchNorm statistics, so a
// zero filter's BatchNorm output is a constant that is not zero.
models::FashionCnn cnn(int64_t hidden = 32) {
  torch::manual_seed(11);
  models::FashionCnnOptions options;
  options.channels = {8, 16};
  options.hidden = hidden;
  options.image_size = 12;
  options.num_classes = 5;
  models::FashionCnn model(options);
  const at::NoGradGuard no_grad;
  for (auto& item : model->named_buffers()) {
    if (item.key().find("running_mean") != std::string::npos) {
      item.value().normal_(0, 0.5);
    } else if (item.key().find("running_var") != std::string::npos) {
      item.value().uniform_(0.5, 2);
    }
  }
  for (auto& item : model->named_parameters()) {
    if (item.key().find("features.1.") != std::string::npos ||
        item.key().find("features.5.") != std::string::npos) {
      item.value().normal_(0.5, 0.3); // BatchNorm weight and bias
    }
  }
  model->eval();
  return model;
}

double max_difference(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

TEST(Shrink, ChannelPrunedCnnShrinksToTheSameOutputs) {
  models::FashionCnn model = cnn();
  prune_channels(*model, 0, PruningAmount::fraction(0.5));
  prune_channels(*model, 1, PruningAmount::count(6));
  prune_units(*model, 0, PruningAmount::fraction(0.25));
  recompute_pruned(*model);
  const at::Tensor x = at::randn({7, 1, 12, 12});
  const at::Tensor expected = model->forward(x);

  ShrinkReport report;
  models::FashionCnn small = shrink(*model, &report);
  EXPECT_EQ(small->options().channels, (std::vector<int64_t>{4, 10}));
  EXPECT_EQ(small->options().hidden, 24);
  EXPECT_EQ(report.before, (std::vector<int64_t>{8, 16, 32}));
  EXPECT_EQ(report.after, (std::vector<int64_t>{4, 10, 24}));
  EXPECT_FALSE(small->is_training());
  EXPECT_LT(max_difference(small->forward(x), expected), 1e-5);
  EXPECT_LT(report.parameters_after, report.parameters_before / 2);
  EXPECT_THAT(
      report.describe(),
      ::testing::HasSubstr("[8, 16, 32] -> [4, 10, 24] units"));
}

// PyTorch's own structured pruning zeroes filters only: the BatchNorm then
// outputs a constant. The last block's constants fold into the head's
// bias; an inner block's stay (the next conv pads them); a channel the
// next conv no longer reads goes whatever its filter.
TEST(
    Shrink,
    WeightOnlyPruningFoldsTheLastBlocksConstantsAndDropsUnreadChannels) {
  models::FashionCnn model = cnn();
  ln_structured(*model, "features.0.weight", PruningAmount::count(3), 1, 0);
  ln_structured(*model, "features.4.weight", PruningAmount::count(5), 2, 0);
  // The second conv stops reading two of the first block's channels.
  ln_structured(*model, "features.4.weight", PruningAmount::count(2), 2, 1);
  recompute_pruned(*model);
  const at::Tensor x = at::randn({5, 1, 12, 12});
  const at::Tensor expected = model->forward(x);

  ShrinkReport report;
  models::FashionCnn small = shrink(*model, &report);
  EXPECT_EQ(small->options().channels[1], 11);
  // Block 0: the 2 unread channels go; of the 3 zero filters, those the
  // second conv still reads stay, their BatchNorm output being constant.
  EXPECT_LE(small->options().channels[0], 8 - 2);
  EXPECT_GE(small->options().channels[0], 8 - 2 - 3);
  EXPECT_GT(report.kept_constant, 0);
  EXPECT_EQ(small->options().hidden, 32);
  EXPECT_LT(max_difference(small->forward(x), expected), 1e-5);
}

TEST(Shrink, MlpUnitsGoWhenPrunedOrUnreadWithConstantsFolded) {
  for (const std::string activation : {"relu", "gelu"}) {
    torch::manual_seed(3);
    models::Mlp model(
        models::MlpOptions(20, 4).hidden({16, 12}).activation(activation));
    model->eval();
    // Rows of layer 0 (weights only: biases give constant units), and
    // columns of the last layer (units of layer 1 nobody reads).
    ln_structured(*model, "layers.0.weight", PruningAmount::count(6), 1, 0);
    ln_structured(*model, "layers.2.weight", PruningAmount::count(5), 2, 1);
    prune_units(*model, 1, PruningAmount::count(2));
    recompute_pruned(*model);
    const at::Tensor x = at::randn({9, 20});
    const at::Tensor expected = model->forward(x);
    // Layer 1's units that go: unread by layer 2, or pruned with their bias.
    const at::Tensor unread =
        (mask_of(*model->named_modules()["layers.2"], "weight") == 0).all(0);
    const at::Tensor pruned =
        (mask_of(*model->named_modules()["layers.1"], "weight") == 0).all(1);
    const int64_t gone = (unread | pruned).sum().item<int64_t>();
    EXPECT_GE(gone, 5);
    ShrinkReport report;
    models::Mlp small = shrink(*model, &report);
    EXPECT_EQ(small->options().hidden(), (std::vector<int64_t>{10, 12 - gone}))
        << activation;
    EXPECT_LT(max_difference(small->forward(x), expected), 1e-5) << activation;
  }
}

TEST(Shrink, BadBlockOrLayerIsNamed) {
  models::FashionCnn model = cnn();
  EXPECT_THAT(
      [&] { prune_channels(*model, 2, PruningAmount::fraction(0.5)); },
      ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr(
          "prune_channels: block 2 does not exist (the model has 2 conv "
          "blocks)")));
  models::FashionCnn linear_head = cnn(0);
  EXPECT_THAT(
      [&] { prune_units(*linear_head, 0, PruningAmount::fraction(0.5)); },
      ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr(
          "prune_units: the model's head has no hidden layer, not layer 0")));
}

} // namespace
} // namespace hotloop::compress
