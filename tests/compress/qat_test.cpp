#include "hotloop/compress/qat.h"
#include "hotloop/compress/quantized_engine.h"
#include "hotloop/core/error.h"
#include "reference_settings.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/nn/modules/conv.h>

namespace hotloop::compress {
namespace {

using hotloop::testing::kObservedTolerance;
using hotloop::testing::max_difference;
using hotloop::testing::max_relative_difference;
using hotloop::testing::Reference;
using ::testing::HasSubstr;

const Reference& reference() {
  return Reference::get("qat.txt");
}

at::Tensor ref(
    const std::string& c,
    const std::string& field,
    const std::string& name,
    at::ScalarType dtype = at::kFloat) {
  return hotloop::testing::to_tensor(reference().one(c, field, name), dtype);
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

std::shared_ptr<torch::nn::Module> reference_model(const std::string& c) {
  if (c.rfind("cnn", 0) == 0) {
    models::FashionCnnOptions options;
    options.channels = {8, 16};
    options.hidden = 32;
    options.image_size = 12;
    models::FashionCnn model(options);
    load_params(*model, c);
    return model.ptr();
  }
  models::Mlp model(models::MlpOptions(20, 5).hidden({32, 16}));
  load_params(*model, c);
  return model.ptr();
}

// The reference's training: SGD (lr 0.05) on cross-entropy, four steps, the
// BatchNorm statistics frozen before the last.
void train_as_the_reference(QatNetImpl& net, const std::string& c) {
  constexpr int kSteps = 4;
  constexpr double kLr = 0.05;
  net.train();
  for (int step = 0; step < kSteps; ++step) {
    if (step == kSteps - 1) {
      net.freeze_bn();
    }
    const std::string i = std::to_string(step);
    const at::Tensor loss = at::cross_entropy_loss(
        net.forward(ref(c, "input", "batch." + i)),
        ref(c, "input", "labels." + i, at::kLong));
    for (auto& p : net.parameters()) {
      p.mutable_grad() = at::Tensor();
    }
    loss.backward();
    const at::NoGradGuard no_grad;
    for (auto& p : net.parameters()) {
      if (p.grad().defined()) {
        p.add_(p.grad(), -kLr);
      }
    }
  }
}

class Qat : public testing::ReferenceSettingsTest {
 protected:
  // Prepares the case's model, trains it as the reference did, and checks
  // every tensor of the QAT model, its output, the converted model's
  // qparams (zero points exact, scales to kObservedTolerance) and its
  // output (within one quantization step).
  void expect_torch_aos_qat(
      const std::string& c,
      const QatOptions& options,
      bool disable_observers = false) {
    auto model = reference_model(c);
    model->train();
    QatNet net = prepare_qat(*model, options);
    train_as_the_reference(*net, c);
    if (disable_observers) {
      net->enable_observers(false);
    }
    auto parameters = net->named_parameters();
    auto buffers = net->named_buffers();
    for (const auto& entry : reference().all(c, "trained")) {
      const at::Tensor* mine = parameters.find(entry.name);
      if (mine == nullptr) {
        mine = buffers.find(entry.name);
      }
      ASSERT_NE(mine, nullptr) << c << " " << entry.name;
      const at::Tensor expected =
          hotloop::testing::to_tensor(entry, at::kFloat).reshape(mine->sizes());
      const bool quantizer_state =
          entry.name.find("_quant") != std::string::npos ||
          entry.name.find("post_process") != std::string::npos;
      if (quantizer_state) {
        EXPECT_LE(max_relative_difference(*mine, expected), kObservedTolerance)
            << c << " " << entry.name << ": " << *mine << " vs " << expected;
      } else {
        // Weights after four steps of the same ops, summed in the same
        // order on one thread.
        EXPECT_LE(max_difference(*mine, expected), 1e-6)
            << c << " " << entry.name;
      }
    }
    net->eval();
    const at::Tensor test = ref(c, "input", "test");
    {
      const at::NoGradGuard no_grad;
      EXPECT_LE(
          max_difference(net->forward(test), ref(c, "output", "qat")), 1e-5)
          << c;
    }
    CalibrationRecord record;
    QuantizedNet int8 = convert_qat(*net, &record);
    EXPECT_EQ(int8->kind(), net->source() + " qat");
    EXPECT_EQ(int8->engine(), options.engine());
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
      EXPECT_LE(
          max_relative_difference(
              record.weights[i].scale, ref(c, "qparams", name + ".scale")),
          kObservedTolerance)
          << c << " " << name;
      EXPECT_TRUE(record.weights[i]
                      .zero_point.to(at::kFloat)
                      .equal(ref(c, "qparams", name + ".zero_point")))
          << c << " " << name;
    }
    const double step = record.activations.back().scale.item<double>();
    EXPECT_LE(
        max_difference(int8->forward(test), ref(c, "output", "int8")),
        step * 1.0001)
        << c;
  }
};

TEST_F(Qat, FusedFakeQuantCnnTrainsAndConvertsAsTorchAoOnOnednn) {
  expect_torch_aos_qat("cnn", QatOptions().engine("onednn"));
}

TEST_F(Qat, VersionZeroFakeQuantizeCnnTrainsAndConvertsAsTorchAo) {
  expect_torch_aos_qat(
      "cnn_v0", QatOptions().engine("onednn").fused(false), true);
}

TEST_F(Qat, QnnpackMlpHasPerTensorWeightsAsTorchAo) {
  expect_torch_aos_qat("mlp", QatOptions().engine("qnnpack"));
}

TEST_F(Qat, MinMaxObserverMlpTrainsAndConvertsAsTorchAo) {
  expect_torch_aos_qat(
      "mlp_minmax",
      QatOptions().engine("onednn").fused(false).observer("minmax"));
}

TEST_F(Qat, FakeQuantizeMatchesAtensOpsAndHonoursItsFlags) {
  FakeQuantizeOptions options;
  options.fused = false;
  options.observer_kind = "minmax";
  FakeQuantize fq(options);
  const at::Tensor x = at::linspace(-1, 3, 17);
  const at::Tensor y = fq->forward(x);
  // MinMax over [-1, 3] on 0..255: scale 4/255, zero point 64.
  EXPECT_FLOAT_EQ(fq->scale().item<float>(), 4.0f / 255);
  EXPECT_EQ(fq->zero_point().item<int>(), 64);
  EXPECT_TRUE(
      y.equal(at::fake_quantize_per_tensor_affine(x, 4.0 / 255, 64, 0, 255)));
  // Observer off: the range stays; fake quant off: the input comes back.
  fq->enable_observer(false);
  fq->forward(x * 10);
  EXPECT_FLOAT_EQ(fq->max_val().item<float>(), 3.0f);
  fq->enable_fake_quant(false);
  EXPECT_TRUE(fq->forward(x * 10).equal(x * 10));
  EXPECT_FALSE(fq->observer_enabled());
  EXPECT_FALSE(fq->fake_quant_enabled());
  // The straight-through gradient: 1 inside the range, 0 outside.
  fq->enable_fake_quant(true);
  const at::Tensor z = at::tensor({-2.0f, 0.5f, 4.0f}).requires_grad_();
  fq->forward(z).sum().backward();
  EXPECT_TRUE(z.grad().equal(at::tensor({0.0f, 1.0f, 0.0f})));
}

TEST_F(Qat, BadSettingsAreOneLineErrors) {
  auto model = reference_model("cnn");
  EXPECT_THAT(
      [&] { prepare_qat(*model, QatOptions().observer("histogram")); },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr(
          "quantization.observer must be moving_average or minmax, got "
          "'histogram'")));
  EXPECT_THAT(
      [&] { prepare_qat(*model, QatOptions().observer("minmax")); },
      ::testing::ThrowsMessage<ConfigError>(
          HasSubstr("quantization.observer=minmax needs "
                    "quantization.fused=false")));
  EXPECT_THAT(
      [&] { prepare_qat(*model, QatOptions().engine("fbgemm2")); },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr("fbgemm2")));
  models::Mlp gelu(models::MlpOptions(4, 2).hidden({3}).activation("gelu"));
  EXPECT_THAT(
      [&] { prepare_qat(*gelu); },
      ::testing::ThrowsMessage<ConfigError>(
          HasSubstr("cannot train an mlp with gelu quantization-aware")));
  torch::nn::Conv2d conv(1, 1, 3);
  EXPECT_THAT(
      [&] { prepare_qat(*conv); },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr(
          "quantization-aware: hotloop has quantized kernels for fashion_cnn "
          "and mlp")));
}

TEST_F(Qat, AFrozenBatchNormStaysInEvaluationModeAndKeepsItsStatistics) {
  auto model = reference_model("cnn");
  QatNet net = prepare_qat(*model, QatOptions().engine("onednn"));
  net->train();
  auto* layer = net->features()[0]->as<QatConvBnReLU2dImpl>();
  EXPECT_TRUE(layer->bn()->is_training());
  net->freeze_bn();
  net->train();
  EXPECT_FALSE(layer->bn()->is_training());
  const at::Tensor mean = layer->bn()->running_mean.clone();
  net->forward(ref("cnn", "input", "batch.0"));
  EXPECT_TRUE(layer->bn()->running_mean.equal(mean));
  net->freeze_bn(false);
  net->forward(ref("cnn", "input", "batch.0"));
  EXPECT_FALSE(layer->bn()->running_mean.equal(mean));
}

TEST_F(Qat, TrainsOnCudaWhereThereIsOne) {
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device";
  }
  auto model = reference_model("cnn");
  QatNet net = prepare_qat(*model, QatOptions().engine("onednn"));
  net->to(at::kCUDA);
  net->train();
  const at::Tensor loss = at::cross_entropy_loss(
      net->forward(ref("cnn", "input", "batch.0").cuda()),
      ref("cnn", "input", "labels.0", at::kLong).cuda());
  loss.backward();
  EXPECT_TRUE(
      net->features()[0]->as<QatConvBnReLU2dImpl>()->weight().grad().defined());
  net->eval();
  QuantizedNet int8 = convert_qat(*net);
  EXPECT_EQ(
      int8->forward(ref("cnn", "input", "test")).sizes(),
      (std::vector<int64_t>{16, 10}));
}

} // namespace
} // namespace hotloop::compress
