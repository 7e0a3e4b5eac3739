#include "hotloop/compress/quantize.h"
#include "hotloop/compress/observer.h"
#include "hotloop/compress/quantized_engine.h"
#include "hotloop/compress/quantized_net.h"
#include "hotloop/core/error.h"
#include "hotloop/train/checkpoint.h"
#include "reference_settings.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include <algorithm>
#include <fstream>

namespace hotloop::compress {
namespace {

using hotloop::testing::kObservedTolerance;
using hotloop::testing::max_relative_difference;
using hotloop::testing::Reference;
using ::testing::HasSubstr;

const Reference& reference() {
  return Reference::get("quantization.txt");
}

at::Tensor ref(
    const std::string& c, const std::string& field, const std::string& name) {
  return hotloop::testing::to_tensor(
      reference().one(c, field, name), at::kFloat);
}

void load_params(torch::nn::Module& model, const std::string& c) {
  const at::NoGradGuard no_grad;
  auto parameters = model.named_parameters();
  auto buffers = model.named_buffers();
  for (const auto& entry : reference().all(c, "param")) {
    at::Tensor target = parameters.contains(entry.name) ? parameters[entry.name]
                                                        : buffers[entry.name];
    target.copy_(hotloop::testing::to_tensor(entry, target.scalar_type()));
  }
}

std::vector<at::Tensor> calibration(const std::string& c) {
  std::vector<at::Tensor> batches;
  for (int i = 0; i < 3; ++i) {
    batches.push_back(ref(c, "input", "calibration." + std::to_string(i)));
  }
  return batches;
}

models::FashionCnn reference_cnn() {
  models::FashionCnnOptions options;
  options.channels = {8, 16};
  options.hidden = 32;
  options.image_size = 12;
  models::FashionCnn model(options);
  load_params(*model, "cnn");
  model->eval();
  return model;
}

models::Mlp reference_mlp(const std::string& c) {
  models::Mlp model(models::MlpOptions(20, 5).hidden({32, 16}));
  load_params(*model, c);
  model->eval();
  return model;
}

// Zero points and the weights' scales equal torch.ao's, element for
// element; the activations' scales, which the calibration's float forward
// passes decide, to kObservedTolerance.
void expect_same_qparams(
    const std::string& c, const CalibrationRecord& record) {
  for (size_t i = 0; i < record.activations.size(); ++i) {
    const std::string name = "activation." + std::to_string(i);
    EXPECT_LE(
        max_relative_difference(
            record.activations[i].scale, ref(c, "qparams", name + ".scale")),
        kObservedTolerance)
        << c << " " << name << ": " << record.activations[i].scale << " vs "
        << ref(c, "qparams", name + ".scale");
    EXPECT_TRUE(record.activations[i]
                    .zero_point.to(at::kFloat)
                    .equal(ref(c, "qparams", name + ".zero_point")))
        << c << " " << name;
  }
  for (size_t i = 0; i < record.weights.size(); ++i) {
    const std::string name = "weight." + std::to_string(i);
    EXPECT_TRUE(
        record.weights[i].scale.equal(ref(c, "qparams", name + ".scale")))
        << c << " " << name << " max difference "
        << (record.weights[i].scale - ref(c, "qparams", name + ".scale"))
               .abs()
               .max();
    EXPECT_TRUE(record.weights[i]
                    .zero_point.to(at::kFloat)
                    .equal(ref(c, "qparams", name + ".zero_point")))
        << c << " " << name;
  }
}

class Quantize : public testing::ReferenceSettingsTest {
 protected:
  // The reference ran on onednn.
  void SetUp() override {
    ReferenceSettingsTest::SetUp();
    select_quantized_engine("onednn");
  }
};

TEST_F(Quantize, StaticCnnHasTorchAosScalesAndZeroPointsAndOutputs) {
  models::FashionCnn model = reference_cnn();
  CalibrationRecord record;
  QuantizedNet net = quantize_static(
      *model,
      calibration("cnn"),
      StaticQuantizationOptions().engine("onednn"),
      &record);
  ASSERT_EQ(record.activations.size(), 5u);
  ASSERT_EQ(record.weights.size(), 4u);
  expect_same_qparams("cnn", record);
  EXPECT_EQ(net->engine(), "onednn");
  const at::Tensor output = net->forward(ref("cnn", "input", "test"));
  const at::Tensor expected = ref("cnn", "output", "logits");
  // Within one quantization step of the output.
  const double step = record.activations.back().scale.item<double>();
  EXPECT_LE((output - expected).abs().max().item<double>(), step * 1.0001);
  // And near the float model.
  EXPECT_LT(
      (output - ref("cnn", "output", "float")).abs().max().item<double>(), 0.1);
}

// "auto" takes the first of x86, fbgemm, onednn, qnnpack that LibTorch
// has; each engine it has runs the int8 CNN near the float model. Debian's
// 1.13 has onednn and qnnpack; the 2.x wheels add x86 and fbgemm, whose
// activations use half the range (0..127) as torch.ao's qconfigs for them.
TEST_F(Quantize, AutoPicksTheFastestEngineAndEveryEngineRunsTheCnn) {
  const std::vector<std::string> engines = supported_quantized_engines();
  ASSERT_FALSE(engines.empty());
  std::string first;
  for (const char* name : {"x86", "fbgemm", "onednn", "qnnpack"}) {
    if (first.empty() &&
        std::find(engines.begin(), engines.end(), name) != engines.end()) {
      first = name;
    }
  }
  EXPECT_EQ(select_quantized_engine("auto"), first);
  EXPECT_EQ(quantized_engine(), first);
  models::FashionCnn model = reference_cnn();
  CalibrationRecord full_range;
  quantize_static(
      *model,
      calibration("cnn"),
      StaticQuantizationOptions().engine("onednn"),
      &full_range);
  for (const std::string& engine : engines) {
    CalibrationRecord record;
    QuantizedNet net = quantize_static(
        *model,
        calibration("cnn"),
        StaticQuantizationOptions().engine(engine),
        &record);
    EXPECT_EQ(net->engine(), engine);
    const bool reduced = engine_reduces_range(engine);
    EXPECT_EQ(reduced, engine == "x86" || engine == "fbgemm") << engine;
    ASSERT_EQ(record.activations.size(), 5u) << engine;
    ASSERT_EQ(full_range.activations.size(), 5u);
    for (size_t i = 0; i < record.activations.size(); ++i) {
      // The same observed range over 127 steps instead of 255.
      EXPECT_NEAR(
          record.activations[i].scale.item<double>(),
          full_range.activations[i].scale.item<double>() *
              (reduced ? 255.0 / 127.0 : 1.0),
          1e-6 * full_range.activations[i].scale.item<double>())
          << engine << " activation " << i;
      EXPECT_LE(
          record.activations[i].zero_point.item<int64_t>(), reduced ? 127 : 255)
          << engine;
    }
    const at::Tensor output = net->forward(ref("cnn", "input", "test"));
    EXPECT_LT(
        (output - ref("cnn", "output", "float")).abs().max().item<double>(),
        reduced ? 0.2 : 0.1)
        << engine;
  }
}

TEST_F(Quantize, StaticMlpHasTorchAosScalesAndZeroPointsAndOutputs) {
  models::Mlp model = reference_mlp("mlp");
  CalibrationRecord record;
  QuantizedNet net = quantize_static(
      *model,
      calibration("mlp"),
      StaticQuantizationOptions().engine("onednn"),
      &record);
  ASSERT_EQ(record.activations.size(), 4u);
  EXPECT_EQ(net->engine(), "onednn");
  expect_same_qparams("mlp", record);
  const at::Tensor output = net->forward(ref("mlp", "input", "test"));
  const double step = record.activations.back().scale.item<double>();
  EXPECT_LE(
      (output - ref("mlp", "output", "logits")).abs().max().item<double>(),
      step * 1.0001);
}

TEST_F(Quantize, DynamicMlpEqualsTorchAosQuantizeDynamic) {
  models::Mlp model = reference_mlp("dynamic");
  QuantizedNet net = quantize_dynamic(*model, "onednn");
  int64_t layer = 0;
  for (const QuantizedStage& stage : net->stages()) {
    if (stage.kind != QuantizedStage::Kind::kLinearDynamic) {
      continue;
    }
    const std::string name = "weight." + std::to_string(layer++);
    EXPECT_EQ(
        stage.weight.q_scale(),
        ref("dynamic", "qparams", name + ".scale").item<double>());
    EXPECT_EQ(stage.weight.q_zero_point(), 0);
  }
  EXPECT_EQ(layer, 3);
  const at::Tensor output = net->forward(ref("dynamic", "input", "test"));
  EXPECT_LT(
      (output - ref("dynamic", "output", "logits")).abs().max().item<double>(),
      1e-5);
}

TEST(Observer, MatchesTorchAosRulesOnKnownValues) {
  // MinMax, quint8 affine: scale (max - min) / 255, zero point
  // 0 - round(min / scale).
  Observer observer;
  observer.observe(at::tensor({-1.0f, 3.0f}));
  observer.observe(at::tensor({0.5f, 2.0f}));
  QParams q = observer.calculate_qparams();
  EXPECT_FLOAT_EQ(q.scale.item<float>(), 4.0f / 255);
  EXPECT_EQ(q.zero_point.item<int64_t>(), 64);
  // Reduced range (fbgemm, x86): 0..127.
  ObserverOptions reduced;
  reduced.reduce_range = true;
  Observer half(reduced);
  half.observe(at::tensor({-1.0f, 3.0f}));
  EXPECT_FLOAT_EQ(half.calculate_qparams().scale.item<float>(), 4.0f / 127);
  // Symmetric qint8: max |x| / 127.5, zero point 0.
  ObserverOptions symmetric;
  symmetric.dtype = at::kQInt8;
  symmetric.qscheme = at::kPerChannelSymmetric;
  Observer per_channel(symmetric);
  per_channel.observe(at::tensor({1.0f, -2.0f, 0.5f, 0.25f}).view({2, 2}));
  q = per_channel.calculate_qparams();
  EXPECT_TRUE(q.scale.equal(at::tensor({2.0f / 127.5f, 0.5f / 127.5f})));
  EXPECT_TRUE(q.zero_point.equal(at::zeros({2}, at::kLong)));
  // Moving average: the first batch as is, then 1% of each new one.
  Observer moving(ObserverOptions{}, /*moving_average=*/true);
  moving.observe(at::tensor({0.0f, 1.0f}));
  moving.observe(at::tensor({0.0f, 2.0f}));
  EXPECT_FLOAT_EQ(moving.max_val().item<float>(), 1.01f);
  // Nothing seen: torch.ao's defaults.
  q = Observer().calculate_qparams();
  EXPECT_EQ(q.scale.item<float>(), 1.0f);
  EXPECT_EQ(q.zero_point.item<int64_t>(), 0);
}

TEST_F(Quantize, Int8CheckpointsRoundTripAndRefuseTheWrongKind) {
  hotloop::testing::TempDir dir;
  models::FashionCnn model = reference_cnn();
  QuantizedNet net = quantize_static(*model, calibration("cnn"));
  const std::string path = dir.file("int8.ckpt");
  save_quantized(path, *net, R"({"data": {"classes": ["a"]}})");
  EXPECT_TRUE(is_quantized_checkpoint(path));
  QuantizedNet loaded = load_quantized(path);
  const at::Tensor x = ref("cnn", "input", "test");
  EXPECT_TRUE(loaded->forward(x).equal(net->forward(x)));
  EXPECT_EQ(loaded->kind(), "fashion_cnn static");
  EXPECT_EQ(loaded->weight_bytes(), net->weight_bytes());
  // The file is sealed like any checkpoint.
  EXPECT_TRUE(train::read_checkpoint_seal(path).intact);

  // An int8 checkpoint into a float model, and a float one as int8.
  models::FashionCnn float_model = reference_cnn();
  EXPECT_THAT(
      [&] { train::load_checkpoint(path, *float_model); },
      ::testing::ThrowsMessage<Error>(HasSubstr(
          path + ": an int8 (quantized) checkpoint, not a float model's")));
  const std::string float_path = dir.file("float.ckpt");
  train::save_checkpoint(float_path, *float_model);
  EXPECT_FALSE(is_quantized_checkpoint(float_path));
  EXPECT_THAT(
      [&] { load_quantized(float_path); },
      ::testing::ThrowsMessage<Error>(HasSubstr(
          float_path + ": a float model's checkpoint, not an int8 one: "
                       "quantize it first")));
}

TEST_F(Quantize, LayersWithoutQuantizedKernelsAreNamed) {
  models::Mlp gelu(models::MlpOptions(20, 5).hidden({8}).activation("gelu"));
  EXPECT_THAT(
      [&] {
        quantize_static(*gelu, {at::randn({2, 20})});
      },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr(
          "cannot quantize an mlp with gelu statically: LibTorch has no "
          "quantized gelu kernel")));
  // Dynamic keeps GELU in float.
  QuantizedNet dynamic = quantize_dynamic(*gelu, "onednn");
  EXPECT_EQ(
      dynamic->forward(at::randn({2, 20})).sizes(), (at::IntArrayRef{2, 5}));
  torch::nn::Linear linear(4, 2);
  EXPECT_THAT(
      [&] {
        quantize_static(*linear, {at::randn({2, 4})});
      },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr(
          "cannot quantize torch::nn::LinearImpl statically: hotloop has "
          "quantized kernels for fashion_cnn and mlp")));
  models::FashionCnn model = reference_cnn();
  EXPECT_THAT(
      [&] { quantize_static(*model, {}); },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr(
          "static quantization needs at least one calibration batch")));
  EXPECT_THAT(
      [&] { select_quantized_engine("tpu"); },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr(
          "quantized engine 'tpu' is not in this LibTorch (it has: ")));
}

} // namespace
} // namespace hotloop::compress
