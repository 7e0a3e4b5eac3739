#include "hotloop/log/model_summary.h"
#include "hotloop/models/fashion_cnn.h"
#include "hotloop/models/gpt.h"
#include "hotloop/models/mlp.h"
#include "hotloop/train/classifier.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include <sstream>

namespace hotloop::log {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<train::ImageClassifier> classifier() {
  models::FashionCnnOptions options;
  options.channels = {4};
  options.hidden = 8;
  options.image_size = 8;
  return std::make_shared<train::ImageClassifier>(
      torch::nn::AnyModule(models::FashionCnn(options)),
      optim::OptimizerOptions{},
      optim::SchedulerOptions{});
}

TEST(ModelSummary, ListsLayersWithParameterCountsAndOutputShapes) {
  auto model = classifier();
  const at::Tensor example = at::zeros({1, 1, 8, 8});
  const ModelSummary summary =
      summarize_model(*model, 3, example, [&](const at::Tensor& x) {
        return model->forward(x);
      });
  // conv 1*4*9 + bn 4+4, linear 4*4*4*8 + 8, linear 8*10 + 10.
  EXPECT_EQ(summary.trainable_params, 36 + 8 + 520 + 90);
  EXPECT_EQ(summary.frozen_params, 0);
  // Parameters plus BatchNorm's running mean, variance and batch count.
  EXPECT_DOUBLE_EQ(summary.size_mb, ((36 + 8 + 520 + 90 + 8) * 4 + 8) / 1e6);
  std::map<std::string, std::vector<int64_t>> shapes;
  std::map<std::string, std::string> types;
  for (const auto& layer : summary.layers) {
    shapes[layer.name] = layer.output_shape;
    types[layer.name] = layer.type;
  }
  EXPECT_EQ(types.at("network"), "FashionCnn");
  EXPECT_EQ(types.at("network.features.0"), "Conv2d");
  EXPECT_EQ(
      shapes.at("network.features.0"), (std::vector<int64_t>{1, 4, 8, 8}));
  EXPECT_EQ(
      shapes.at("network.features.3"), (std::vector<int64_t>{1, 4, 4, 4}));
  EXPECT_EQ(shapes.at("network.head.0"), (std::vector<int64_t>{1, 64}));
  EXPECT_EQ(shapes.at("network"), (std::vector<int64_t>{1, 10}));
  std::ostringstream text;
  summary.print(text);
  EXPECT_THAT(text.str(), HasSubstr("network.features.0  Conv2d"));
  EXPECT_THAT(text.str(), HasSubstr("654 trainable params, 0 frozen"));
}

// name -> output shape of every row.
std::map<std::string, std::vector<int64_t>> shapes_of(
    const ModelSummary& summary) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& layer : summary.layers) {
    shapes[layer.name] = layer.output_shape;
  }
  return shapes;
}

TEST(ModelSummary, ModelsWhoseForwardIsCodeGetTheirLayersShapesFromTheOps) {
  // The MLP and the GPT call their layers from code, not as a chain of
  // Sequentials: each layer's shape is its op's output, and a module that
  // holds layers shows the last of them to run.
  models::Mlp mlp(models::MlpOptions(12, 3).hidden({16, 8}));
  ModelSummary summary =
      summarize_model(*mlp, 3, at::zeros({2, 12}), [&](const at::Tensor& x) {
        return mlp->forward(x);
      });
  auto shapes = shapes_of(summary);
  EXPECT_EQ(shapes.at("layers.0"), (std::vector<int64_t>{2, 16}));
  EXPECT_EQ(shapes.at("layers.1"), (std::vector<int64_t>{2, 8}));
  EXPECT_EQ(shapes.at("layers.2"), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(shapes.at("layers"), (std::vector<int64_t>{2, 3}));

  models::Gpt gpt(models::GptOptions()
                      .vocab_size(40)
                      .block_size(8)
                      .n_layer(2)
                      .n_head(2)
                      .n_embd(16));
  const at::Tensor tokens = at::zeros({2, 5}, at::kLong);
  summary = summarize_model(
      *gpt, 5, tokens, [&](const at::Tensor& x) { return gpt->forward(x); });
  shapes = shapes_of(summary);
  EXPECT_EQ(shapes.at("transformer.wte"), (std::vector<int64_t>{2, 5, 16}));
  EXPECT_EQ(shapes.at("transformer.wpe"), (std::vector<int64_t>{5, 16}));
  EXPECT_EQ(
      shapes.at("transformer.h.0.attn.c_attn"),
      (std::vector<int64_t>{2, 5, 48}));
  EXPECT_EQ(
      shapes.at("transformer.h.1.mlp.c_fc"), (std::vector<int64_t>{2, 5, 64}));
  EXPECT_EQ(shapes.at("transformer.h.1"), (std::vector<int64_t>{2, 5, 16}));
  EXPECT_EQ(shapes.at("transformer.ln_f"), (std::vector<int64_t>{2, 5, 16}));
  std::ostringstream text;
  summary.print(text);
  EXPECT_THAT(text.str(), ::testing::Not(HasSubstr("?")));
}

TEST(ModelSummary, PrintsATableOfNamesTypesCountsAndShapesThenTheTotals) {
  auto model = classifier();
  const ModelSummary summary = summarize_model(
      *model, 1, at::zeros({1, 1, 8, 8}), [&](const at::Tensor& x) {
        return model->forward(x);
      });
  std::ostringstream text;
  summary.print(text);
  EXPECT_EQ(
      text.str(),
      "  name     type           params  out shape\n"
      "  network  FashionCnn        654  [1, 10]\n"
      "  654 trainable params, 0 frozen, 654 total, 0.003 MB\n");
}

TEST(ModelSummary, DepthLimitsRowsAndFrozenParametersAreCounted) {
  auto model = classifier();
  for (auto& parameter : model->parameters()) {
    parameter.set_requires_grad(false);
    break; // the first conv weight only
  }
  const ModelSummary summary = summarize_model(*model, 1);
  ASSERT_EQ(summary.layers.size(), 1u);
  EXPECT_TRUE(summary.layers[0].output_shape.empty()); // no example given
  EXPECT_EQ(summary.frozen_params, 36);
  EXPECT_EQ(summary.total_params(), 654);
}

// A forward that is not the chain of its children.
struct Residual : torch::nn::Module {
  Residual() {
    linear = register_module("linear", torch::nn::Linear(4, 4));
  }
  at::Tensor forward(const at::Tensor& x) {
    return x + linear->forward(x);
  }
  torch::nn::Linear linear{nullptr};
};

TEST(ModelSummary, AModelThatIsNotAChainGetsItsLayersShapesFromTheirOps) {
  // Chaining its children would be wrong; their ops say what they give.
  Residual model;
  const ModelSummary summary =
      summarize_model(model, 2, at::zeros({2, 4}), [&](const at::Tensor& x) {
        return model.forward(x);
      });
  ASSERT_EQ(summary.layers.size(), 1u);
  EXPECT_EQ(summary.layers[0].type, "Linear");
  EXPECT_EQ(summary.layers[0].output_shape, (std::vector<int64_t>{2, 4}));
}

} // namespace
} // namespace hotloop::log
