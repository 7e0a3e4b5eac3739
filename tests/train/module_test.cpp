// A Module written from scratch against the interface alone, as a user
// would: two layers with their own optimizers and schedules.
#include "hotloop/train/module.h"
#include "hotloop/core/error.h"
#include "hotloop/data/dataloader.h"
#include "hotloop/data/tensor_dataset.h"
#include "hotloop/optim/lr_scheduler.h"
#include "hotloop/train/lr_monitor.h"
#include "hotloop/train/trainer.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <memory>

namespace hotloop::train {
namespace {

using ::hotloop::testing::TempDir;
using ::testing::HasSubstr;

// y = relu(x W1 + b1) W2 + b2, trained by mean squared error. The first
// layer has SGD with momentum and a StepLR stepped every other optimizer
// step; the second has Adam and an ExponentialLR stepped per epoch.
class TwoOptimizerModule : public Module {
 public:
  // share_parameter: give both optimizers the second layer's bias too.
  // watch_metric: a plateau schedule (per epoch) on the second optimizer
  // in place of the exponential one.
  explicit TwoOptimizerModule(
      uint64_t seed, bool share_parameter = false, bool watch_metric = false)
      : share_parameter_(share_parameter), watch_metric_(watch_metric) {
    at::manual_seed(seed);
    first = register_module("first", torch::nn::Linear(4, 8));
    second = register_module("second", torch::nn::Linear(8, 1));
  }

  at::Tensor forward(const at::Tensor& x) {
    return second(first(x).relu()).squeeze(1);
  }

  at::Tensor training_step(
      const data::Batch& batch,
      int64_t batch_idx,
      MetricCollection& metrics) override {
    at::Tensor loss =
        torch::nn::functional::mse_loss(forward(batch.input), batch.target);
    metrics.log("train_loss", loss, static_cast<double>(batch.size()));
    return loss;
  }

  void validation_step(
      const data::Batch& batch,
      int64_t batch_idx,
      MetricCollection& metrics) override {
    metrics.log(
        "val_loss",
        torch::nn::functional::mse_loss(forward(batch.input), batch.target),
        static_cast<double>(batch.size()));
  }

  OptimizerSetup configure_optimizers(const FitPlan& plan) override {
    OptimizerSetup setup;
    std::vector<at::Tensor> first_parameters = first->parameters();
    if (share_parameter_) {
      first_parameters.push_back(second->bias);
    }
    setup.optimizers.push_back(std::make_unique<torch::optim::SGD>(
        first_parameters, torch::optim::SGDOptions(0.05).momentum(0.9)));
    setup.optimizers.push_back(std::make_unique<torch::optim::Adam>(
        second->parameters(), torch::optim::AdamOptions(0.02)));
    ScheduleConfig per_step;
    per_step.scheduler =
        std::make_unique<optim::StepLR>(*setup.optimizers[0], 3, 0.5);
    per_step.frequency = 2;
    setup.schedules.push_back(std::move(per_step));
    ScheduleConfig per_epoch;
    if (watch_metric_) {
      optim::ReduceLROnPlateauOptions plateau;
      // The loss falls, so "max" sees no improvement: it halves the rate
      // after every epoch but the first.
      plateau.mode(optim::PlateauMode::kMax).patience(0).factor(0.5);
      per_epoch.scheduler = std::make_unique<optim::ReduceLROnPlateau>(
          *setup.optimizers[1], plateau);
    } else {
      per_epoch.scheduler =
          std::make_unique<optim::ExponentialLR>(*setup.optimizers[1], 0.7);
    }
    per_epoch.interval = ScheduleInterval::kEpoch;
    setup.schedules.push_back(std::move(per_epoch));
    return setup;
  }

  torch::nn::Linear first{nullptr};
  torch::nn::Linear second{nullptr};

 private:
  bool share_parameter_;
  bool watch_metric_;
};

class ModuleTest : public ::testing::Test {
 protected:
  ModuleTest() {
    at::manual_seed(0);
    const at::Tensor x = at::randn({40, 4});
    const at::Tensor y = x.matmul(at::tensor({1.0f, -2.0f, 0.5f, 3.0f}));
    dataset_ = std::make_shared<data::TensorDataset>(x, y);
  }
  TrainerOptions options() const {
    return TrainerOptions()
        .accelerator("cpu") // compared with CPU tensors, also on a GPU machine
        .default_root_dir(dir_.path())
        .name("m")
        .enable_progress_bar(false)
        .num_sanity_val_steps(0);
  }
  data::DataLoader loader() const {
    return data::DataLoader(dataset_, data::DataLoaderOptions(8));
  }
  static void expect_same_weights(Module& a, Module& b) {
    const auto pa = a.parameters();
    const auto pb = b.parameters();
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i) {
      EXPECT_TRUE(pa[i].equal(pb[i])) << "parameter " << i;
    }
  }

  TempDir dir_;
  std::shared_ptr<data::TensorDataset> dataset_;
};

TEST_F(ModuleTest, EveryOptimizerStepsItsLayerAsAHandWrittenLoopDoes) {
  TwoOptimizerModule module(1);
  auto train = loader();
  Trainer(options().max_epochs(3)).fit(module, train);

  // The same three epochs of five batches by hand.
  TwoOptimizerModule by_hand(1);
  OptimizerSetup setup = by_hand.configure_optimizers(FitPlan{});
  int64_t step = 0;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    for (int64_t b = 0; b < 5; ++b) {
      const at::Tensor x = dataset_->inputs().slice(0, 8 * b, 8 * b + 8);
      const at::Tensor y = dataset_->targets().slice(0, 8 * b, 8 * b + 8);
      torch::nn::functional::mse_loss(by_hand.forward(x), y).backward();
      for (auto& optimizer : setup.optimizers) {
        optimizer->step();
      }
      for (auto& optimizer : setup.optimizers) {
        for (auto& p : optimizer->param_groups()[0].params()) {
          p.mutable_grad().reset();
        }
      }
      if (++step % 2 == 0) {
        setup.schedules[0].scheduler->step();
      }
    }
    setup.schedules[1].scheduler->step();
  }
  expect_same_weights(module, by_hand);
  // 15 steps: StepLR stepped 7 times, halving every 3: 0.05 / 4.
  EXPECT_DOUBLE_EQ(
      setup.optimizers[0]->param_groups()[0].options().get_lr(), 0.0125);
  EXPECT_DOUBLE_EQ(
      setup.optimizers[1]->param_groups()[0].options().get_lr(),
      0.02 * 0.7 * 0.7 * 0.7);
}

TEST_F(ModuleTest, AResumeRestoresEveryOptimizerAndScheduleBitForBit) {
  for (const bool watch_metric : {false, true}) {
    SCOPED_TRACE(watch_metric ? "plateau schedule" : "exponential schedule");
    auto train = loader();
    auto val = loader();
    TwoOptimizerModule straight(1, false, watch_metric);
    Trainer(options().max_epochs(4)).fit(straight, train, &val);

    // Cut at an epoch's end (the epoch schedules have stepped) and in the
    // middle of an epoch (7 of 20 steps).
    for (const int64_t cut_steps : {int64_t{10}, int64_t{7}}) {
      SCOPED_TRACE(cut_steps);
      TwoOptimizerModule first(1, false, watch_metric);
      const FitResult cut =
          Trainer(options().max_epochs(4).max_steps(cut_steps))
              .fit(first, train, &val);
      TwoOptimizerModule resumed(99, false, watch_metric);
      const FitResult rest =
          Trainer(options().max_epochs(4))
              .fit(resumed, train, &val, cut.checkpoint_path);
      EXPECT_EQ(rest.steps, 20);
      expect_same_weights(straight, resumed);
    }
  }
}

TEST_F(ModuleTest, LearningRateMonitorNamesEachOptimizer) {
  TwoOptimizerModule module(1);
  auto train = loader();
  Trainer trainer(options().max_epochs(1).log_every_n_steps(1));
  trainer.add_callback(std::make_shared<LearningRateMonitor>());
  trainer.fit(module, train);
  const auto& logged = trainer.logged_metrics();
  ASSERT_TRUE(logged.count("lr-SGD"));
  ASSERT_TRUE(logged.count("lr-Adam"));
  // The rate the fifth step used: StepLR had stepped twice (steps 2, 4).
  EXPECT_DOUBLE_EQ(logged.at("lr-SGD"), 0.05);
  EXPECT_DOUBLE_EQ(logged.at("lr-Adam"), 0.02);
}

TEST_F(ModuleTest, ASetupThatCannotWorkIsNamed) {
  auto train = loader();
  TwoOptimizerModule shared(1, /*share_parameter=*/true);
  EXPECT_THAT(
      [&] { Trainer(options()).fit(shared, train); },
      ::testing::ThrowsMessage<Error>(HasSubstr(
          "configure_optimizers: a parameter of shape [1] is in two "
          "optimizers (or twice in one); each parameter must have one "
          "optimizer")));

  // A checkpoint of two optimizers does not fit a module with one.
  TwoOptimizerModule two(1);
  const FitResult result = Trainer(options().max_epochs(1)).fit(two, train);
  class OneOptimizer : public TwoOptimizerModule {
   public:
    OneOptimizer() : TwoOptimizerModule(1) {}
    OptimizerSetup configure_optimizers(const FitPlan& plan) override {
      return OptimizerSetup(std::make_unique<torch::optim::SGD>(
          parameters(), torch::optim::SGDOptions(0.1)));
    }
  } one;
  EXPECT_THAT(
      [&] {
        Trainer(options().max_epochs(2))
            .fit(one, train, nullptr, result.checkpoint_path);
      },
      ::testing::ThrowsMessage<Error>(HasSubstr(
          ": the checkpoint holds 2 optimizers, the module configures 1")));
}

} // namespace
} // namespace hotloop::train
