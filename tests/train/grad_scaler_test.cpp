#include "hotloop/train/grad_scaler.h"

#include "hotloop/core/error.h"
#include "test_util.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace hotloop::train {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

// One parameter [3] float32 = 1 under SGD(lr = 1).
struct OneParam {
  torch::Tensor w = torch::ones({3}).requires_grad_();
  torch::optim::SGD sgd{{w}, torch::optim::SGDOptions(1.0)};
};

// Creates the scaler's scale and tracker on CPU (as the first loss does).
void init_on_cpu(GradScaler& scaler) {
  (void)scaler.scale(torch::ones({}));
}

// One iteration whose gradient is `value` everywhere: step, then update.
bool run_step(GradScaler& scaler, OneParam& model, double value) {
  model.w.mutable_grad() = torch::full({3}, value);
  const bool stepped = scaler.step(model.sgd);
  scaler.update();
  return stepped;
}

double grad_value(char kind) {
  return kind == 'I' ? kInf : kind == 'N' ? kNan : 1.0;
}

// Runs `pattern` ('F' finite, 'I' inf, 'N' NaN gradient), one iteration per
// character; returns (scale, growth tracker) after each update.
std::vector<std::pair<double, int64_t>> run_pattern(
    GradScaler& scaler, const std::string& pattern) {
  OneParam model;
  init_on_cpu(scaler);
  std::vector<std::pair<double, int64_t>> states;
  for (const char kind : pattern) {
    run_step(scaler, model, grad_value(kind));
    states.emplace_back(scaler.get_scale(), scaler.growth_tracker());
  }
  return states;
}

std::string saved_bytes(const GradScaler& scaler) {
  torch::serialize::OutputArchive archive;
  scaler.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void load_bytes(GradScaler& scaler, const std::string& bytes) {
  std::istringstream in(bytes);
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  scaler.load(archive);
}

// PyTorch 1.13's GradScaler turns itself off without CUDA and has no CPU
// kernel for `torch._amp_update_scale_`, so these sequences are derived by
// hand from the rule of `GradScaler.update()` -> `_amp_update_scale_`
// (torch/cuda/amp/grad_scaler.py, aten/src/ATen/native/cuda/AmpKernels.cu):
//   inf/NaN found:  scale = float(scale * backoff_factor); tracker = 0
//   else:           successful = tracker + 1
//                   if successful == growth_interval:
//                     scale = float(scale * growth_factor) unless that is
//                     inf; tracker = 0
//                   else tracker = successful
TEST(GradScaler, ScaleSequenceFollowsPyTorchsUpdateRule) {
  GradScaler scaler(GradScalerOptions()
                        .init_scale(1024.0)
                        .growth_factor(4.0)
                        .backoff_factor(0.125)
                        .growth_interval(3));
  const std::vector<std::pair<double, int64_t>> expected = {
      {1024, 1},
      {1024, 2},
      {4096, 0}, // third finite step grows x4
      {4096, 1},
      {512, 0}, //             inf backs off x0.125, resets
      {512, 1},
      {512, 2},
      {2048, 0},
      {256, 0}, // NaN backs off too
      {32, 0},  //                         inf right after NaN
      {32, 1},
      {32, 2},
      {128, 0},
      {128, 1},
      {128, 2},
      {512, 0},
  };
  EXPECT_EQ(run_pattern(scaler, "FFFFIFFFNIFFFFFF"), expected);
}

#ifndef HOTLOOP_TEST_REFERENCE_DIR
#define HOTLOOP_TEST_REFERENCE_DIR "tests/reference"
#endif

// One case of tests/reference/grad_scaler.txt: PyTorch's GradScaler on a
// scripted pattern (see make_grad_scaler_reference.py).
struct ScalerCase {
  std::string name;
  GradScalerOptions options;
  int64_t optimizers = 1;
  // One string per iteration: a kind ('F', 'I', 'N') per optimizer.
  std::vector<std::string> kinds;
  struct Step {
    double scale;
    int64_t tracker;
    std::vector<int> stepped;
    std::vector<double> weights;
  };
  std::map<int64_t, Step> steps;
};

std::vector<ScalerCase> read_scaler_cases() {
  std::ifstream in(
      std::string(HOTLOOP_TEST_REFERENCE_DIR) + "/grad_scaler.txt");
  EXPECT_TRUE(in.good()) << "missing tests/reference/grad_scaler.txt";
  std::vector<ScalerCase> cases;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string kind;
    fields >> kind;
    if (kind == "case") {
      ScalerCase c;
      double init = 0, growth = 0, backoff = 0;
      int64_t interval = 0;
      fields >> c.name >> init >> growth >> backoff >> interval >> c.optimizers;
      c.options.init_scale(init)
          .growth_factor(growth)
          .backoff_factor(backoff)
          .growth_interval(interval);
      cases.push_back(c);
    } else if (kind == "pattern") {
      std::string run;
      while (fields >> run) {
        const size_t star = run.find('*');
        const int64_t count = std::stoll(run.substr(star + 1));
        for (int64_t i = 0; i < count; ++i) {
          cases.back().kinds.push_back(run.substr(0, star));
        }
      }
    } else if (kind == "step") {
      int64_t index = 0;
      ScalerCase::Step step;
      fields >> index >> step.scale >> step.tracker;
      step.stepped.resize(cases.back().optimizers);
      step.weights.resize(cases.back().optimizers);
      for (int& stepped : step.stepped) {
        fields >> stepped;
      }
      for (double& weight : step.weights) {
        fields >> weight;
      }
      cases.back().steps[index] = step;
    }
  }
  return cases;
}

TEST(GradScaler, MatchesPyTorchsGradScalerOnScriptedPatterns) {
  const std::vector<ScalerCase> cases = read_scaler_cases();
  ASSERT_EQ(cases.size(), 5u);
  for (const ScalerCase& c : cases) {
    SCOPED_TRACE(c.name);
    GradScaler scaler(c.options);
    std::vector<std::unique_ptr<OneParam>> models;
    for (int64_t i = 0; i < c.optimizers; ++i) {
      models.push_back(std::make_unique<OneParam>());
    }
    init_on_cpu(scaler);
    int64_t checked = 0;
    for (size_t i = 0; i < c.kinds.size(); ++i) {
      std::vector<int> stepped;
      for (int64_t o = 0; o < c.optimizers; ++o) {
        models[o]->w.mutable_grad() =
            torch::full({3}, grad_value(c.kinds[i][o]));
        stepped.push_back(scaler.step(models[o]->sgd) ? 1 : 0);
      }
      scaler.update();
      const auto found = c.steps.find(static_cast<int64_t>(i));
      if (found == c.steps.end()) {
        continue;
      }
      const ScalerCase::Step& expected = found->second;
      ++checked;
      EXPECT_EQ(scaler.get_scale(), expected.scale) << "iteration " << i;
      EXPECT_EQ(scaler.growth_tracker(), expected.tracker) << "iteration " << i;
      EXPECT_EQ(stepped, expected.stepped) << "iteration " << i;
      for (int64_t o = 0; o < c.optimizers; ++o) {
        EXPECT_EQ(models[o]->w[0].item<double>(), expected.weights[o])
            << "iteration " << i << ", optimizer " << o;
      }
    }
    EXPECT_EQ(checked, static_cast<int64_t>(c.steps.size()));
  }
}

TEST(GradScaler, ScaleIsRoundedToFloat32LikeTheKernel) {
  // float(double(scale) * factor) with factors that are not powers of two;
  // the values are the float32 nearest to each double product.
  GradScaler scaler(GradScalerOptions()
                        .init_scale(1.0)
                        .growth_factor(1.5)
                        .backoff_factor(0.3)
                        .growth_interval(2));
  const std::vector<std::pair<double, int64_t>> expected = {
      {0.30000001192092896, 0},
      {0.30000001192092896, 1},
      {0.45000001788139343, 0},
      {0.13500000536441803, 0},
      {0.13500000536441803, 1},
      {0.20250001549720764, 0},
      {0.20250001549720764, 1},
  };
  EXPECT_EQ(run_pattern(scaler, "IFFIFFF"), expected);
}

TEST(GradScaler, ScaleDoesNotGrowPastFloat32Range) {
  const double big = std::ldexp(1.0, 127); // x2 would be inf in float32
  GradScaler scaler(GradScalerOptions().init_scale(big).growth_interval(1));
  const std::vector<std::pair<double, int64_t>> expected = {{big, 0}};
  EXPECT_EQ(run_pattern(scaler, "F"), expected);
}

TEST(GradScaler, ScaleMultipliesTheLossAsPyTorchDoes) {
  GradScaler scaler;
  const torch::Tensor scaled = scaler.scale(torch::tensor(3.0));
  // A 0-dim loss times the [1] float32 scale tensor.
  EXPECT_EQ(scaled.sizes(), torch::IntArrayRef({1}));
  EXPECT_EQ(scaled.scalar_type(), torch::kFloat);
  EXPECT_EQ(scaled.item<double>(), 3.0 * 65536.0);
  EXPECT_EQ(scaler.scale_tensor().scalar_type(), torch::kFloat);
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

TEST(GradScaler, UnscaledGradientsEqualUnscaledBackwardExactly) {
  torch::manual_seed(0);
  torch::nn::Linear reference(4, 3);
  torch::nn::Linear model(4, 3);
  {
    torch::NoGradGuard no_grad;
    model->weight.copy_(reference->weight);
    model->bias.copy_(reference->bias);
  }
  const torch::Tensor x = torch::randn({8, 4});
  reference->forward(x).pow(2).mean().backward();

  GradScaler scaler; // 2^16: dividing by a power of two is exact
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  scaler.scale(model->forward(x).pow(2).mean()).backward();
  EXPECT_FALSE(torch::equal(model->weight.grad(), reference->weight.grad()));
  scaler.unscale_(sgd);
  EXPECT_TRUE(torch::equal(model->weight.grad(), reference->weight.grad()));
  EXPECT_TRUE(torch::equal(model->bias.grad(), reference->bias.grad()));
}

TEST(GradScaler, StepAfterUnscaleUsesTheGradientsUnscaledOnce) {
  GradScaler scaler(GradScalerOptions().init_scale(8.0));
  OneParam model;
  init_on_cpu(scaler);
  model.w.mutable_grad() = torch::full({3}, 16.0);
  scaler.unscale_(model.sgd);
  EXPECT_TRUE(torch::equal(model.w.grad(), torch::full({3}, 2.0)));
  EXPECT_TRUE(scaler.step(model.sgd));
  EXPECT_TRUE(torch::equal(model.w.detach(), torch::full({3}, -1.0)));
}

TEST(GradScaler, InfGradientSkipsTheStepAndHalvesTheScale) {
  GradScaler scaler;
  OneParam model;
  init_on_cpu(scaler);
  model.w.mutable_grad() = torch::tensor({1.0f, float(kInf), 2.0f});
  EXPECT_FALSE(scaler.step(model.sgd));
  scaler.update();
  EXPECT_TRUE(torch::equal(model.w.detach(), torch::ones({3})));
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

TEST(GradScaler, NanGradientSkipsTheStepAndHalvesTheScale) {
  GradScaler scaler;
  OneParam model;
  init_on_cpu(scaler);
  EXPECT_TRUE(run_step(scaler, model, 65536.0)); // w = 1 - 1
  EXPECT_EQ(scaler.growth_tracker(), 1);
  model.w.mutable_grad() = torch::tensor({1.0f, 2.0f, float(kNan)});
  EXPECT_FALSE(scaler.step(model.sgd));
  scaler.update();
  EXPECT_TRUE(torch::equal(model.w.detach(), torch::zeros({3})));
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

TEST(GradScaler, InfInOneOptimizerBacksOffButTheOtherStillSteps) {
  GradScaler scaler(GradScalerOptions().init_scale(4.0));
  OneParam first;
  OneParam second;
  init_on_cpu(scaler);
  first.w.mutable_grad() = torch::full({3}, 4.0);
  second.w.mutable_grad() = torch::full({3}, kInf);
  EXPECT_TRUE(scaler.step(first.sgd));
  EXPECT_FALSE(scaler.step(second.sgd));
  scaler.update();
  EXPECT_TRUE(torch::equal(first.w.detach(), torch::zeros({3})));
  EXPECT_TRUE(torch::equal(second.w.detach(), torch::ones({3})));
  EXPECT_EQ(scaler.get_scale(), 2.0);
}

TEST(GradScaler, ReducedPrecisionAndZeroDimGradientsUnscaleInFloat32) {
  GradScaler scaler;
  auto w = torch::zeros({}, torch::kBFloat16).requires_grad_();
  torch::optim::SGD sgd({w}, torch::optim::SGDOptions(1.0));
  init_on_cpu(scaler);
  scaler.update(3.0);
  EXPECT_EQ(scaler.get_scale(), 3.0);
  w.mutable_grad() = torch::full({}, 5.0, torch::kBFloat16);
  scaler.unscale_(sgd);
  // The kernel: bfloat16(float(grad) * float(1 / double(scale))).
  const float inv_scale = static_cast<float>(1.0 / 3.0);
  const auto expected = torch::full({}, 5.0f * inv_scale).to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(w.grad(), expected));
}

TEST(GradScaler, MisuseThrowsPyTorchsMessages) {
  GradScaler scaler;
  OneParam model;
  model.w.mutable_grad() = torch::ones({3});
  EXPECT_THROWS_WITH(
      Error,
      scaler.step(model.sgd),
      "Attempted step() before the scale was created");
  EXPECT_THROWS_WITH(
      Error,
      scaler.update(),
      "Attempted update() before the scale was created");
  init_on_cpu(scaler);
  EXPECT_THROWS_WITH(
      Error, scaler.update(), "No inf checks were recorded prior to update().");

  scaler.unscale_(model.sgd);
  EXPECT_THROWS_WITH(
      Error,
      scaler.unscale_(model.sgd),
      "unscale_() has already been called on this optimizer since the last "
      "update().");
  scaler.step(model.sgd);
  EXPECT_THROWS_WITH(
      Error,
      scaler.unscale_(model.sgd),
      "unscale_() is being called after step().");
  EXPECT_THROWS_WITH(
      Error,
      scaler.step(model.sgd),
      "step() has already been called since the last update().");
  scaler.update();
  scaler.unscale_(model.sgd); // a new iteration may unscale again

  OneParam no_grads;
  EXPECT_THROWS_WITH(
      Error,
      scaler.step(no_grads.sgd),
      "No inf checks were recorded for this optimizer.");
}

TEST(GradScaler, Float16GradientsAreRejected) {
  GradScaler scaler;
  auto w = torch::zeros({2}, torch::kHalf).requires_grad_();
  torch::optim::SGD sgd({w}, torch::optim::SGDOptions(1.0));
  init_on_cpu(scaler);
  w.mutable_grad() = torch::ones({2}, torch::kHalf);
  EXPECT_THROWS_WITH(
      Error, scaler.unscale_(sgd), "Attempting to unscale FP16 gradients.");
}

TEST(GradScaler, DisabledScalerIsAPassThrough) {
  GradScaler scaler(GradScalerOptions().enabled(false).growth_factor(0.5));
  EXPECT_FALSE(scaler.is_enabled());
  OneParam model;
  const torch::Tensor loss = torch::tensor(2.0);
  EXPECT_TRUE(scaler.scale(loss).is_same(loss));
  model.w.mutable_grad() = torch::full({3}, kInf);
  scaler.unscale_(model.sgd);
  scaler.unscale_(model.sgd);
  EXPECT_TRUE(scaler.step(model.sgd)); // steps even on inf: no checks
  scaler.update();
  EXPECT_TRUE(std::isinf(model.w[0].item<float>()));
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  EXPECT_FALSE(scaler.scale_tensor().defined());
}

TEST(GradScaler, SaveThenLoadContinuesIdentically) {
  const auto options = GradScalerOptions()
                           .init_scale(256.0)
                           .growth_factor(3.0)
                           .backoff_factor(0.25)
                           .growth_interval(4);
  GradScaler original(options);
  run_pattern(original, "FFFFFIFF"); // scale 256*3*0.25 = 192, tracker 2
  EXPECT_EQ(original.get_scale(), 192.0);
  EXPECT_EQ(original.growth_tracker(), 2);
  const std::string bytes = saved_bytes(original);

  // Options come from the saved state, as PyTorch's load_state_dict does.
  GradScaler restored;
  load_bytes(restored, bytes);
  EXPECT_EQ(restored.get_scale(), 192.0);
  EXPECT_EQ(restored.growth_tracker(), 2);
  EXPECT_EQ(restored.options().growth_factor(), 3.0);
  EXPECT_EQ(restored.options().backoff_factor(), 0.25);
  EXPECT_EQ(restored.options().growth_interval(), 4);

  // Loading into a scaler whose scale exists overwrites it in place.
  GradScaler used;
  run_pattern(used, "F");
  load_bytes(used, bytes);

  const std::string next = "FFIFFFFNFFFFF";
  const auto expected = run_pattern(original, next);
  EXPECT_EQ(run_pattern(restored, next), expected);
  EXPECT_EQ(run_pattern(used, next), expected);
}

TEST(GradScaler, LoadingTheEmptyStateOfADisabledScalerThrows) {
  GradScaler disabled(GradScalerOptions().enabled(false));
  const std::string bytes = saved_bytes(disabled);
  GradScaler enabled;
  EXPECT_THROWS_WITH(
      ConfigError,
      load_bytes(enabled, bytes),
      "grad_scaler: the saved state is empty, possibly because it was saved "
      "from a disabled GradScaler");
  GradScaler also_disabled(GradScalerOptions().enabled(false));
  load_bytes(also_disabled, saved_bytes(enabled)); // ignored
  EXPECT_EQ(also_disabled.get_scale(), 1.0);
}

TEST(GradScaler, InvalidOptionsThrowConfigErrorNamingTheOption) {
  EXPECT_THROWS_WITH(
      ConfigError,
      GradScaler(GradScalerOptions().init_scale(0.0)),
      "grad_scaler.init_scale must be positive and finite, got 0");
  EXPECT_THROWS_WITH(
      ConfigError,
      GradScaler(GradScalerOptions().growth_factor(1.0)),
      "grad_scaler.growth_factor must be > 1, got 1");
  EXPECT_THROWS_WITH(
      ConfigError,
      GradScaler(GradScalerOptions().backoff_factor(1.5)),
      "grad_scaler.backoff_factor must be in (0, 1), got 1.5");
  EXPECT_THROWS_WITH(
      ConfigError,
      GradScaler(GradScalerOptions().growth_interval(0)),
      "grad_scaler.growth_interval must be positive, got 0");
}

TEST(GradScaler, UsesAtenKernelsOnCpuExactlyWhenThisLibTorchHasThem) {
  const auto has_cpu_kernel = [](const char* op) {
    return c10::Dispatcher::singleton()
        .findSchemaOrThrow(op, "")
        .hasKernelForDispatchKey(c10::DispatchKey::CPU);
  };
  // LibTorch 1.13 registers both for CUDA only; 2.3 added CPU kernels.
  EXPECT_EQ(
      detail::has_amp_scaler_kernels(c10::DeviceType::CPU),
      has_cpu_kernel("aten::_amp_update_scale_") &&
          has_cpu_kernel("aten::_amp_foreach_non_finite_check_and_unscale_"));
  EXPECT_TRUE(detail::has_amp_scaler_kernels(c10::DeviceType::CUDA));
}

} // namespace
} // namespace hotloop::train
