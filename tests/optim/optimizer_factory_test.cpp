#include "hotloop/optim/optimizer_factory.h"

#include "hotloop/core/error.h"
#include "hotloop/optim/foreach.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/instancenorm.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/instancenorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#ifndef HOTLOOP_TEST_REFERENCE_DIR
#define HOTLOOP_TEST_REFERENCE_DIR "tests/reference"
#endif

namespace hotloop::optim {
namespace {

// Rows "<case> <field> <index> <values...>" of tests/reference/
// lr_schedules.txt, written by make_lr_reference.py.
std::vector<double> reference_row(
    const std::string& name, const std::string& field, int64_t index) {
  const std::string path =
      std::string(HOTLOOP_TEST_REFERENCE_DIR) + "/lr_schedules.txt";
  std::ifstream in(path);
  if (!in) {
    throw std::runtime_error("cannot open reference file " + path);
  }
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string row_name, row_field;
    int64_t row_index = -1;
    fields >> row_name >> row_field >> row_index;
    if (row_name == name && row_field == field && row_index == index) {
      std::vector<double> values;
      for (double value = 0; fields >> value;) {
        values.push_back(value);
      }
      return values;
    }
  }
  throw std::out_of_range(
      "no reference row " + name + " " + field + " " + std::to_string(index));
}

at::Tensor reference_tensor(const std::string& field, at::IntArrayRef shape) {
  const auto values = reference_row("optim_init", field, 0);
  return torch::tensor(values, torch::kFloat32).reshape(shape);
}

// Runs `build` and returns the message of the ConfigError it throws.
template <typename F>
std::string config_error(F&& build) {
  try {
    build();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

// Conv -> BatchNorm -> Linear, the usual small CNN shape.
struct ConvNetImpl : torch::nn::Module {
  ConvNetImpl()
      : conv(register_module(
            "conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 2, 3)))),
        bn(register_module("bn", torch::nn::BatchNorm2d(2))),
        fc(register_module("fc", torch::nn::Linear(8, 3))) {}
  torch::nn::Conv2d conv;
  torch::nn::BatchNorm2d bn;
  torch::nn::Linear fc;
};
TORCH_MODULE(ConvNet);

// A user-defined normalization layer, recognized by its type name.
struct RMSNormImpl : torch::nn::Module {
  RMSNormImpl() : weight(register_parameter("weight", torch::ones({4}))) {}
  at::Tensor weight;
};
TORCH_MODULE(RMSNorm);

struct NormsImpl : torch::nn::Module {
  NormsImpl()
      : proj(register_module("proj", torch::nn::Linear(4, 4))),
        layer_norm(register_module(
            "layer_norm",
            torch::nn::LayerNorm(torch::nn::LayerNormOptions({4})))),
        group_norm(register_module("group_norm", torch::nn::GroupNorm(2, 4))),
        instance_norm(register_module(
            "instance_norm",
            torch::nn::InstanceNorm1d(
                torch::nn::InstanceNorm1dOptions(4).affine(true)))),
        rms_norm(register_module("rms_norm", RMSNorm())) {}
  torch::nn::Linear proj;
  torch::nn::LayerNorm layer_norm;
  torch::nn::GroupNorm group_norm;
  torch::nn::InstanceNorm1d instance_norm;
  RMSNorm rms_norm;
};
TORCH_MODULE(Norms);

std::vector<const c10::TensorImpl*> impls(const std::vector<at::Tensor>& ts) {
  std::vector<const c10::TensorImpl*> result;
  for (const auto& t : ts) {
    result.push_back(t.unsafeGetTensorImpl());
  }
  return result;
}

double weight_decay_of(const torch::optim::OptimizerParamGroup& group) {
  return dynamic_cast<const torch::optim::AdamWOptions&>(group.options())
      .weight_decay();
}

TEST(MakeOptimizer, SplitsNormAndBiasParametersIntoAGroupWithoutDecay) {
  ConvNet net;
  OptimizerOptions options;
  options.weight_decay = 0.05;
  auto optimizer = make_optimizer(*net, options);
  const auto& groups = optimizer->param_groups();
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(
      impls(groups[0].params()), impls({net->conv->weight, net->fc->weight}));
  EXPECT_EQ(
      impls(groups[1].params()),
      impls({net->conv->bias, net->bn->weight, net->bn->bias, net->fc->bias}));
  EXPECT_DOUBLE_EQ(weight_decay_of(groups[0]), 0.05);
  EXPECT_DOUBLE_EQ(weight_decay_of(groups[1]), 0.0);
}

TEST(MakeOptimizer, RecognizesEveryNormalizationLayer) {
  Norms net;
  OptimizerOptions options;
  options.weight_decay = 0.1;
  auto optimizer = make_optimizer(*net, options);
  const auto& groups = optimizer->param_groups();
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(impls(groups[0].params()), impls({net->proj->weight}));
  EXPECT_EQ(
      impls(groups[1].params()),
      impls(
          {net->proj->bias,
           net->layer_norm->weight,
           net->layer_norm->bias,
           net->group_norm->weight,
           net->group_norm->bias,
           net->instance_norm->weight,
           net->instance_norm->bias,
           net->rms_norm->weight}));
}

TEST(MakeOptimizer, NormalizationLayerAsTheModelItselfIsRecognized) {
  RMSNorm norm;
  OptimizerOptions options;
  options.weight_decay = 0.1;
  auto optimizer = make_optimizer(*norm, options);
  // Only the no-decay group: an empty group is not created.
  ASSERT_EQ(optimizer->param_groups().size(), 1u);
  EXPECT_DOUBLE_EQ(weight_decay_of(optimizer->param_groups()[0]), 0.0);
}

TEST(MakeOptimizer, WithoutTheSplitEveryParameterDecaysInOneGroup) {
  ConvNet net;
  OptimizerOptions options;
  options.weight_decay = 0.05;
  options.no_decay_norm_and_bias = false;
  auto optimizer = make_optimizer(*net, options);
  ASSERT_EQ(optimizer->param_groups().size(), 1u);
  EXPECT_EQ(
      impls(optimizer->param_groups()[0].params()), impls(net->parameters()));
  EXPECT_DOUBLE_EQ(weight_decay_of(optimizer->param_groups()[0]), 0.05);
}

TEST(MakeOptimizer, SharedParametersAreOptimizedOnce) {
  struct TiedImpl : torch::nn::Module {
    TiedImpl() {
      weight = register_parameter("weight", torch::ones({3}));
      register_parameter("tied_weight", weight);
      bias = register_parameter("bias", torch::zeros({3}));
    }
    at::Tensor weight, bias;
  };
  TiedImpl tied;
  auto optimizer = make_optimizer(tied, OptimizerOptions());
  ASSERT_EQ(optimizer->param_groups().size(), 2u);
  EXPECT_EQ(impls(optimizer->param_groups()[0].params()), impls({tied.weight}));
  EXPECT_EQ(impls(optimizer->param_groups()[1].params()), impls({tied.bias}));
}

TEST(MakeOptimizer, BuildsEachOptimizerWithItsOptions) {
  namespace to = torch::optim;
  torch::nn::Linear net(3, 2);
  OptimizerOptions o;
  o.lr = 0.02;
  o.weight_decay = 0.03;
  o.momentum = 0.7;
  o.nesterov = true;
  o.beta1 = 0.85;
  o.beta2 = 0.98;
  o.eps = 1e-6;
  o.alpha = 0.9;
  o.centered = true;

  o.name = "sgd";
  auto sgd = make_optimizer(*net, o);
  ASSERT_NE(dynamic_cast<ForeachSGD*>(sgd.get()), nullptr);
  const auto& sgd_options =
      static_cast<const to::SGDOptions&>(sgd->param_groups()[0].options());
  EXPECT_EQ(sgd_options.lr(), 0.02);
  EXPECT_EQ(sgd_options.momentum(), 0.7);
  EXPECT_TRUE(sgd_options.nesterov());
  EXPECT_EQ(sgd_options.weight_decay(), 0.03);

  o.name = "adam";
  auto adam = make_optimizer(*net, o);
  ASSERT_NE(dynamic_cast<ForeachAdam*>(adam.get()), nullptr);
  const auto& adam_options =
      static_cast<const to::AdamOptions&>(adam->param_groups()[0].options());
  EXPECT_EQ(adam_options.lr(), 0.02);
  EXPECT_EQ(adam_options.betas(), std::make_tuple(0.85, 0.98));
  EXPECT_EQ(adam_options.eps(), 1e-6);
  EXPECT_EQ(adam_options.weight_decay(), 0.03);

  o.name = "adamw";
  auto adamw = make_optimizer(*net, o);
  ASSERT_NE(dynamic_cast<ForeachAdamW*>(adamw.get()), nullptr);
  const auto& adamw_options =
      static_cast<const to::AdamWOptions&>(adamw->param_groups()[0].options());
  EXPECT_EQ(adamw_options.lr(), 0.02);
  EXPECT_EQ(adamw_options.betas(), std::make_tuple(0.85, 0.98));
  EXPECT_EQ(adamw_options.eps(), 1e-6);
  EXPECT_EQ(adamw_options.weight_decay(), 0.03);

  o.name = "rmsprop";
  auto rmsprop = make_optimizer(*net, o);
  ASSERT_NE(dynamic_cast<to::RMSprop*>(rmsprop.get()), nullptr);
  const auto& rmsprop_options = static_cast<const to::RMSpropOptions&>(
      rmsprop->param_groups()[0].options());
  EXPECT_EQ(rmsprop_options.lr(), 0.02);
  EXPECT_EQ(rmsprop_options.momentum(), 0.7);
  EXPECT_EQ(rmsprop_options.alpha(), 0.9);
  EXPECT_TRUE(rmsprop_options.centered());
  EXPECT_EQ(rmsprop_options.eps(), 1e-6);
  EXPECT_EQ(rmsprop_options.weight_decay(), 0.03);

  o.name = "adagrad";
  auto adagrad = make_optimizer(*net, o);
  ASSERT_NE(dynamic_cast<to::Adagrad*>(adagrad.get()), nullptr);
  const auto& adagrad_options = static_cast<const to::AdagradOptions&>(
      adagrad->param_groups()[0].options());
  EXPECT_EQ(adagrad_options.lr(), 0.02);
  EXPECT_EQ(adagrad_options.eps(), 1e-6);
  EXPECT_EQ(adagrad_options.weight_decay(), 0.03);
  // The bias group differs only in weight decay.
  const auto& adagrad_bias = static_cast<const to::AdagradOptions&>(
      adagrad->param_groups()[1].options());
  EXPECT_EQ(adagrad_bias.lr(), 0.02);
  EXPECT_EQ(adagrad_bias.weight_decay(), 0.0);
}

// The decay each optimizer's options class holds for `group`.
double any_weight_decay(const torch::optim::OptimizerParamGroup& group) {
  namespace to = torch::optim;
  const to::OptimizerOptions& options = group.options();
  if (auto* sgd = dynamic_cast<const to::SGDOptions*>(&options)) {
    return sgd->weight_decay();
  }
  if (auto* adam = dynamic_cast<const to::AdamOptions*>(&options)) {
    return adam->weight_decay();
  }
  if (auto* adamw = dynamic_cast<const to::AdamWOptions*>(&options)) {
    return adamw->weight_decay();
  }
  if (auto* rmsprop = dynamic_cast<const to::RMSpropOptions*>(&options)) {
    return rmsprop->weight_decay();
  }
  return dynamic_cast<const to::AdagradOptions&>(options).weight_decay();
}

// LibTorch 2.10 and later merge a group's options into the optimizer's
// defaults and take a field equal to the options class's own default (a
// weight decay of 0 for all but AdamW) as unset: passed to the constructor,
// the no-decay group would decay. Every optimizer must keep it at 0.
TEST(MakeOptimizer, EveryOptimizerKeepsTheNoDecayGroupAtZeroDecay) {
  torch::nn::Linear net(3, 2);
  for (const std::string name :
       {"sgd", "adam", "adamw", "rmsprop", "adagrad"}) {
    SCOPED_TRACE(name);
    OptimizerOptions o;
    o.name = name;
    o.lr = 0.02;
    o.weight_decay = 0.03;
    auto optimizer = make_optimizer(*net, o);
    const auto& groups = optimizer->param_groups();
    ASSERT_EQ(groups.size(), 2u);
    EXPECT_EQ(impls(groups[1].params()), impls({net->bias}));
    EXPECT_EQ(any_weight_decay(groups[0]), 0.03);
    EXPECT_EQ(any_weight_decay(groups[1]), 0.0);
    EXPECT_EQ(groups[1].options().get_lr(), 0.02);
  }
}

struct StepCase {
  std::string name; // reference case optim_<name>
  OptimizerOptions options;
};

std::ostream& operator<<(std::ostream& out, const StepCase& c) {
  return out << c.name;
}

OptimizerOptions with(
    std::string name,
    double lr,
    double weight_decay,
    double momentum = 0.0,
    bool nesterov = false,
    double beta1 = 0.9,
    double beta2 = 0.999,
    double eps = 1e-8) {
  OptimizerOptions o;
  o.name = std::move(name);
  o.lr = lr;
  o.weight_decay = weight_decay;
  o.momentum = momentum;
  o.nesterov = nesterov;
  o.beta1 = beta1;
  o.beta2 = beta2;
  o.eps = eps;
  return o;
}

class OptimizerParity : public ::testing::TestWithParam<StepCase> {};

// Three steps of a Linear(3, 2) under MSE, with the factory's split (the
// weight decays, the bias does not), match PyTorch to 1e-6.
TEST_P(OptimizerParity, StepsMatchPyTorch) {
  const StepCase& c = GetParam();
  torch::nn::Linear net(3, 2);
  {
    torch::NoGradGuard no_grad;
    net->weight.copy_(reference_tensor("weight", {2, 3}));
    net->bias.copy_(reference_tensor("bias", {2}));
  }
  const at::Tensor input = reference_tensor("input", {4, 3});
  const at::Tensor target = reference_tensor("target", {4, 2});
  auto optimizer = make_optimizer(*net, c.options);
  ASSERT_EQ(optimizer->param_groups().size(), 2u);
  for (int64_t step = 1; step <= 3; ++step) {
    optimizer->zero_grad();
    torch::nn::functional::mse_loss(net->forward(input), target).backward();
    optimizer->step();
    for (const auto& [field, tensor] :
         {std::make_pair("weight", net->weight),
          std::make_pair("bias", net->bias)}) {
      const auto expected = reference_row("optim_" + c.name, field, step);
      const at::Tensor actual = tensor.detach().flatten();
      ASSERT_EQ(actual.numel(), static_cast<int64_t>(expected.size()));
      for (size_t i = 0; i < expected.size(); ++i) {
        EXPECT_NEAR(actual[i].item<double>(), expected[i], 1e-6)
            << field << "[" << i << "] after step " << step;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllOptimizers,
    OptimizerParity,
    ::testing::Values(
        StepCase{"sgd", with("sgd", 0.1, 0.01, 0.9)},
        StepCase{"sgd_nesterov", with("sgd", 0.1, 0.05, 0.8, true)},
        StepCase{"adam", with("adam", 0.01, 0.01, 0.0, false, 0.8, 0.99, 1e-7)},
        StepCase{"adamw", with("adamw", 0.01, 0.1)},
        StepCase{"rmsprop", with("rmsprop", 0.01, 0.01, 0.9)},
        StepCase{"adagrad", with("adagrad", 0.1, 0.01)}),
    [](const ::testing::TestParamInfo<StepCase>& info) {
      return info.param.name;
    });

TEST(MakeOptimizer, BadOptionsAreRejectedWithTheOptionNamed) {
  torch::nn::Linear net(3, 2);
  auto error_for = [&](auto&& change) {
    OptimizerOptions o;
    change(o);
    return config_error([&] { make_optimizer(*net, o); });
  };
  EXPECT_EQ(
      error_for([](OptimizerOptions& o) { o.name = "adamx"; }),
      "optimizer.name must be one of sgd, adam, adamw, rmsprop, adagrad, got "
      "'adamx'");
  EXPECT_EQ(
      error_for([](OptimizerOptions& o) { o.lr = 0; }),
      "optimizer.lr must be positive, got 0");
  EXPECT_EQ(
      error_for([](OptimizerOptions& o) { o.weight_decay = -0.1; }),
      "optimizer.weight_decay must be non-negative, got -0.1");
  EXPECT_EQ(
      error_for([](OptimizerOptions& o) { o.momentum = 1.5; }),
      "optimizer.momentum must be in [0, 1), got 1.5");
  EXPECT_EQ(
      error_for([](OptimizerOptions& o) { o.alpha = -1; }),
      "optimizer.alpha must be non-negative, got -1");
  EXPECT_EQ(
      error_for([](OptimizerOptions& o) { o.beta1 = 1; }),
      "optimizer.beta1 must be in [0, 1), got 1");
  EXPECT_EQ(
      error_for([](OptimizerOptions& o) { o.beta2 = -0.5; }),
      "optimizer.beta2 must be in [0, 1), got -0.5");
  EXPECT_EQ(
      error_for([](OptimizerOptions& o) { o.eps = -1e-8; }),
      "optimizer.eps must be non-negative, got -1e-08");
  EXPECT_EQ(
      error_for([](OptimizerOptions& o) {
        o.name = "sgd";
        o.momentum = 0;
        o.nesterov = true;
      }),
      "optimizer.nesterov needs optimizer.momentum > 0, got 0");
  EXPECT_EQ(
      error_for([](OptimizerOptions& o) { o.foreach = "yes"; }),
      "optimizer.foreach must be auto, true or false, got 'yes'");
  EXPECT_EQ(
      error_for([](OptimizerOptions& o) {
        o.name = "rmsprop";
        o.foreach = "true";
      }),
      "optimizer.foreach=true: rmsprop has no multi-tensor step (sgd, adam and "
      "adamw have); use auto or false");
  EXPECT_EQ(
      error_for([](OptimizerOptions& o) { o.fused = "on"; }),
      "optimizer.fused must be auto, true or false, got 'on'");
  for (const std::string name : {"sgd", "rmsprop", "adagrad"}) {
    EXPECT_EQ(
        error_for([&](OptimizerOptions& o) {
          o.name = name;
          o.fused = "true";
        }),
        "optimizer.fused=true: " + name +
            " has no fused step in hotloop (adam and adamw have); use auto or "
            "false");
  }
}

TEST(MakeOptimizer, FusedChoosesTheFusedStepForAdamAndAdamW) {
  torch::nn::Linear net(3, 2);
  for (const std::string name : {"adam", "adamw"}) {
    for (const auto& [value, expected] :
         std::vector<std::pair<std::string, std::optional<bool>>>{
             {"auto", std::nullopt}, {"true", true}, {"false", false}}) {
      OptimizerOptions o;
      o.name = name;
      o.fused = value;
      auto optimizer = make_optimizer(*net, o);
      const auto* choice = dynamic_cast<FusedChoice*>(optimizer.get());
      ASSERT_NE(choice, nullptr) << name;
      EXPECT_EQ(choice->fused(), expected) << name << " " << value;
    }
  }
  // SGD has no fused step; auto and false build it all the same.
  OptimizerOptions o;
  o.name = "sgd";
  o.fused = "false";
  EXPECT_EQ(dynamic_cast<FusedChoice*>(make_optimizer(*net, o).get()), nullptr);
}

TEST(MakeOptimizer, ForeachChoosesTheMultiTensorStep) {
  torch::nn::Linear net(3, 2);
  for (const std::string name : {"sgd", "adam", "adamw"}) {
    for (const auto& [value, expected] :
         std::vector<std::pair<std::string, std::optional<bool>>>{
             {"auto", std::nullopt}, {"true", true}, {"false", false}}) {
      OptimizerOptions o;
      o.name = name;
      o.foreach = value;
      auto optimizer = make_optimizer(*net, o);
      const auto* choice = dynamic_cast<ForeachChoice*>(optimizer.get());
      ASSERT_NE(choice, nullptr) << name;
      EXPECT_EQ(choice->foreach(), expected) << name << " " << value;
    }
  }
  // The others step one parameter at a time; auto and false say so.
  OptimizerOptions o;
  o.name = "adagrad";
  o.foreach = "false";
  EXPECT_EQ(
      dynamic_cast<ForeachChoice*>(make_optimizer(*net, o).get()), nullptr);
}

TEST(MakeOptimizer, ModelWithoutParametersIsAnError) {
  torch::nn::Module empty;
  try {
    make_optimizer(empty, OptimizerOptions());
    FAIL() << "expected hotloop::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(
        e.what(), "optimizer: the model (torch::nn::Module) has no parameters");
  }
}

// ---------------------------------------------------------------------------
// make_scheduler

std::unique_ptr<torch::optim::Optimizer> sgd_for(torch::nn::Linear& net) {
  OptimizerOptions o;
  o.name = "sgd";
  o.lr = 0.1;
  return make_optimizer(*net, o);
}

TEST(MakeScheduler, BuildsEachScheduleByName) {
  torch::nn::Linear net(3, 2);
  auto optimizer = sgd_for(net);
  auto build = [&](const std::string& name) {
    SchedulerOptions o;
    o.name = name;
    o.milestones = {10, 20};
    return make_scheduler(*optimizer, o, 100);
  };
  EXPECT_EQ(build("none"), nullptr);
  EXPECT_EQ(build("step")->name(), "StepLR");
  EXPECT_EQ(build("multistep")->name(), "MultiStepLR");
  EXPECT_EQ(build("exponential")->name(), "ExponentialLR");
  EXPECT_EQ(build("cosine")->name(), "CosineAnnealingLR");
  EXPECT_EQ(build("cosine_restarts")->name(), "CosineAnnealingWarmRestarts");
  EXPECT_EQ(build("onecycle")->name(), "OneCycleLR");
  EXPECT_EQ(build("polynomial")->name(), "PolynomialLR");
  EXPECT_EQ(build("plateau")->name(), "ReduceLROnPlateau");
  EXPECT_TRUE(build("plateau")->needs_metric());
  EXPECT_EQ(build("constant")->name(), "ConstantLR");
  EXPECT_EQ(build("linear")->name(), "LinearLR");
}

TEST(MakeScheduler, LinearSpansTheRunAndCyclicStartsAtTheOptimizerLr) {
  torch::nn::Linear net(3, 2);
  auto optimizer = sgd_for(net);
  SchedulerOptions o;
  o.name = "linear";
  o.start_factor = 1.0;
  o.end_factor = 0.0;
  auto linear = make_scheduler(*optimizer, o, 10);
  for (int i = 0; i < 5; ++i) {
    linear->step();
  }
  EXPECT_NEAR(linear->last_lr()[0], 0.05, 1e-15);
  for (int i = 0; i < 5; ++i) {
    linear->step();
  }
  EXPECT_NEAR(linear->last_lr()[0], 0.0, 1e-15);

  auto cyclic_optimizer = sgd_for(net);
  SchedulerOptions c;
  c.name = "cyclic";
  c.max_lr = 0.5;
  c.step_size_up = 4;
  c.cyclic_mode = "triangular2";
  c.cycle_momentum = false;
  auto cyclic = make_scheduler(*cyclic_optimizer, c, 100);
  ASSERT_EQ(cyclic->name(), "CyclicLR");
  EXPECT_EQ(cyclic->base_lrs(), std::vector<double>(2, 0.1));
  const auto& options = static_cast<const CyclicLR&>(*cyclic).options();
  EXPECT_EQ(options.mode(), CyclicMode::kTriangular2);
  EXPECT_EQ(options.step_size_down(), std::nullopt);
  for (int i = 0; i < 4; ++i) {
    cyclic->step();
  }
  EXPECT_NEAR(cyclic->last_lr()[0], 0.5, 1e-15);

  // swa: SWALR from the optimizer's 0.1 to swa_lr, linearly over 4 steps.
  auto swa_optimizer = sgd_for(net);
  SchedulerOptions w;
  w.name = "swa";
  w.anneal_epochs = 4;
  w.anneal_strategy = "linear";
  EXPECT_EQ(
      config_error([&] { make_scheduler(*swa_optimizer, w, 100); }),
      "lr_scheduler.swa_lr: swa needs the rate to anneal to, got 0");
  w.swa_lr = 0.02;
  auto swa = make_scheduler(*swa_optimizer, w, 100);
  ASSERT_EQ(swa->name(), "SWALR");
  swa->step();
  EXPECT_NEAR(swa->last_lr()[0], 0.08, 1e-15);
  for (int i = 0; i < 5; ++i) {
    swa->step();
  }
  EXPECT_NEAR(swa->last_lr()[0], 0.02, 1e-15);
}

TEST(MakeScheduler, SwaStartHandsTheRateOverToSwalr) {
  torch::nn::Linear net(3, 2);
  // A cosine over the run's 20 steps (T_max left at 0) until swa_start,
  // then SWALR from the rate it left to 0.01 in 2 cosine-shaped steps.
  SchedulerOptions o;
  o.name = "cosine";
  o.swa_start = 6;
  o.swa_lr = 0.01;
  o.anneal_epochs = 2;
  auto optimizer = sgd_for(net);
  auto schedule = make_scheduler(*optimizer, o, 20);
  ASSERT_EQ(schedule->name(), "SequentialLR");
  const double pi = std::acos(-1.0);
  std::vector<double> expected;
  for (int step = 0; step < 6; ++step) {
    expected.push_back(0.1 * (1 + std::cos(pi * step / 20)) / 2);
  }
  expected.push_back(0.5 * 0.01 + 0.5 * expected.back()); // half-way
  expected.push_back(0.01);
  expected.push_back(0.01);
  for (size_t step = 0; step < expected.size(); ++step) {
    if (step > 0) {
      schedule->step();
    }
    EXPECT_NEAR(group_lrs(*optimizer)[0], expected[step], 1e-15) << step;
  }

  // "none" holds the optimizer's rate until SWALR takes over.
  o.name = "none";
  o.anneal_epochs = 0;
  auto flat_optimizer = sgd_for(net);
  auto flat = make_scheduler(*flat_optimizer, o, 20);
  for (int step = 1; step <= 6; ++step) {
    EXPECT_NEAR(group_lrs(*flat_optimizer)[0], 0.1, 1e-15) << step;
    flat->step();
  }
  EXPECT_NEAR(group_lrs(*flat_optimizer)[0], 0.01, 1e-15);

  o.name = "cosine";
  EXPECT_EQ(
      config_error([&] { make_scheduler(*sgd_for(net), o, 6); }),
      "lr_scheduler.swa_start must be less than the run's 6 schedule steps, "
      "or SWALR never starts; got 6");
  o.warmup_steps = 6;
  EXPECT_EQ(
      config_error([&] { make_scheduler(*sgd_for(net), o, 20); }),
      "lr_scheduler.warmup_steps must end before swa_start (6), got 6");
  o.warmup_steps = 0;
  o.swa_lr = 0;
  EXPECT_EQ(
      config_error([&] { make_scheduler(*sgd_for(net), o, 20); }),
      "lr_scheduler.swa_lr: swa_start needs the rate SWALR anneals to, got 0");
  o.swa_lr = 0.01;
  o.name = "plateau";
  EXPECT_THAT(
      config_error([&] { make_scheduler(*sgd_for(net), o, 20); }),
      ::testing::HasSubstr("lr_scheduler.swa_start hands the rate over to "
                           "SWALR from another schedule, but "
                           "lr_scheduler.name is plateau (which watches"));
  o.name = "swa";
  EXPECT_THAT(
      config_error([&] { make_scheduler(*sgd_for(net), o, 20); }),
      ::testing::HasSubstr("(SWALR from the start: leave swa_start at 0)"));
  o.swa_start = -1;
  EXPECT_EQ(
      config_error([&] { make_scheduler(*sgd_for(net), o, 20); }),
      "lr_scheduler.swa_start must be non-negative, got -1");
}

TEST(MakeScheduler, PassesTheOptionsThrough) {
  torch::nn::Linear net(3, 2);
  auto optimizer = sgd_for(net);
  SchedulerOptions o;
  o.name = "step";
  o.step_size = 2;
  o.gamma = 0.5;
  auto schedule = make_scheduler(*optimizer, o, 100);
  schedule->step();
  schedule->step();
  EXPECT_EQ(schedule->last_lr(), std::vector<double>(2, 0.05));

  o.name = "plateau";
  o.mode = "max";
  o.patience = 0;
  o.factor = 0.5;
  o.threshold_mode = "abs";
  o.threshold = 0.1;
  auto plateau = make_scheduler(*optimizer, o, 100);
  plateau->step(1.0);
  plateau->step(1.05); // not better by 0.1 in max/abs mode: halve
  EXPECT_EQ(plateau->last_lr(), std::vector<double>(2, 0.025));
}

TEST(MakeScheduler, OneCycleSpansTheRunAfterWarmupAndPeaksAtTheOptimizerLr) {
  torch::nn::Linear net(3, 2);
  auto optimizer = sgd_for(net);
  SchedulerOptions o;
  o.name = "onecycle";
  o.warmup_steps = 10;
  o.warmup_start_factor = 0.5;
  auto schedule = make_scheduler(*optimizer, o, 100);
  ASSERT_EQ(schedule->name(), "LinearWarmup");
  const auto* onecycle = dynamic_cast<const OneCycleLR*>(
      static_cast<LinearWarmup&>(*schedule).inner());
  ASSERT_NE(onecycle, nullptr);
  EXPECT_EQ(onecycle->options().total_steps(), 90);
  EXPECT_EQ(onecycle->options().max_lr(), std::vector<double>(2, 0.1));
  EXPECT_NEAR(schedule->last_lr()[0], 0.5 * 0.1 / 25, 1e-15);
  double peak = 0;
  for (int i = 0; i < 99; ++i) {
    schedule->step();
    peak = std::max(peak, schedule->last_lr()[0]);
  }
  EXPECT_NEAR(peak, 0.1, 1e-12);
  // Step 99 sets the rate of the run's last optimizer step: the final rate.
  EXPECT_NEAR(schedule->last_lr()[0], 0.1 / 25 / 1e4, 1e-12);
  schedule->step(); // after the last optimizer step, as PyTorch allows
  EXPECT_THROW(schedule->step(), Error);
}

TEST(MakeScheduler, CosineWithoutTMaxEndsAtEtaMinOnTheLastStep) {
  torch::nn::Linear net(3, 2);
  auto optimizer = sgd_for(net);
  SchedulerOptions o;
  o.name = "cosine";
  o.eta_min = 1e-3;
  o.warmup_steps = 5;
  auto schedule = make_scheduler(*optimizer, o, 50);
  for (int i = 0; i < 50; ++i) {
    schedule->step();
  }
  EXPECT_NEAR(schedule->last_lr()[0], 1e-3, 1e-12);
}

TEST(MakeScheduler, NoneWithWarmupWarmsUpToTheOptimizerLr) {
  torch::nn::Linear net(3, 2);
  auto optimizer = sgd_for(net);
  SchedulerOptions o;
  o.name = "none";
  o.warmup_steps = 2;
  o.warmup_start_factor = 0.5;
  auto schedule = make_scheduler(*optimizer, o, 10);
  ASSERT_NE(schedule, nullptr);
  EXPECT_EQ(static_cast<LinearWarmup&>(*schedule).inner(), nullptr);
  EXPECT_DOUBLE_EQ(schedule->last_lr()[0], 0.05);
  schedule->step();
  schedule->step();
  schedule->step();
  EXPECT_DOUBLE_EQ(schedule->last_lr()[0], 0.1);
}

TEST(MakeScheduler, BadOptionsAreRejectedWithTheOptionNamed) {
  torch::nn::Linear net(3, 2);
  auto optimizer = sgd_for(net);
  auto error_for = [&](auto&& change, int64_t total_steps = 100) {
    SchedulerOptions o;
    change(o);
    return config_error([&] { make_scheduler(*optimizer, o, total_steps); });
  };
  EXPECT_EQ(
      error_for([](SchedulerOptions& o) { o.name = "cosine_annealing"; }),
      "lr_scheduler.name must be one of none, step, multistep, exponential, "
      "cosine, cosine_restarts, onecycle, polynomial, plateau, constant, "
      "linear, cyclic, swa, got 'cosine_annealing'");
  EXPECT_EQ(
      error_for([](SchedulerOptions& o) { o.name = "cyclic"; }),
      "lr_scheduler.max_lr: cyclic needs the peak rate, got 0");
  EXPECT_EQ(
      error_for([](SchedulerOptions& o) {
        o.name = "cyclic";
        o.max_lr = 1;
        o.cyclic_mode = "min";
      }),
      "lr_scheduler.mode must be triangular, triangular2 or exp_range for "
      "cyclic, got 'min'");
  EXPECT_EQ(
      error_for([](SchedulerOptions& o) { o.name = "linear"; }, -1),
      "lr_scheduler: linear needs the run's length, and trainer.max_epochs=-1 "
      "trains without one: give trainer.max_steps or "
      "lr_scheduler.total_iters");
  EXPECT_EQ(
      error_for([](SchedulerOptions& o) { o.interval = "batch"; }),
      "lr_scheduler.interval must be step or epoch, got 'batch'");
  EXPECT_EQ(
      error_for([](SchedulerOptions& o) { o.anneal_strategy = "cosine"; }),
      "lr_scheduler.anneal_strategy must be cos or linear, got 'cosine'");
  EXPECT_EQ(
      error_for([](SchedulerOptions& o) {
        o.name = "plateau";
        o.mode = "minimum";
      }),
      "lr_scheduler.mode must be min or max, got 'minimum'");
  EXPECT_EQ(
      error_for([](SchedulerOptions& o) {
        o.name = "plateau";
        o.threshold_mode = "relative";
      }),
      "lr_scheduler.threshold_mode must be rel or abs, got 'relative'");
  EXPECT_EQ(
      error_for([](SchedulerOptions& o) { o.warmup_steps = -1; }),
      "lr_scheduler.warmup_steps must be non-negative, got -1");
  EXPECT_EQ(
      error_for([](SchedulerOptions& o) { o.warmup_steps = 100; }),
      "lr_scheduler.warmup_steps must be less than the run's 100 schedule "
      "steps, got 100");
  EXPECT_EQ(
      error_for([](SchedulerOptions&) {}, 0),
      "lr_scheduler: onecycle needs the run's number of steps, got 0");
  EXPECT_EQ(
      error_for([](SchedulerOptions& o) {
        o.warmup_steps = 5;
        o.warmup_start_factor = 1.5;
      }),
      "lr_scheduler.warmup_start_factor must be in (0, 1], got 1.5");
  EXPECT_EQ(
      error_for([](SchedulerOptions& o) {
        o.name = "step";
        o.step_size = 0;
      }),
      "lr_scheduler.step_size must be positive, got 0");
  EXPECT_EQ(
      error_for([](SchedulerOptions& o) { o.name = "multistep"; }),
      "lr_scheduler.milestones must not be empty");
  EXPECT_EQ(
      error_for([](SchedulerOptions& o) {
        o.name = "cosine";
        o.t_max = -3;
      }),
      "lr_scheduler.t_max must be positive, got -3");
  EXPECT_EQ(
      error_for([](SchedulerOptions& o) { o.max_lr = -0.1; }),
      "lr_scheduler.max_lr must be positive, got -0.1");
  // Rejected schedules leave the optimizer's rates as they were.
  EXPECT_EQ(group_lrs(*optimizer), std::vector<double>(2, 0.1));
}

} // namespace
} // namespace hotloop::optim
