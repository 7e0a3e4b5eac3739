#include "hotloop/train/weight_averaging.h"

#include "hotloop/core/error.h"
#include "hotloop/data/dataloader.h"
#include "hotloop/data/tensor_dataset.h"
#include "hotloop/train/checkpoint.h"
#include "hotloop/train/model_checkpoint.h"
#include "test_util.h"
#include "train/trainer_fixture.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace hotloop::train {
namespace {

using ::hotloop::testing::Reference;
using ::hotloop::testing::to_tensor;
using ::testing::HasSubstr;

// make_weight_averaging_reference.py's network.
torch::nn::Sequential small_network() {
  return torch::nn::Sequential(
      torch::nn::Linear(3, 4),
      torch::nn::BatchNorm1d(4),
      torch::nn::Linear(4, 2));
}

std::vector<at::Tensor> all_weights(torch::nn::Module& module) {
  std::vector<at::Tensor> all = module.parameters();
  for (const at::Tensor& buffer : module.buffers()) {
    all.push_back(buffer);
  }
  return all;
}

// make_weight_averaging_reference.py's set_weights, step for step.
void set_weights(torch::nn::Sequential& model, int64_t k) {
  const at::NoGradGuard no_grad;
  const std::vector<at::Tensor> entries = all_weights(*model);
  for (size_t i = 0; i < entries.size(); ++i) {
    const at::Tensor& t = entries[i];
    const at::Tensor j = at::arange(t.numel(), at::kLong);
    at::Tensor v =
        (j * 7 + static_cast<int64_t>(i) * 11 + k * 13).remainder(29) - 14;
    v = v.to(at::kDouble) / 16;
    if (i == 7) { // 1.running_var, after six parameters and running_mean
      v = v + 2;
    }
    t.copy_(v.to(t.scalar_type()).reshape(t.sizes()));
  }
}

TEST(WeightAverage, EqualsTorchsAveragedModelForEmaAndSwaBitForBit) {
  const auto& reference = Reference::get("weight_averaging.txt");
  for (const std::string average : {"ema", "swa"}) {
    SCOPED_TRACE(average);
    torch::nn::Sequential model = small_network();
    WeightAverage averaged(WeightAverageOptions().average(average).decay(0.9));
    for (int64_t k = 0; k < 6; ++k) {
      set_weights(model, k);
      averaged.update(*model);
    }
    EXPECT_EQ(averaged.count(), 6);
    const std::vector<std::string> names = {
        "0.weight",
        "0.bias",
        "1.weight",
        "1.bias",
        "2.weight",
        "2.bias",
        "1.running_mean",
        "1.running_var"};
    ASSERT_EQ(averaged.tensors().size(), names.size() + 1);
    for (size_t i = 0; i < names.size(); ++i) {
      const at::Tensor expected =
          to_tensor(reference.one(average, "average", names[i]), at::kFloat);
      EXPECT_TRUE(averaged.tensors()[i].equal(expected))
          << names[i] << ": " << averaged.tensors()[i] << " vs " << expected;
    }
    // num_batches_tracked is a count: it follows the model's.
    EXPECT_TRUE(averaged.tensors()[8].equal(model->buffers()[2]));
  }
}

TEST(WeightAverage, BuffersFollowTheModelsWithoutUseBuffers) {
  torch::nn::Sequential model = small_network();
  WeightAverage averaged(
      WeightAverageOptions().average("ema").decay(0.5).use_buffers(false));
  set_weights(model, 0);
  averaged.update(*model);
  set_weights(model, 1);
  const at::Tensor first_weight = averaged.tensors()[0].clone();
  averaged.update(*model);
  // Parameters are averaged, buffers copied.
  EXPECT_TRUE(averaged.tensors()[0].equal(
      first_weight * 0.5 + model->parameters()[0] * 0.5));
  EXPECT_TRUE(averaged.tensors()[6].equal(model->buffers()[0]));
  EXPECT_TRUE(averaged.tensors()[7].equal(model->buffers()[1]));
  // copy_to writes the average into the model, in place.
  const at::Tensor weight = model->parameters()[0];
  const void* storage = weight.data_ptr();
  averaged.copy_to(*model);
  EXPECT_EQ(model->parameters()[0].data_ptr(), storage);
  EXPECT_TRUE(model->parameters()[0].equal(averaged.tensors()[0]));
}

TEST(WeightAverage, AveragesReducedPrecisionWeightsInFloat32) {
  torch::nn::Sequential model = small_network();
  model->to(at::kBFloat16);
  WeightAverage averaged(WeightAverageOptions().decay(0.999));
  averaged.update(*model);
  EXPECT_EQ(averaged.tensors()[0].scalar_type(), at::kFloat);
  const at::Tensor before = averaged.tensors()[0].clone();
  {
    const at::NoGradGuard no_grad;
    model->parameters()[0].add_(1.0);
  }
  averaged.update(*model);
  // A step of 0.001 x 1: in bfloat16 it would round back to the old value
  // for weights above 0.25 in magnitude.
  const at::Tensor moved = averaged.tensors()[0] - before;
  EXPECT_TRUE(at::allclose(moved, at::full_like(moved, 0.001), 0, 1e-4))
      << moved;
}

TEST(WeightAverage, RefusesAModelWhoseWeightsChanged) {
  torch::nn::Sequential model = small_network();
  WeightAverage averaged(WeightAverageOptions{});
  averaged.update(*model);
  model->push_back(torch::nn::Linear(2, 2));
  EXPECT_THROWS_WITH(
      Error,
      averaged.update(*model),
      "weight averaging: the model now has 11 parameters and buffers, 9 "
      "when the average began (was it pruned since? the average follows one "
      "set of weights)");
}

// make_weight_averaging_reference.py's filled().
at::Tensor filled(at::IntArrayRef shape, int64_t offset) {
  int64_t n = 1;
  for (int64_t d : shape) {
    n *= d;
  }
  const at::Tensor i = at::arange(n, at::kLong);
  return ((i * 7 + offset * 11).remainder(29) - 14)
      .to(at::kFloat)
      .div(16)
      .reshape(shape);
}

TEST(UpdateBn, RecomputesRunningStatisticsAsTorchsUpdateBn) {
  namespace nn = torch::nn;
  nn::Sequential model(
      nn::Conv2d(nn::Conv2dOptions(2, 3, 3)),
      nn::BatchNorm2d(nn::BatchNormOptions(3).momentum(0.3)),
      nn::ReLU(),
      nn::Flatten(),
      nn::Linear(27, 4),
      nn::BatchNorm1d(4));
  {
    const at::NoGradGuard no_grad;
    const auto parameters = model->parameters();
    for (size_t i = 0; i < parameters.size(); ++i) {
      parameters[i].copy_(
          filled(parameters[i].sizes(), static_cast<int64_t>(i)));
    }
    for (const auto& item : model->named_buffers()) {
      if (item.key().find("running_mean") != std::string::npos) {
        item.value().fill_(5);
      } else if (item.key().find("running_var") != std::string::npos) {
        item.value().fill_(7);
      }
    }
  }
  data::DataLoader loader(
      std::make_shared<data::TensorDataset>(
          filled({10, 2, 5, 5}, 100), at::zeros({10}, at::kLong)),
      data::DataLoaderOptions(4));
  model->eval();
  update_bn(loader, *model, [&](const at::Tensor& x) { model->forward(x); });
  const auto& reference = Reference::get("weight_averaging.txt");
  for (const auto& item : model->named_buffers()) {
    const std::string& name = item.key();
    const at::Tensor& buffer = item.value();
    const at::Tensor expected = to_tensor(
        reference.one("update_bn", "stats", name), buffer.scalar_type());
    EXPECT_TRUE(at::allclose(buffer, expected, 1e-6, 1e-7))
        << name << ": " << buffer << " vs " << expected;
  }
  // The momentum and the mode are back.
  EXPECT_FALSE(model->is_training());
  EXPECT_EQ(model[1]->as<nn::BatchNorm2d>()->options.momentum().value(), 0.3);
  EXPECT_EQ(model[5]->as<nn::BatchNorm1d>()->options.momentum().value(), 0.1);
  // Without BatchNorm nothing runs.
  torch::nn::Linear plain(3, 2);
  bool ran = false;
  update_bn(loader, *plain, [&](const at::Tensor&) { ran = true; });
  EXPECT_FALSE(ran);
}

TEST(WeightAverage, BadOptionsNameTheOption) {
  EXPECT_THROWS_WITH(
      ConfigError,
      WeightAverage(WeightAverageOptions().average("mean")),
      "weight_averaging.average must be ema or swa, got 'mean'");
  EXPECT_THROWS_WITH(
      ConfigError,
      WeightAverage(WeightAverageOptions().decay(1)),
      "weight_averaging.decay must be in [0, 1), got 1");
  EXPECT_THROWS_WITH(
      ConfigError,
      WeightAveraging(WeightAveragingOptions().update_every_n_steps(-1)),
      "weight_averaging.update_every_n_steps must be >= 0, got -1");
  EXPECT_THROWS_WITH(
      ConfigError,
      WeightAveraging(WeightAveragingOptions().update_every_n_steps(0)),
      "weight averaging never updates: set "
      "weight_averaging.update_every_n_steps > 0 or update_starting_at_epoch "
      ">= 0");
  EXPECT_THROWS_WITH(
      ConfigError,
      WeightAveraging(WeightAveragingOptions().update_starting_at_epoch(-2)),
      "weight_averaging.update_starting_at_epoch must be >= 0, or -1 for "
      "none, got -2");
}

// Sees the module after WeightAveraging (added before it) has acted.
class Watcher : public Callback {
 public:
  explicit Watcher(const WeightAveraging& averaging) : averaging_(averaging) {}
  std::string state_key() const override {
    return "Watcher";
  }
  void on_train_batch_start(
      Trainer& trainer,
      Module& module,
      const data::Batch& batch,
      int64_t batch_idx) override {
    // Each step starts from the weights the last one left (validation
    // showed the average in between and put them back).
    if (!snapshots.empty()) {
      const std::vector<at::Tensor> now = all_weights(module);
      for (size_t i = 0; i < now.size(); ++i) {
        trains_on_its_own_weights &= now[i].equal(snapshots.back()[i]);
      }
    }
  }
  void on_train_batch_end(
      Trainer& trainer,
      Module& module,
      const at::Tensor& loss,
      const data::Batch& batch,
      int64_t batch_idx) override {
    std::vector<at::Tensor> now;
    for (const at::Tensor& t : all_weights(module)) {
      now.push_back(t.detach().clone());
    }
    snapshots.push_back(now);
  }
  void on_validation_batch_start(
      Trainer& trainer,
      Module& module,
      const data::Batch& batch,
      int64_t batch_idx) override {
    if (trainer.sanity_checking()) {
      return;
    }
    const std::vector<at::Tensor> now = all_weights(module);
    const auto& average = averaging_.average().tensors();
    for (size_t i = 0; i < now.size(); ++i) {
      validated_on_average &= now[i].equal(average[i]);
    }
    ++validation_batches;
  }

  std::vector<std::vector<at::Tensor>> snapshots;
  bool validated_on_average = true;
  int validation_batches = 0;
  bool trains_on_its_own_weights = true;

 private:
  const WeightAveraging& averaging_;
};

TEST_F(TrainerTest, WeightAveragingValidatesOnTheEmaAndEndsTheFitWithIt) {
  auto module = make_module(0);
  auto train = train_loader();
  auto averaging = std::make_shared<WeightAveraging>(
      WeightAveragingOptions().average(WeightAverageOptions().decay(0.5)));
  auto watcher = std::make_shared<Watcher>(*averaging);
  Trainer trainer(options().max_epochs(2).enable_checkpointing(false));
  trainer.add_callback(averaging).add_callback(watcher);
  const FitResult result = trainer.fit(*module, train, &val_loader_);
  ASSERT_EQ(result.steps, 16);
  ASSERT_EQ(watcher->snapshots.size(), 16U);
  EXPECT_EQ(averaging->average().count(), 16);
  EXPECT_EQ(watcher->validation_batches, 4); // 2 epochs x 64/40
  EXPECT_TRUE(watcher->validated_on_average);
  EXPECT_TRUE(watcher->trains_on_its_own_weights);
  // The EMA of the weights after each step, by hand: get_ema_avg_fn's
  // decay * average + (1 - decay) * current.
  std::vector<at::Tensor> expected = watcher->snapshots[0];
  for (size_t s = 1; s < watcher->snapshots.size(); ++s) {
    for (size_t i = 0; i < expected.size(); ++i) {
      const at::Tensor& current = watcher->snapshots[s][i];
      expected[i] = at::isFloatingType(current.scalar_type())
                        ? expected[i] * 0.5 + current * 0.5
                        : current;
    }
  }
  const std::vector<at::Tensor> final_weights = all_weights(*module);
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(final_weights[i].equal(expected[i])) << "weight " << i;
  }
  EXPECT_EQ(
      nlohmann::json::parse(result.callback_summary).at("weight_averaging"),
      nlohmann::json({{"average", "ema"}, {"decay", 0.5}, {"updates", 16}}));
}

TEST_F(TrainerTest, WeightAveragingUpdatesOnTheStepsAndEpochsItIsGiven) {
  auto train = train_loader(); // 8 steps an epoch
  auto fit = [&](WeightAveragingOptions schedule) {
    auto module = make_module(0);
    auto averaging = std::make_shared<WeightAveraging>(schedule);
    Trainer trainer(options().max_epochs(3).enable_checkpointing(false));
    trainer.add_callback(averaging);
    trainer.fit(*module, train, &val_loader_);
    return averaging->average().count();
  };
  // Steps 0, 5, 10, 15, 20 of 24.
  EXPECT_EQ(fit(WeightAveragingOptions().update_every_n_steps(5)), 5);
  // Steps 10..23, every other: 10, 12, ..., 22.
  EXPECT_EQ(
      fit(WeightAveragingOptions()
              .update_every_n_steps(2)
              .update_starting_at_step(10)),
      7);
  // Epoch ends only, from the second: SWA's classic schedule.
  EXPECT_EQ(
      fit(WeightAveragingOptions()
              .average(WeightAverageOptions().average("swa"))
              .update_every_n_steps(0)
              .update_starting_at_epoch(1)),
      2);
}

TEST_F(
    TrainerTest, WeightAveragingCheckpointsHoldTheAverageAndResumeBitForBit) {
  auto train = train_loader();
  // An EMA after every step; SWA's mean of epoch ends, whose epoch-2 update
  // comes after the checkpoint of epoch 2's validation and is made on resume.
  for (const WeightAveragingOptions& schedule :
       {WeightAveragingOptions().average(WeightAverageOptions().decay(0.7)),
        WeightAveragingOptions()
            .average(WeightAverageOptions().average("swa"))
            .update_every_n_steps(0)
            .update_starting_at_epoch(0)}) {
    SCOPED_TRACE(schedule.average().average());
    auto straight = make_module(0);
    auto straight_averaging = std::make_shared<WeightAveraging>(schedule);
    Trainer(options().max_epochs(4))
        .add_callback(straight_averaging)
        .fit(*straight, train, &val_loader_);

    auto first_half = make_module(0);
    auto first_averaging = std::make_shared<WeightAveraging>(schedule);
    const FitResult half = Trainer(options().max_epochs(2))
                               .add_callback(first_averaging)
                               .fit(*first_half, train, &val_loader_);
    // The weights being trained are in the checkpoint's callback state.
    auto loaded = make_module(99);
    CheckpointState state;
    load_checkpoint(half.checkpoint_path, *loaded, &state);
    ASSERT_EQ(state.callback_tensors.count("WeightAveraging"), 1u);
    ASSERT_EQ(
        state.callback_tensors.at("WeightAveraging").size(),
        all_weights(*loaded).size());

    auto resumed = make_module(99);
    auto resumed_averaging = std::make_shared<WeightAveraging>(schedule);
    const FitResult rest =
        Trainer(options().max_epochs(4))
            .add_callback(resumed_averaging)
            .fit(*resumed, train, &val_loader_, half.checkpoint_path);
    EXPECT_EQ(rest.steps, 32);
    EXPECT_EQ(
        resumed_averaging->average().count(),
        straight_averaging->average().count());
    const auto a = all_weights(*straight);
    const auto b = all_weights(*resumed);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(a[i].equal(b[i])) << "weight " << i;
    }
  }
}

// Saves a checkpoint in its on_fit_end, after WeightAveraging's.
class SaveAtFitEnd : public Callback {
 public:
  explicit SaveAtFitEnd(std::string path) : path_(std::move(path)) {}
  std::string state_key() const override {
    return "SaveAtFitEnd";
  }
  void on_fit_end(Trainer& trainer, Module&) override {
    trainer.save_checkpoint(path_);
  }

 private:
  std::string path_;
};

TEST_F(TrainerTest, WeightAveragingHoldsTheAverageInEveryCheckpointsModel) {
  // Written at validation's end, and by a callback after the fit's end.
  auto train = train_loader();
  auto module = make_module(0);
  auto averaging = std::make_shared<WeightAveraging>(
      WeightAveragingOptions().average(WeightAverageOptions().decay(0.6)));
  auto watcher = std::make_shared<Watcher>(*averaging);
  const std::string at_end = dir_.path() + "/at_end.ckpt";
  Trainer trainer(options().max_epochs(2));
  trainer.add_callback(averaging).add_callback(watcher).add_callback(
      std::make_shared<SaveAtFitEnd>(at_end));
  const FitResult result = trainer.fit(*module, train, &val_loader_);
  const auto average = all_weights(*module); // the fit ended with it
  for (const std::string& path : {result.checkpoint_path, at_end}) {
    SCOPED_TRACE(path);
    auto loaded = make_module(99);
    CheckpointState state;
    load_checkpoint(path, *loaded, &state);
    const auto in_file = all_weights(*loaded);
    const auto& trained = state.callback_tensors.at("WeightAveraging");
    for (size_t i = 0; i < in_file.size(); ++i) {
      EXPECT_TRUE(in_file[i].equal(average[i])) << "weight " << i;
      // The state keeps the weights the last step left.
      EXPECT_TRUE(trained[i].equal(watcher->snapshots.back()[i]))
          << "weight " << i;
    }
  }
}

// Fails from its third validation batch on.
class FailingValidation : public ImageClassifier {
 public:
  explicit FailingValidation(ImageClassifier&& base)
      : ImageClassifier(std::move(base)) {}
  void validation_step(
      const data::Batch& batch,
      int64_t batch_idx,
      MetricCollection& metrics) override {
    if (++calls_ > 2) {
      throw Error("validation failed");
    }
    ImageClassifier::validation_step(batch, batch_idx, metrics);
  }

 private:
  int calls_ = 0;
};

TEST_F(TrainerTest, AValidationThatThrowsLeavesTheTrainedWeightsIn) {
  // Epoch 1's validation has 2 batches; epoch 2's first one fails.
  FailingValidation module(std::move(*make_module(0)));
  auto train = train_loader();
  auto averaging = std::make_shared<WeightAveraging>(
      WeightAveragingOptions().average(WeightAverageOptions().decay(0.5)));
  auto watcher = std::make_shared<Watcher>(*averaging);
  Trainer trainer(options().max_epochs(2).num_sanity_val_steps(0));
  trainer.add_callback(averaging).add_callback(watcher);
  EXPECT_THROWS_WITH(
      Error, trainer.fit(module, train, &val_loader_), "validation failed");
  const auto now = all_weights(module);
  for (size_t i = 0; i < now.size(); ++i) {
    EXPECT_TRUE(now[i].equal(watcher->snapshots.back()[i])) << "weight " << i;
  }
}

} // namespace
} // namespace hotloop::train
