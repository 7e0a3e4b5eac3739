#include "hotloop/compress/quantization_aware_training.h"
#include "hotloop/compress/quantized_engine.h"
#include "hotloop/core/error.h"
#include "train/trainer_fixture.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <sstream>

namespace hotloop::compress {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Records whether the observers were on when each stage began, and the
// BatchNorm mode of each training epoch.
class Spy : public train::Callback {
 public:
  std::string state_key() const override {
    return "Spy";
  }
  void on_train_batch_start(
      train::Trainer&,
      train::Module& module,
      const data::Batch&,
      int64_t batch_idx) override {
    if (batch_idx == 0) {
      QatNetImpl& net = QuantizationAwareTraining::network_of(module);
      train_observers.push_back(net.quant()->observer_enabled());
      bn_training.push_back(
          net.features()[0]->as<QatConvBnReLU2dImpl>()->bn()->is_training());
    }
  }
  void on_validation_start(train::Trainer&, train::Module& module) override {
    validation_observers.push_back(QuantizationAwareTraining::network_of(module)
                                       .quant()
                                       ->observer_enabled());
  }
  std::vector<bool> train_observers;
  std::vector<bool> validation_observers;
  std::vector<bool> bn_training;
};

class QuantizationAwareTrainingTest : public train::TrainerTest {
 protected:
  std::shared_ptr<train::ImageClassifier> qat_module() {
    auto float_module = train::make_module(11);
    auto net =
        prepare_qat(*float_module->network(), QatOptions().engine("onednn"));
    optim::OptimizerOptions adam;
    adam.name = "adam";
    adam.lr = 1e-3;
    return std::make_shared<train::ImageClassifier>(
        torch::nn::AnyModule(net), adam, optim::SchedulerOptions(), 1);
  }
  std::string engine_ = quantized_engine();
  void TearDown() override {
    select_quantized_engine(engine_);
  }
};

TEST_F(QuantizationAwareTrainingTest, SwitchesObserversByStageAndEpoch) {
  auto module = qat_module();
  auto spy = std::make_shared<Spy>();
  auto qat = std::make_shared<QuantizationAwareTraining>(
      QuantizationAwareTrainingOptions()
          .freeze_bn_epoch(1)
          .disable_observer_epoch(2)
          .output(dir_.file("int8.ckpt")));
  std::ostringstream out;
  train::Trainer trainer(options().max_epochs(3), out);
  trainer.add_callback(qat);
  trainer.add_callback(spy);
  data::DataLoader loader = train_loader();
  trainer.fit(*module, loader, &val_loader_);
  // Observers on in training until epoch 2, never in validation.
  EXPECT_EQ(spy->train_observers, (std::vector<bool>{true, true, false}));
  EXPECT_EQ(
      spy->validation_observers, (std::vector<bool>{false, false, false}));
  // BatchNorm follows the batch statistics in epoch 0 only.
  EXPECT_EQ(spy->bn_training, (std::vector<bool>{true, false, false}));
  // The int8 model, written; its predictions close to the QAT model's.
  ASSERT_TRUE(qat->converted().has_value());
  EXPECT_TRUE(is_quantized_checkpoint(dir_.file("int8.ckpt")));
  EXPECT_THAT(
      out.str(),
      HasSubstr(
          "quantization-aware training: int8 model (onednn) written to " +
          dir_.file("int8.ckpt")));
  QuantizedNet int8 = *qat->converted();
  QatNetImpl& net = QuantizationAwareTraining::network_of(*module);
  net.eval();
  const at::NoGradGuard no_grad;
  int64_t agree = 0, total = 0;
  for (const data::Batch& batch : val_loader_) {
    agree += (net.forward(batch.input).argmax(1) ==
              int8->forward(batch.input).argmax(1))
                 .sum()
                 .item<int64_t>();
    total += batch.input.size(0);
  }
  EXPECT_GE(agree, total * 95 / 100);
  const nlohmann::json summary = qat->summary();
  EXPECT_EQ(
      summary.at("quantization_aware_training").at("kind"), "fashion_cnn qat");
}

TEST_F(QuantizationAwareTrainingTest, NeedsAPreparedNetworkAndKnownStages) {
  auto plain = train::make_module(12);
  std::ostringstream out;
  train::Trainer trainer(options().max_epochs(1), out);
  trainer.add_callback(std::make_shared<QuantizationAwareTraining>());
  data::DataLoader loader = train_loader();
  EXPECT_THAT(
      [&] { trainer.fit(*plain, loader); },
      ::testing::ThrowsMessage<ConfigError>(
          HasSubstr("QuantizationAwareTraining needs a network prepared with "
                    "compress::prepare_qat")));
  EXPECT_THAT(
      [] {
        QuantizationAwareTraining(
            QuantizationAwareTrainingOptions().observer_enabled_stages(
                {"train", "fit"}));
      },
      ::testing::ThrowsMessage<ConfigError>(
          HasSubstr("expected train, validate or test, got 'fit'")));
  EXPECT_THAT(
      [] {
        QuantizationAwareTraining(
            QuantizationAwareTrainingOptions().freeze_bn_epoch(-2));
      },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr(
          "quantization.freeze_bn_epoch must be an epoch (from 0) or -1, got "
          "-2")));
}

} // namespace
} // namespace hotloop::compress
