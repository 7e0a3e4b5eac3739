#include "hotloop/train/precision.h"

#include "hotloop/core/error.h"
#include "test_util.h"

#include <ATen/autocast_mode.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include <string>
#include <utility>
#include <vector>

namespace hotloop::train {
namespace {

constexpr auto kCpu = c10::DeviceType::CPU;

// The thread's CPU autocast state.
std::pair<bool, at::ScalarType> cpu_autocast_state() {
  return {is_autocast_enabled(kCpu), autocast_dtype(kCpu)};
}

// The nesting level: increment_nesting returns the level it enters.
int autocast_nesting() {
  const int level = at::autocast::increment_nesting() - 1;
  at::autocast::decrement_nesting();
  return level;
}

TEST(Precision, ParsesLightningsPrecisionStrings) {
  const std::vector<std::pair<std::string, PrecisionMode>> table = {
      {"32-true", PrecisionMode::k32True},
      {"32", PrecisionMode::k32True},
      {"16-mixed", PrecisionMode::k16Mixed},
      {"16", PrecisionMode::k16Mixed},
      {"bf16-mixed", PrecisionMode::kBf16Mixed},
      {"bf16", PrecisionMode::kBf16Mixed},
      {"bf16-true", PrecisionMode::kBf16True},
      {"64-true", PrecisionMode::k64True},
      {"64", PrecisionMode::k64True},
  };
  for (const auto& [text, mode] : table) {
    EXPECT_EQ(parse_precision_mode(text), mode) << text;
  }
  EXPECT_STREQ(to_string(PrecisionMode::k32True), "32-true");
  EXPECT_STREQ(to_string(PrecisionMode::k16Mixed), "16-mixed");
  EXPECT_STREQ(to_string(PrecisionMode::kBf16Mixed), "bf16-mixed");
  EXPECT_STREQ(to_string(PrecisionMode::kBf16True), "bf16-true");
  EXPECT_STREQ(to_string(PrecisionMode::k64True), "64-true");
}

TEST(Precision, RejectsOtherStringsNamingTheFlag) {
  for (const std::string text : {"16-true", "64-mixed", "fp16", "BF16", ""}) {
    EXPECT_THROWS_WITH(
        ConfigError,
        parse_precision_mode(text),
        "trainer.precision: expected one of 32-true, 16-mixed, bf16-mixed, "
        "bf16-true, 64-true, got '" +
            text + "'");
  }
}

TEST(Precision, SixteenMixedNeedsCuda) {
  EXPECT_THROWS_WITH(
      ConfigError,
      Precision(PrecisionMode::k16Mixed, torch::kCPU),
      "trainer.precision=16-mixed needs a CUDA device; use bf16-mixed on CPU");
  EXPECT_THROWS_WITH(
      ConfigError,
      Precision(PrecisionMode::kBf16Mixed, c10::Device("meta")),
      "trainer.precision=bf16-mixed needs a CPU or CUDA device, got meta");
  EXPECT_THROWS_WITH(
      ConfigError,
      AutocastGuard(c10::DeviceType::Meta, at::kBFloat16),
      "autocast: expected a CPU or CUDA device type, got meta");
  // Building for CUDA needs no GPU; only running under it does.
  EXPECT_TRUE(Precision(PrecisionMode::k16Mixed, torch::kCUDA).needs_scaler());
}

TEST(Precision, ReportsDtypeAndScalerPerMode) {
  const std::vector<std::pair<PrecisionMode, at::ScalarType>> table = {
      {PrecisionMode::k32True, at::kFloat},
      {PrecisionMode::kBf16Mixed, at::kBFloat16},
      {PrecisionMode::kBf16True, at::kBFloat16},
      {PrecisionMode::k64True, at::kDouble},
  };
  for (const auto& [mode, dtype] : table) {
    const Precision precision(mode, torch::kCPU);
    EXPECT_EQ(precision.compute_dtype(), dtype) << to_string(mode);
    EXPECT_FALSE(precision.needs_scaler()) << to_string(mode);
    EXPECT_EQ(precision.mode(), mode);
    EXPECT_EQ(precision.device(), torch::kCPU);
  }
  EXPECT_EQ(
      Precision(PrecisionMode::k16Mixed, torch::kCUDA).compute_dtype(),
      at::kHalf);
}

TEST(Precision, Bf16MixedRunsLinearInBfloat16OnlyInsideTheGuard) {
  torch::manual_seed(0);
  torch::nn::Linear linear(4, 3);
  const torch::Tensor x = torch::randn({2, 4});
  const Precision precision(PrecisionMode::kBf16Mixed, torch::kCPU);
  const auto before = cpu_autocast_state();
  {
    const auto autocast = precision.autocast();
    EXPECT_TRUE(autocast.active());
    EXPECT_TRUE(is_autocast_enabled(kCpu));
    EXPECT_EQ(autocast_dtype(kCpu), at::kBFloat16);
    EXPECT_EQ(autocast_nesting(), 1);
    EXPECT_EQ(linear->forward(x).scalar_type(), at::kBFloat16);
    EXPECT_EQ(linear->weight.scalar_type(), at::kFloat); // weights stay
  }
  EXPECT_EQ(cpu_autocast_state(), before);
  EXPECT_EQ(autocast_nesting(), 0);
  EXPECT_EQ(linear->forward(x).scalar_type(), at::kFloat);
  EXPECT_EQ(torch::mm(x, x.t()).scalar_type(), at::kFloat);
}

TEST(Precision, NestedGuardsRestoreTheEnclosingState) {
  torch::nn::Linear linear(4, 3);
  const torch::Tensor x = torch::randn({2, 4});
  const auto before = cpu_autocast_state();
  {
    AutocastGuard outer(kCpu, at::kBFloat16);
    {
      // autocast(enabled=False) inside an autocast region: float32 again.
      AutocastGuard inner(kCpu, at::kBFloat16, /*enabled=*/false);
      EXPECT_FALSE(is_autocast_enabled(kCpu));
      EXPECT_EQ(autocast_nesting(), 2);
      EXPECT_EQ(linear->forward(x).scalar_type(), at::kFloat);
    }
    EXPECT_EQ(cpu_autocast_state(), std::make_pair(true, at::kBFloat16));
    EXPECT_EQ(autocast_nesting(), 1);
    EXPECT_EQ(linear->forward(x).scalar_type(), at::kBFloat16);
  }
  EXPECT_EQ(cpu_autocast_state(), before);
  EXPECT_EQ(autocast_nesting(), 0);
}

TEST(Precision, CudaGuardSetsAndRestoresTheCudaStateOnly) {
  // Autocast state is thread-local flags, so this needs no GPU. CPU autocast
  // in LibTorch 1.13 accepts only bfloat16, so the dtype restore is checked
  // on the CUDA state (default float16).
  constexpr auto kCuda = c10::DeviceType::CUDA;
  const auto cuda_before =
      std::make_pair(is_autocast_enabled(kCuda), autocast_dtype(kCuda));
  const auto cpu_before = cpu_autocast_state();
  {
    AutocastGuard guard(kCuda, at::kBFloat16);
    EXPECT_TRUE(is_autocast_enabled(kCuda));
    EXPECT_EQ(autocast_dtype(kCuda), at::kBFloat16);
    EXPECT_EQ(cpu_autocast_state(), cpu_before);
    EXPECT_EQ(autocast_nesting(), 1);
    // CPU tensors are not eligible for CUDA autocast.
    EXPECT_EQ(
        torch::mm(torch::ones({2, 2}), torch::ones({2, 2})).scalar_type(),
        at::kFloat);
  }
  EXPECT_EQ(
      std::make_pair(is_autocast_enabled(kCuda), autocast_dtype(kCuda)),
      cuda_before);
  EXPECT_EQ(autocast_nesting(), 0);
  EXPECT_THROWS_WITH(
      ConfigError,
      is_autocast_enabled(c10::DeviceType::Meta),
      "autocast: expected a CPU or CUDA device type, got meta");
}

TEST(Precision, TrueModesLeaveAutocastAlone) {
  torch::nn::Linear linear(4, 3);
  const torch::Tensor x = torch::randn({2, 4});
  for (const auto mode :
       {PrecisionMode::k32True,
        PrecisionMode::kBf16True,
        PrecisionMode::k64True}) {
    const Precision precision(mode, torch::kCPU);
    const auto autocast = precision.autocast();
    EXPECT_FALSE(autocast.active());
    EXPECT_FALSE(is_autocast_enabled(kCpu));
    EXPECT_EQ(autocast_nesting(), 0);
    EXPECT_EQ(linear->forward(x).scalar_type(), at::kFloat);
  }
}

TEST(Precision, TrueModesConvertFloatingParametersBuffersAndInputs) {
  for (const auto& [mode, dtype] :
       {std::pair{PrecisionMode::kBf16True, at::kBFloat16},
        std::pair{PrecisionMode::k64True, at::kDouble}}) {
    SCOPED_TRACE(to_string(mode));
    torch::nn::Sequential model(
        torch::nn::Linear(4, 3), torch::nn::BatchNorm1d(3));
    const Precision precision(mode, torch::kCPU);
    precision.convert_module(*model);
    for (const auto& param : model->parameters()) {
      EXPECT_EQ(param.scalar_type(), dtype);
      EXPECT_TRUE(param.requires_grad());
    }
    for (const auto& item : model->named_buffers()) {
      const auto expected =
          item.key().find("num_batches_tracked") != std::string::npos
              ? at::kLong
              : dtype;
      EXPECT_EQ(item.value().scalar_type(), expected) << item.key();
    }
    const torch::Tensor x = precision.convert_input(torch::randn({2, 4}));
    EXPECT_EQ(x.scalar_type(), dtype);
    EXPECT_EQ(model->forward(x).scalar_type(), dtype);
    const torch::Tensor labels = torch::zeros({2}, torch::kLong);
    EXPECT_TRUE(precision.convert_input(labels).is_same(labels));
  }
}

TEST(Precision, OtherModesKeepTheModuleInFloat32) {
  for (const auto mode : {PrecisionMode::k32True, PrecisionMode::kBf16Mixed}) {
    torch::nn::Linear linear(4, 3);
    const Precision precision(mode, torch::kCPU);
    precision.convert_module(*linear);
    EXPECT_EQ(linear->weight.scalar_type(), at::kFloat);
    const torch::Tensor x = torch::randn({2, 4});
    EXPECT_TRUE(precision.convert_input(x).is_same(x));
  }
}

} // namespace
} // namespace hotloop::train
