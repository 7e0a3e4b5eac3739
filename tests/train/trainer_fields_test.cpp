// A batch's named fields (a second input, sample weights) in the Trainer's
// steps: on the device, in the true precisions' dtype, and copied into a
// captured CUDA-graph step with each new batch.

#include "hotloop/data/tensor_dataset.h"
#include "hotloop/optim/optimizer_factory.h"
#include "trainer_fixture.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include <set>
#include <sstream>
#include <tuple>

namespace hotloop::train {
namespace {

using ::testing::HasSubstr;
using Dtypes =
    std::tuple<at::ScalarType, at::ScalarType, at::ScalarType, at::ScalarType>;

// y = x . (1, -2, 3) + 0.5 + shift: the model is linear in x and adds the
// sample's field "shift" (a second input); its loss weighs each sample by
// the field "weight", which is 0 where the target was corrupted. Plain SGD
// (hotloop's, which a captured step can hold).
class ShiftedRegression : public Module {
 public:
  ShiftedRegression() {
    at::manual_seed(0);
    linear = register_module("linear", torch::nn::Linear(3, 1));
  }
  at::Tensor forward(const data::Batch& batch) {
    return linear(batch.input).squeeze(1) +
           batch.field("shift").to(batch.input.scalar_type());
  }
  at::Tensor training_step(
      const data::Batch& batch,
      int64_t batch_idx,
      MetricCollection& metrics) override {
    seen_dtypes.insert(
        {batch.input.scalar_type(),
         batch.target.scalar_type(),
         batch.field("shift").scalar_type(),
         batch.field("index").scalar_type()});
    const at::Tensor weight = batch.field("weight").to(at::kFloat);
    const at::Tensor error = forward(batch).to(at::kFloat) - batch.target;
    at::Tensor loss = (weight * error.square()).sum() / weight.sum();
    metrics.log("train_loss", loss, static_cast<double>(batch.size()));
    return loss;
  }
  void validation_step(
      const data::Batch& batch,
      int64_t batch_idx,
      MetricCollection& metrics) override {
    metrics.log(
        "val_loss",
        (forward(batch).to(at::kFloat) - batch.target).square().mean(),
        static_cast<double>(batch.size()));
  }
  at::Tensor predict_step(const data::Batch& batch, int64_t) override {
    return forward(batch);
  }
  OptimizerSetup configure_optimizers(const FitPlan&) override {
    optim::OptimizerOptions sgd;
    sgd.name = "sgd";
    sgd.lr = 0.1;
    sgd.momentum = 0;
    return OptimizerSetup(optim::make_optimizer(*this, sgd));
  }
  torch::nn::Linear linear{nullptr};
  std::set<Dtypes> seen_dtypes;
};

// n samples; with `corrupt`, every fourth target is off by 50 and has
// weight 0. The field "index" (int64) is the sample's index.
std::shared_ptr<data::TensorDataset> shifted_samples(
    int64_t n, uint64_t seed, bool corrupt) {
  at::manual_seed(seed);
  const at::Tensor x = at::randn({n, 3});
  const at::Tensor shift = at::randn({n});
  at::Tensor y = at::matmul(x, at::tensor({1.0F, -2.0F, 3.0F})) + 0.5 + shift;
  at::Tensor weight = at::ones({n});
  const at::Tensor index = at::arange(n);
  if (corrupt) {
    const at::Tensor bad = index % 4 == 0;
    y = at::where(bad, y + 50, y);
    weight = at::where(bad, at::zeros({n}), weight);
  }
  return std::make_shared<data::TensorDataset>(
      x,
      y,
      data::Fields{{"index", index}, {"shift", shift}, {"weight", weight}});
}

TEST_F(TrainerTest, FieldsReachEveryStepBesideTheInputAndTarget) {
  data::DataLoader train(
      shifted_samples(256, 1, /*corrupt=*/true),
      data::DataLoaderOptions(16).shuffle(true).seed(2).num_workers(2));
  data::DataLoader val(
      shifted_samples(64, 3, /*corrupt=*/false), data::DataLoaderOptions(64));
  ShiftedRegression module;
  const FitResult result =
      Trainer(options().max_epochs(4).logger(false).enable_checkpointing(false))
          .fit(module, train, &val);
  // Only with each row's own shift and weight does the fit find the clean
  // function: a corrupted target weighed in, or a shift of another row,
  // leaves a loss far above this.
  EXPECT_LT(result.metrics.at("val_loss"), 1e-3);
  const std::vector<at::Tensor> predictions =
      Trainer(options()).predict(module, val);
  ASSERT_EQ(predictions.size(), 1u);
  const auto val_set = shifted_samples(64, 3, /*corrupt=*/false);
  EXPECT_LT(
      (predictions[0] - val_set->targets()).abs().max().item<double>(), 0.1);
}

TEST_F(TrainerTest, ATruePrecisionConvertsFloatFieldsAsItDoesTheInput) {
  data::DataLoader train(
      shifted_samples(32, 1, /*corrupt=*/false), data::DataLoaderOptions(16));
  ShiftedRegression module;
  Trainer(options()
              .max_epochs(1)
              .precision("bf16-true")
              .logger(false)
              .enable_checkpointing(false))
      .fit(module, train);
  // The target stays as loaded, for the loss; an integer field stays as
  // it is.
  EXPECT_EQ(
      module.seen_dtypes,
      (std::set<Dtypes>{
          {at::kBFloat16, at::kFloat, at::kBFloat16, at::kLong}}));
}

// Records the memory format each part of its batches arrives in.
class LayoutRecorder : public Module {
 public:
  LayoutRecorder() {
    linear = register_module("linear", torch::nn::Linear(2 * 4 * 4, 1));
  }
  at::Tensor training_step(
      const data::Batch& batch, int64_t, MetricCollection&) override {
    auto channels_last = [](const at::Tensor& tensor) {
      return tensor.is_contiguous(at::MemoryFormat::ChannelsLast) &&
             !tensor.is_contiguous();
    };
    seen.insert(
        {channels_last(batch.input),
         channels_last(batch.field("second")),
         channels_last(batch.field("mask"))});
    return linear(batch.input.flatten(1)).sum();
  }
  void validation_step(
      const data::Batch&, int64_t, MetricCollection&) override {}
  OptimizerSetup configure_optimizers(const FitPlan&) override {
    optim::OptimizerOptions sgd;
    sgd.name = "sgd";
    sgd.momentum = 0;
    return OptimizerSetup(optim::make_optimizer(*this, sgd));
  }
  torch::nn::Linear linear{nullptr};
  std::set<std::tuple<bool, bool, bool>> seen;
};

TEST_F(TrainerTest, ChannelsLastAppliesToTheInputAndFloatingImageFields) {
  data::DataLoader train(
      std::make_shared<data::TensorDataset>(
          at::randn({8, 2, 4, 4}),
          at::zeros({8}),
          data::Fields{
              {"second", at::randn({8, 2, 4, 4})},
              {"mask", at::ones({8, 2, 4, 4}, at::kBool)}}),
      data::DataLoaderOptions(4));
  for (bool on : {false, true}) {
    LayoutRecorder module;
    Trainer(options()
                .max_epochs(1)
                .channels_last(on)
                .logger(false)
                .enable_checkpointing(false))
        .fit(module, train);
    EXPECT_EQ(
        module.seen, (std::set<std::tuple<bool, bool, bool>>{{on, on, false}}))
        << "channels_last " << on;
  }
}

// On a GPU: the captured step reads each new batch's fields (copied into
// its static buffers before every replay), so the graphed fit trains as the
// eager one does.
TEST_F(TrainerTest, CudaGraphsCopyEachBatchsFieldsIntoTheCapturedStep) {
  if (!at::hasCUDA() || at::getNumGPUs() == 0) {
    GTEST_SKIP() << "needs a CUDA build of LibTorch and a GPU";
  }
  auto fit = [&](bool graphs, std::ostream& out) {
    data::DataLoader train(
        shifted_samples(256, 1, /*corrupt=*/true),
        data::DataLoaderOptions(16).shuffle(true).seed(2).pin_memory(true));
    ShiftedRegression module;
    Trainer(
        options()
            .max_epochs(3)
            .accelerator("cuda")
            .cuda_graphs(graphs)
            .enable_progress_bar(true)
            .logger(false)
            .enable_checkpointing(false),
        out)
        .fit(module, train);
    return module.linear->weight.detach().cpu();
  };
  std::ostringstream eager_out;
  std::ostringstream graphed_out;
  const at::Tensor eager = fit(false, eager_out);
  const at::Tensor graphed = fit(true, graphed_out);
  EXPECT_THAT(
      graphed_out.str(),
      HasSubstr("trainer.cuda_graphs: the training step is captured at "));
  EXPECT_TRUE(at::allclose(graphed, eager, 1e-4, 1e-4))
      << graphed << " against " << eager;
  EXPECT_TRUE(at::allclose(
      eager, at::tensor({1.0F, -2.0F, 3.0F}).unsqueeze(0), 1e-2, 1e-2))
      << eager;
}

} // namespace
} // namespace hotloop::train
