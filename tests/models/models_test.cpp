#include "hotloop/models/gpt.h"
#include "hotloop/models/gpt_generate.h"
#include "hotloop/models/mlp.h"
#include "hotloop/models/resnet.h"

#include "hotloop/core/compat.h"
#include "hotloop/core/error.h"
#include "models/gpt_step.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/utils.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>


namespace hotloop::models {
namespace {

// Written by tests/reference/make_models_reference.py (see its docstring):
// "<case> <field> <name> <shape> <values...>".
constexpr double kParamScale = 1024; // `param` values are k / 1024
constexpr double kInputScale = 64;   // `input` values are k / 64
// Forward outputs are O(1); float32 kernels that sum in another order
// differ by ~1e-7.
constexpr double kParityTolerance = 1e-5;

using Entry = hotloop::testing::ReferenceEntry;
using Reference = hotloop::testing::Reference;
using hotloop::testing::parse_shape;
using hotloop::testing::shape_string;
using hotloop::testing::to_tensor;

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// Parameters and buffers in the order of Python's state_dict(): modules
/// in pre-order, each one's parameters then its buffers.
std::vector<std::pair<std::string, at::Tensor>> state_dict(
    const torch::nn::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : module.named_modules()) {
    const std::string prefix = item.key().empty() ? "" : item.key() + ".";
    for (const auto& p : item.value()->named_parameters(/*recurse=*/false)) {
      out.emplace_back(prefix + p.key(), p.value());
    }
    for (const auto& b : item.value()->named_buffers(/*recurse=*/false)) {
      out.emplace_back(prefix + b.key(), b.value());
    }
  }
  return out;
}

/// "name shape" lines, to compare with the reference's `state` entries.
std::vector<std::string> state_lines(const torch::nn::Module& module) {
  std::vector<std::string> out;
  for (const auto& [name, tensor] : state_dict(module)) {
    out.push_back(name + " " + shape_string(tensor.sizes()));
  }
  return out;
}

std::vector<std::string> reference_lines(const std::vector<Entry>& entries) {
  std::vector<std::string> out;
  for (const auto& entry : entries) {
    out.push_back(entry.name + " " + entry.shape);
  }
  return out;
}

int64_t parameter_count(const torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters()) {
    n += p.numel();
  }
  return n;
}

/// Copies the reference's `param` entries of `case_name` into `module` by
/// name; every parameter of `module` must be among them.
void load_reference_parameters(
    torch::nn::Module& module, const std::string& case_name) {
  const auto entries =
      Reference::get("models_forward.txt").all(case_name, "param");
  auto params = module.named_parameters();
  ASSERT_EQ(params.size(), entries.size())
      << "the model and the reference have different parameter counts";
  torch::NoGradGuard no_grad;
  for (const auto& entry : entries) {
    at::Tensor* param = params.find(entry.name);
    ASSERT_NE(param, nullptr) << "no parameter named " << entry.name;
    ASSERT_EQ(shape_string(param->sizes()), entry.shape) << entry.name;
    param->copy_(to_tensor(entry, at::kFloat, kParamScale));
  }
}

void expect_close(
    const at::Tensor& actual, const at::Tensor& expected, double tolerance) {
  ASSERT_EQ(actual.sizes(), expected.sizes());
  const at::Tensor diff =
      (actual.to(at::kDouble) - expected.to(at::kDouble)).abs();
  const int64_t worst = diff.flatten().argmax().item<int64_t>();
  EXPECT_LE(diff.max().item<double>(), tolerance)
      << "worst at flat index " << worst << ": got "
      << actual.flatten()[worst].item<double>() << ", PyTorch "
      << expected.flatten()[worst].item<double>();
}

/// Expects std(t) within `tolerance` (relative) of `expected` and mean(t)
/// within `tolerance` * expected of 0.
void expect_std(
    const at::Tensor& t,
    double expected,
    double tolerance,
    const std::string& name) {
  const double std = t.std().item<double>();
  const double mean = t.mean().item<double>();
  EXPECT_NEAR(std / expected, 1.0, tolerance)
      << name << ": std " << std << ", expected " << expected;
  EXPECT_LE(std::abs(mean), tolerance * expected) << name << ": mean " << mean;
}

bool all_equal(const at::Tensor& t, double value) {
  return t.eq(value).all().item<bool>();
}

// ----------------------------------------------------------------------
// ResNet

ResNet make_resnet(const std::string& arch, const std::string& stem) {
  return ResNet(resnet_options(arch).stem(stem).num_classes(
      stem == "imagenet" ? 1000 : 10));
}

/// make_models_reference.py's state_dict cases: <arch>_<stem>.
std::vector<std::pair<std::string, std::string>> resnet_cases() {
  std::vector<std::pair<std::string, std::string>> cases;
  for (const std::string arch : {"resnet18", "resnet34", "resnet50"}) {
    cases.emplace_back(arch, "imagenet");
    cases.emplace_back(arch, "cifar");
  }
  for (const std::string arch :
       {"resnet101", "resnet152", "resnext50_32x4d", "wide_resnet50_2"}) {
    cases.emplace_back(arch, "imagenet");
  }
  return cases;
}

/// make_models_reference.py's deterministic_fill(), step for step.
void deterministic_fill(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  int64_t i = 0;
  for (auto& [name, t] : state_dict(module)) {
    const int64_t index = i++;
    if (ends_with(name, "num_batches_tracked")) {
      continue;
    }
    const at::Tensor j = at::arange(t.numel(), at::kLong);
    const at::Tensor k =
        (j * j * 7 + j * 7919 + (index + 1) * 104729).remainder(1000003) -
        500001;
    const at::Tensor u = k.to(at::kDouble) / 500001.0;
    at::Tensor v;
    if (ends_with(name, "running_var")) {
      v = u * 0.5 + 1.5;
    } else if (ends_with(name, "running_mean")) {
      v = u * 0.1;
    } else if (t.dim() >= 2) {
      v = u * std::sqrt(6.0 / static_cast<double>(t.numel() / t.size(0)));
    } else if (ends_with(name, "weight")) {
      v = u * 0.1 + 0.9;
    } else {
      v = u * 0.1;
    }
    t.copy_(v.to(t.scalar_type()).reshape(t.sizes()));
  }
}

TEST(ResNet, StateDictNamesAndShapesEqualTorchvisionForEachDepthAndStem) {
  const auto& reference = Reference::get("resnet_state_dicts.txt");
  for (const auto& [arch, stem] : resnet_cases()) {
    const std::string name = arch + "_" + stem;
    SCOPED_TRACE(name);
    EXPECT_EQ(
        state_lines(*make_resnet(arch, stem)),
        reference_lines(reference.all(name, "state")));
  }
}

TEST(ResNet, HasTorchvisionParameterCounts) {
  const auto& reference = Reference::get("resnet_state_dicts.txt");
  // torchvision's documented sizes.
  EXPECT_EQ(parameter_count(*make_resnet("resnet18", "imagenet")), 11689512);
  EXPECT_EQ(parameter_count(*make_resnet("resnet34", "imagenet")), 21797672);
  EXPECT_EQ(parameter_count(*make_resnet("resnet50", "imagenet")), 25557032);
  EXPECT_EQ(
      parameter_count(*make_resnet("resnext50_32x4d", "imagenet")), 25028904);
  EXPECT_EQ(
      parameter_count(*make_resnet("wide_resnet50_2", "imagenet")), 68883240);
  for (const auto& [arch, stem] : resnet_cases()) {
    const std::string name = arch + "_" + stem;
    EXPECT_EQ(
        parameter_count(*make_resnet(arch, stem)),
        reference.one(name, "count", "params").values.at(0))
        << name;
  }
}

TEST(ResNet, CountsTheFlopsTorchvisionsModelsDo) {
  // Reference: forward hooks on torchvision's Conv2d and Linear modules.
  const auto& reference = Reference::get("resnet_state_dicts.txt");
  for (const auto& [arch, stem] : resnet_cases()) {
    const std::string name = arch + "_" + stem;
    const int64_t size = stem == "imagenet" ? 224 : 32;
    EXPECT_EQ(
        make_resnet(arch, stem)->flops_per_sample(size, size),
        reference.one(name, "count", "flops_" + std::to_string(size))
            .values.at(0))
        << name;
  }
}

TEST(ResNet, NamesTorchvisionsBuildersAndRefusesOthers) {
  EXPECT_EQ(resnet_names().size(), 10U);
  const ResNetOptions resnext = resnet_options("resnext101_64x4d");
  EXPECT_EQ(resnext.depth(), 101);
  EXPECT_EQ(resnext.groups(), 64);
  EXPECT_EQ(resnext.width_per_group(), 4);
  const ResNetOptions wide = resnet_options("wide_resnet101_2");
  EXPECT_EQ(wide.depth(), 101);
  EXPECT_EQ(wide.groups(), 1);
  EXPECT_EQ(wide.width_per_group(), 128);
  EXPECT_EQ(resnet_options("resnet152").depth(), 152);
  EXPECT_THROWS_WITH(
      ConfigError,
      resnet_options("resnet200"),
      "model.name 'resnet200' is not a ResNet; expected one of resnet18, "
      "resnet34, resnet50, resnet101, resnet152, resnext50_32x4d, "
      "resnext101_32x8d, resnext101_64x4d, wide_resnet50_2, "
      "wide_resnet101_2");
}

TEST(ResNet, ConvWeightsAreKaimingNormalWithFanOut) {
  torch::manual_seed(0);
  ResNet model = make_resnet("resnet18", "imagenet");
  int convs = 0;
  for (const auto& item : model->named_modules()) {
    if (auto* conv = item.value()->as<torch::nn::Conv2d>()) {
      const at::Tensor& w = conv->weight;
      // fan_out = out_channels * kernel area; fan_in would differ in the
      // stem, the downsample convs and the first conv of layers 2-4.
      const double fan_out =
          static_cast<double>(w.size(0) * w.size(2) * w.size(3));
      // The smallest conv has 8192 weights: the std estimate's relative
      // error is ~0.8%, so 4% is five standard errors.
      expect_std(w, std::sqrt(2.0 / fan_out), 0.04, item.key());
      EXPECT_FALSE(conv->bias.defined()) << item.key();
      ++convs;
    }
  }
  EXPECT_EQ(convs, 20); // stem + 8 blocks x 2 + 3 downsample convs
}

TEST(ResNet, BatchNormStartsAtWeightOneBiasZero) {
  ResNet model = make_resnet("resnet34", "cifar");
  int norms = 0;
  for (const auto& item : model->named_modules()) {
    if (auto* bn = item.value()->as<torch::nn::BatchNorm2d>()) {
      EXPECT_TRUE(all_equal(bn->weight, 1.0)) << item.key();
      EXPECT_TRUE(all_equal(bn->bias, 0.0)) << item.key();
      EXPECT_TRUE(all_equal(bn->running_mean, 0.0)) << item.key();
      EXPECT_TRUE(all_equal(bn->running_var, 1.0)) << item.key();
      ++norms;
    }
  }
  EXPECT_EQ(norms, 1 + 16 * 2 + 3);
}

TEST(ResNet, ZeroInitResidualZeroesTheLastBatchNormOfEveryBlock) {
  ResNet model(ResNetOptions(18).zero_init_residual(true));
  int zeroed = 0;
  for (const auto& [name, t] : state_dict(*model)) {
    if (ends_with(name, "bn2.weight")) {
      EXPECT_TRUE(all_equal(t, 0.0)) << name;
      ++zeroed;
    } else if (ends_with(name, "bn1.weight")) {
      EXPECT_TRUE(all_equal(t, 1.0)) << name;
    }
  }
  EXPECT_EQ(zeroed, 8);
  ResNet plain(ResNetOptions(18));
  for (const auto& [name, t] : state_dict(*plain)) {
    if (ends_with(name, "bn2.weight")) {
      EXPECT_TRUE(all_equal(t, 1.0)) << name;
    }
  }
}

TEST(ResNet, ZeroInitResidualZeroesEachBottlenecksThirdBatchNorm) {
  // torchvision zeroes a Bottleneck's bn3, its last; bn1, bn2 and the
  // shortcut's norm keep weight 1.
  ResNet model(resnet_options("resnet50").zero_init_residual(true));
  int zeroed = 0;
  int ones = 0;
  for (const auto& [name, t] : state_dict(*model)) {
    if (ends_with(name, "bn3.weight")) {
      EXPECT_TRUE(all_equal(t, 0.0)) << name;
      ++zeroed;
    } else if (
        ends_with(name, "bn1.weight") || ends_with(name, "bn2.weight") ||
        ends_with(name, "downsample.1.weight")) {
      EXPECT_TRUE(all_equal(t, 1.0)) << name;
      ++ones;
    }
  }
  EXPECT_EQ(zeroed, 3 + 4 + 6 + 3);
  EXPECT_EQ(ones, 1 + 16 * 2 + 4);
}

TEST(ResNet, FcKeepsPyTorchDefaultLinearInit) {
  torch::manual_seed(0);
  ResNet model = make_resnet("resnet18", "imagenet");
  const at::Tensor w = model->named_parameters()["fc.weight"];
  const at::Tensor b = model->named_parameters()["fc.bias"];
  // kaiming_uniform(a=sqrt(5)): U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  const double bound = 1.0 / std::sqrt(512.0);
  EXPECT_LE(w.abs().max().item<double>(), bound);
  expect_std(w, bound / std::sqrt(3.0), 0.02, "fc.weight");
  EXPECT_LE(b.abs().max().item<double>(), bound);
  EXPECT_GT(b.abs().max().item<double>(), 0.5 * bound);
}

TEST(ResNet, ForwardMatchesTorchvisionWithDeterministicWeights) {
  // BasicBlocks, Bottlenecks, and Bottlenecks with a grouped 3x3 conv.
  const auto& reference = Reference::get("models_forward.txt");
  for (const std::string arch : {"resnet18", "resnet50", "resnext50_32x4d"}) {
    SCOPED_TRACE(arch);
    const std::string name = arch + "_cifar";
    ResNet model = make_resnet(arch, "cifar");
    deterministic_fill(*model);
    model->eval();
    const at::Tensor x =
        to_tensor(reference.one(name, "input", "x"), at::kFloat, kInputScale);
    torch::NoGradGuard no_grad;
    expect_close(
        model->forward(x),
        to_tensor(reference.one(name, "output", "logits"), at::kFloat),
        kParityTolerance);
  }
}

TEST(ResNet, OutputsOneLogitPerClassForEitherStemAndAnyChannelCount) {
  ResNet imagenet(ResNetOptions(18).in_channels(1).num_classes(7));
  EXPECT_EQ(
      imagenet->forward(at::randn({2, 1, 64, 64})).sizes(),
      at::IntArrayRef({2, 7}));
  EXPECT_EQ(
      imagenet->named_parameters()["conv1.weight"].sizes(),
      at::IntArrayRef({64, 1, 7, 7}));
  ResNet cifar(ResNetOptions(34).stem("cifar").num_classes(10));
  EXPECT_EQ(
      cifar->forward(at::randn({2, 3, 32, 32})).sizes(),
      at::IntArrayRef({2, 10}));
}

TEST(ResNet, BackwardReachesEveryParameterInTraining) {
  // The blocks use in-place ReLU and residual adds, as torchvision.
  for (const std::string arch : {"resnet18", "resnext50_32x4d"}) {
    ResNet model = make_resnet(arch, "cifar");
    model->train();
    model->forward(at::randn({2, 3, 16, 16})).square().mean().backward();
    for (const auto& p : model->named_parameters()) {
      ASSERT_TRUE(p.value().grad().defined()) << arch << " " << p.key();
      EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0.0)
          << arch << " " << p.key();
    }
  }
}

TEST(ResNet, BadOptionsNameTheOption) {
  EXPECT_THROWS_WITH(
      ConfigError,
      ResNet(ResNetOptions(20)),
      "model.depth must be 18, 34, 50, 101 or 152, got 20");
  EXPECT_THROWS_WITH(
      ConfigError,
      ResNet(ResNetOptions(34).groups(32).width_per_group(4)),
      "model.groups and model.width_per_group must be 1 and 64 for depth 34 "
      "(BasicBlocks, as torchvision), got 32 and 4");
  EXPECT_THROWS_WITH(
      ConfigError,
      ResNet(ResNetOptions(50).groups(0)),
      "model.groups and model.width_per_group must be positive, got 0 and 64");
  EXPECT_THROWS_WITH(
      ConfigError,
      ResNet(ResNetOptions(18).stem("tiny")),
      "model.stem must be imagenet or cifar, got 'tiny'");
  EXPECT_THROWS_WITH(
      ConfigError,
      ResNet(ResNetOptions(18).num_classes(1)),
      "model.num_classes must be > 1, got 1");
  EXPECT_THROWS_WITH(
      ConfigError,
      ResNet(ResNetOptions(18).in_channels(0)),
      "model.in_channels must be positive, got 0");
}

// ----------------------------------------------------------------------
// Mlp

// As make_models_reference.py's mlp_lines().
MlpOptions reference_mlp_options(const std::string& activation) {
  return MlpOptions(20, 5).hidden({16, 8}).activation(activation);
}

TEST(Mlp, ForwardMatchesPyTorchForReluAndGelu) {
  const auto& reference = Reference::get("models_forward.txt");
  for (const std::string activation : {"relu", "gelu"}) {
    SCOPED_TRACE(activation);
    const std::string name = "mlp_" + activation;
    Mlp model(reference_mlp_options(activation));
    load_reference_parameters(*model, name);
    const at::Tensor x =
        to_tensor(reference.one(name, "input", "x"), at::kFloat, kInputScale);
    torch::NoGradGuard no_grad;
    expect_close(
        model->forward(x),
        to_tensor(reference.one(name, "output", "logits"), at::kFloat),
        kParityTolerance);
  }
}

TEST(Mlp, FlattensTheInputAndNamesItsLinearLayersInOrder) {
  Mlp model(reference_mlp_options("relu"));
  EXPECT_EQ(
      state_lines(*model),
      std::vector<std::string>(
          {"layers.0.weight [16,20]",
           "layers.0.bias [16]",
           "layers.1.weight [8,16]",
           "layers.1.bias [8]",
           "layers.2.weight [5,8]",
           "layers.2.bias [5]"}));
  EXPECT_EQ(
      model->forward(at::randn({3, 4, 5})).sizes(), at::IntArrayRef({3, 5}));
  Mlp linear(MlpOptions(6, 2));
  EXPECT_EQ(parameter_count(*linear), 6 * 2 + 2);
}

TEST(Mlp, LinearLayersKeepPyTorchDefaultInit) {
  torch::manual_seed(0);
  Mlp model(MlpOptions(1024, 10).hidden({512}));
  const at::Tensor w = model->named_parameters()["layers.0.weight"];
  const double bound = 1.0 / std::sqrt(1024.0);
  EXPECT_LE(w.abs().max().item<double>(), bound);
  expect_std(w, bound / std::sqrt(3.0), 0.02, "layers.0.weight");
}

TEST(Mlp, DropoutActsOnlyInTraining) {
  torch::manual_seed(0);
  Mlp model(MlpOptions(32, 4).hidden({256}).dropout(0.5));
  const at::Tensor x = at::randn({8, 32});
  torch::NoGradGuard no_grad;
  model->eval();
  const at::Tensor eval = model->forward(x);
  EXPECT_TRUE(model->forward(x).equal(eval));
  model->train();
  EXPECT_FALSE(model->forward(x).allclose(eval));
}

TEST(Mlp, BadOptionsNameTheOption) {
  EXPECT_THROWS_WITH(
      ConfigError,
      Mlp(MlpOptions(20, 5).activation("tanh")),
      "model.activation must be relu or gelu, got 'tanh'");
  EXPECT_THROWS_WITH(
      ConfigError,
      Mlp(MlpOptions(20, 5).hidden({16, 0})),
      "model.hidden must be positive, got 0");
  EXPECT_THROWS_WITH(
      ConfigError,
      Mlp(MlpOptions(0, 5)),
      "model.in_features must be positive, got 0");
  EXPECT_THROWS_WITH(
      ConfigError,
      Mlp(MlpOptions(20, 5).dropout(1.0)),
      "model.dropout must be in [0, 1), got 1");
}

// ----------------------------------------------------------------------
// Gpt

TEST(Gpt, ParameterNamesAndShapesEqualNanoGpt) {
  // nanoGPT's named_parameters(), which lists the tied lm_head.weight once,
  // as transformer.wte.weight.
  EXPECT_EQ(
      state_lines(*Gpt(GptOptions::tiny())),
      reference_lines(
          Reference::get("models_forward.txt").all("gpt_tiny", "param")));
}

TEST(Gpt, ForwardMatchesNanoGptLogitsAndLoss) {
  const auto& reference = Reference::get("models_forward.txt");
  Gpt model(GptOptions::tiny());
  load_reference_parameters(*model, "gpt_tiny");
  model->eval();
  const at::Tensor idx =
      to_tensor(reference.one("gpt_tiny", "tokens", "idx"), at::kLong);
  const at::Tensor targets =
      to_tensor(reference.one("gpt_tiny", "targets", "targets"), at::kLong);
  torch::NoGradGuard no_grad;
  const at::Tensor logits = model->forward(idx);
  expect_close(
      logits,
      to_tensor(reference.one("gpt_tiny", "output", "logits"), at::kFloat),
      kParityTolerance);
  // The reference's targets hold -1s, which the loss ignores.
  EXPECT_NEAR(
      gpt_loss(logits, targets).item<double>(),
      reference.one("gpt_tiny", "loss", "loss").values.at(0),
      kParityTolerance);
}

TEST(Gpt, Gpt2SmallHasNanoGptParameterCount) {
  const GptOptions options = GptOptions::gpt2_124m();
  Gpt model(options);
  const auto& counts = Reference::get("models_forward.txt")
                           .one("gpt2_124m", "count", "params")
                           .values;
  // 124,439,808 = wte 50257*768 + wpe 1024*768 + 12 blocks * 7,087,872
  // + ln_f 2*768; nanoGPT reports 123.65M, without wpe.
  EXPECT_EQ(model->num_params(/*non_embedding=*/false), 124439808);
  EXPECT_EQ(model->num_params(), 123653376);
  EXPECT_EQ(parameter_count(*model), counts.at(0));
  EXPECT_EQ(model->num_params(), counts.at(1));
  const GptOptions defaults;
  EXPECT_EQ(options.vocab_size(), defaults.vocab_size());
  EXPECT_EQ(options.n_embd(), defaults.n_embd());
  // The training FLOPs per token that bench/run's MFU column counts:
  // bench/python_train.py's gpt_flops_per_token(12, 12, 768, 50257, 1024).
  EXPECT_EQ(3 * model->forward_flops_per_token(1024), 855166464.0);
}

TEST(Gpt, TrainingFlopsAreTheMfuColumnsCount) {
  // bench/python_train.py's gpt_flops_per_token(2, 2, 32, 64, 16), nanoGPT's
  // 6N + 12 L H Q T: the step profile's MFU divides the same count.
  Gpt model(GptOptions::tiny());
  EXPECT_EQ(3 * model->forward_flops_per_token(16), 177408.0);
}

TEST(Gpt, InitialisesWeightsAsNanoGpt) {
  torch::manual_seed(0);
  // Big enough for tight std estimates: the smallest matrix has 16384
  // weights.
  Gpt model(GptOptions::tiny()
                .vocab_size(1024)
                .block_size(256)
                .n_layer(4)
                .n_head(4)
                .n_embd(128));
  // GPT-2's scaled init of the residual projections.
  const double residual_std = 0.02 / std::sqrt(2.0 * 4);
  int scaled = 0;
  for (const auto& [name, p] : state_dict(*model)) {
    if (ends_with(name, "c_proj.weight")) {
      // std estimates err by ~0.6% here: 4% is over six standard errors.
      expect_std(p, residual_std, 0.04, name);
      ++scaled;
    } else if (p.dim() == 2) {
      expect_std(p, 0.02, 0.04, name);
    } else if (
        name.find(".ln_") != std::string::npos && ends_with(name, "weight")) {
      EXPECT_TRUE(all_equal(p, 1.0)) << name;
    } else {
      EXPECT_TRUE(ends_with(name, "bias")) << name;
      EXPECT_TRUE(all_equal(p, 0.0)) << name;
    }
  }
  EXPECT_EQ(scaled, 2 * 4);
}

TEST(Gpt, LmHeadIsTheTokenEmbeddingWeight) {
  Gpt model(GptOptions::tiny());
  const auto params = model->named_parameters();
  EXPECT_TRUE(
      model->lm_head_weight().is_same(params["transformer.wte.weight"]));
  for (const auto& p : params) {
    EXPECT_EQ(p.key().find("lm_head"), std::string::npos) << p.key();
  }
  // Gradients of the logits reach wte through lm_head even for tokens that
  // are not in the input.
  const at::Tensor idx = at::zeros({1, 4}, at::kLong);
  model->forward(idx).sum().backward();
  const at::Tensor grad = params["transformer.wte.weight"].grad();
  ASSERT_TRUE(grad.defined());
  EXPECT_GT(grad[5].abs().sum().item<double>(), 0.0);
}

TEST(CausalAttention, IsEachPositionsSoftmaxOverItsPastInValueAndGradient) {
  // The definition, one query position at a time in float64, against the
  // one call (SDPA on LibTorch 2.x, baddbmm with a -inf bias on 1.13), on
  // q, k, v as the GPT passes them: views of one [B, T, 3 * H * D] tensor.
  torch::manual_seed(0);
  const int64_t b = 2;
  const int64_t h = 3;
  const int64_t t = 7;
  const int64_t d = 4;
  const at::Tensor qkv =
      at::randn({b, t, 3 * h * d}, at::kDouble).set_requires_grad(true);
  const auto heads = [&](int64_t i) {
    return qkv.narrow(2, i * h * d, h * d).view({b, t, h, d}).transpose(1, 2);
  };
  const at::Tensor weights = at::randn({b, h, t, d}, at::kDouble);

  const at::Tensor y =
      compat::causal_attention(heads(0), heads(1), heads(2), 0);
  ASSERT_EQ(y.sizes(), at::IntArrayRef({b, h, t, d}));
  const at::Tensor grad =
      torch::autograd::grad({(y * weights).sum()}, {qkv})[0];

  std::vector<at::Tensor> rows;
  for (int64_t i = 0; i < t; ++i) {
    const at::Tensor past_k = heads(1).narrow(2, 0, i + 1);
    const at::Tensor past_v = heads(2).narrow(2, 0, i + 1);
    const at::Tensor scores =
        heads(0).narrow(2, i, 1).matmul(past_k.transpose(-2, -1)) /
        std::sqrt(static_cast<double>(d));
    rows.push_back(scores.softmax(-1).matmul(past_v));
  }
  const at::Tensor expected = at::cat(rows, 2);
  const at::Tensor expected_grad =
      torch::autograd::grad({(expected * weights).sum()}, {qkv})[0];

  EXPECT_TRUE(y.allclose(expected, /*rtol=*/0, /*atol=*/1e-12))
      << (y - expected).abs().max().item<double>();
  EXPECT_TRUE(grad.allclose(expected_grad, /*rtol=*/0, /*atol=*/1e-12))
      << (grad - expected_grad).abs().max().item<double>();
  // The first position sees itself alone: its output is its own value.
  EXPECT_TRUE(y.narrow(2, 0, 1).allclose(heads(2).narrow(2, 0, 1), 0, 1e-15));
}

TEST(Gpt, LogitsAtAPositionIgnoreLaterTokens) {
  torch::manual_seed(0);
  const GptOptions options = GptOptions::tiny();
  Gpt model(options);
  model->eval();
  torch::NoGradGuard no_grad;
  const int64_t t_max = options.block_size();
  const at::Tensor idx =
      at::randint(options.vocab_size(), {2, t_max}, at::kLong);
  const at::Tensor logits = model->forward(idx);
  for (int64_t t : {0, 5, 14}) {
    SCOPED_TRACE(t);
    at::Tensor changed = idx.clone();
    changed.narrow(1, t + 1, t_max - t - 1)
        .add_(1)
        .remainder_(options.vocab_size());
    const at::Tensor other = model->forward(changed);
    EXPECT_TRUE(
        other.narrow(1, 0, t + 1)
            .allclose(logits.narrow(1, 0, t + 1), /*rtol=*/0, /*atol=*/1e-6));
    // Positions that see a changed token do change.
    EXPECT_FALSE(
        other.narrow(1, t + 1, 1)
            .allclose(logits.narrow(1, t + 1, 1), /*rtol=*/0, /*atol=*/1e-4));
  }
}

TEST(Gpt, DropoutActsOnlyInTraining) {
  torch::manual_seed(0);
  Gpt model(GptOptions::tiny().dropout(0.2));
  const at::Tensor idx = at::randint(64, {2, 16}, at::kLong);
  torch::NoGradGuard no_grad;
  model->eval();
  const at::Tensor eval = model->forward(idx);
  EXPECT_TRUE(model->forward(idx).equal(eval));
  model->train();
  EXPECT_FALSE(model->forward(idx).allclose(eval));
}

TEST(Gpt, WithoutBiasHasNoBiasParameters) {
  Gpt model(GptOptions::tiny().bias(false));
  int64_t expected = 64 * 32 + 16 * 32 + 32; // wte, wpe, ln_f
  expected += 2 * (2 * 32 + 32 * 96 + 32 * 32 + 32 * 128 + 128 * 32);
  EXPECT_EQ(model->num_params(/*non_embedding=*/false), expected);
  for (const auto& p : model->named_parameters()) {
    EXPECT_FALSE(ends_with(p.key(), "bias")) << p.key();
  }
  EXPECT_EQ(
      model->forward(at::zeros({1, 3}, at::kLong)).sizes(),
      at::IntArrayRef({1, 3, 64}));
}

TEST(Gpt, TheKvCacheGivesTheLogitsOfTheWholeSequence) {
  Gpt model(GptOptions::tiny());
  load_reference_parameters(*model, "gpt_tiny");
  model->eval();
  torch::NoGradGuard no_grad;
  const at::Tensor idx = to_tensor(
      Reference::get("models_forward.txt").one("gpt_tiny", "tokens", "idx"),
      at::kLong);
  const at::Tensor full = model->forward(idx);
  // A prompt of 5, then one token at a time, then the rest at once.
  GptKvCache cache;
  std::vector<at::Tensor> parts = {model->decode(idx.slice(1, 0, 5), cache)};
  for (int64_t t = 5; t < 9; ++t) {
    parts.push_back(model->decode(idx.slice(1, t, t + 1), cache));
  }
  parts.push_back(model->decode(idx.slice(1, 9), cache));
  EXPECT_EQ(cache.length(), 16);
  expect_close(at::cat(parts, 1), full, 1e-5);
  EXPECT_THROWS_WITH(
      Error,
      model->decode(idx.slice(1, 0, 1), cache),
      "cannot forward a sequence of length 17, model.block_size is only 16");
}

TEST(Gpt, GenerateGivesNanoGptsTokensForItsSeed) {
  const auto& reference = Reference::get("models_forward.txt");
  Gpt model(GptOptions::tiny());
  load_reference_parameters(*model, "gpt_tiny");
  const at::Tensor expected =
      to_tensor(reference.one("gpt_tiny", "generate", "tokens"), at::kLong);
  const at::Tensor prompt = expected.slice(1, 0, 3);
  // Past block_size (16) the context is cropped, as nanoGPT's.
  for (const bool kv_cache : {true, false}) {
    std::vector<int64_t> streamed;
    const at::Tensor tokens = generate(
        *model,
        prompt,
        GenerateOptions()
            .max_new_tokens(20)
            .temperature(0.8)
            .top_k(10)
            .seed(1337)
            .kv_cache(kv_cache),
        [&](const at::Tensor& next) { streamed.push_back(next.item<int64_t>()); });
    EXPECT_TRUE(tokens.equal(expected)) << "kv_cache " << kv_cache << ": "
                                        << tokens;
    EXPECT_EQ(
        streamed,
        std::vector<int64_t>(
            expected.data_ptr<int64_t>() + 3, expected.data_ptr<int64_t>() + 23));
  }
  EXPECT_TRUE(model->is_training()); // the mode it had
}

TEST(Gpt, TopKOfOneGeneratesTheMostLikelyToken) {
  Gpt model(GptOptions::tiny());
  load_reference_parameters(*model, "gpt_tiny");
  model->eval();
  const at::Tensor prompt = at::tensor({3, 1, 4}, at::kLong).view({1, 3});
  const at::Tensor tokens =
      generate(*model, prompt, GenerateOptions().max_new_tokens(6).top_k(1));
  torch::NoGradGuard no_grad;
  at::Tensor greedy = prompt;
  for (int i = 0; i < 6; ++i) {
    const at::Tensor next =
        model->forward(greedy).select(1, -1).argmax(-1, /*keepdim=*/true);
    greedy = at::cat({greedy, next}, 1);
  }
  EXPECT_TRUE(tokens.equal(greedy)) << tokens << greedy;
}

TEST(Gpt, GenerateRejectsBadSettings) {
  Gpt model(GptOptions::tiny());
  const at::Tensor prompt = at::zeros({1, 2}, at::kLong);
  EXPECT_THROWS_WITH(
      ConfigError,
      generate(*model, prompt, GenerateOptions().temperature(0)),
      "temperature must be positive, got 0");
  EXPECT_THROWS_WITH(
      ConfigError,
      generate(*model, prompt, GenerateOptions().top_k(-1)),
      "top_k must be >= 0 (0: every token), got -1");
  EXPECT_THROWS_WITH(
      Error,
      generate(*model, at::full({1, 2}, 64, at::kLong), GenerateOptions()),
      "prompt token ids must lie in [0, 64)");
}

TEST(Gpt, RejectsSequencesLongerThanBlockSize) {
  Gpt model(GptOptions::tiny());
  EXPECT_THROWS_WITH(
      Error,
      model->forward(at::zeros({1, 17}, at::kLong)),
      "Gpt: cannot forward a sequence of length 17, model.block_size is only "
      "16");
}

TEST(Gpt, BadOptionsNameTheOption) {
  EXPECT_THROWS_WITH(
      ConfigError,
      Gpt(GptOptions().n_embd(100).n_head(12)),
      "model.n_embd (100) must be divisible by model.n_head (12)");
  EXPECT_THROWS_WITH(
      ConfigError,
      Gpt(GptOptions::tiny().n_head(0)),
      "model.n_head must be positive, got 0");
  EXPECT_THROWS_WITH(
      ConfigError,
      Gpt(GptOptions::tiny().vocab_size(0)),
      "model.vocab_size must be positive, got 0");
  EXPECT_THROWS_WITH(
      ConfigError,
      Gpt(GptOptions::tiny().dropout(1.0)),
      "model.dropout must be in [0, 1), got 1");
  EXPECT_THROWS_WITH(
      ConfigError,
      Gpt(GptOptions::tiny().loss_chunk_size(-1)),
      "model.loss_chunk_size must be >= 0 (0: the whole batch's logits), got "
      "-1");
}

GptOptions with_every_fused_kernel(GptOptions options) {
  return options.fused_layer_norm(true)
      .fused_cross_entropy(true)
      .fused_bias_gradient(true);
}

TEST(Gpt, EveryFusedKernelTogetherTrainsAsWithoutOnTheCpu) {
  // The GPU levers' "the three together": on the CPU each option runs
  // ATen's ops, so together they give the same loss, gradients and
  // evaluation logits bit for bit, float32 and bf16 autocast.
  const auto options = testing::without_fused_kernels(
      GptOptions::tiny().dropout(0.1).loss_chunk_size(5));
  const at::Device cpu(at::kCPU);
  for (const bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "float32");
    testing::expect_same_step(
        testing::tiny_gpt_step(with_every_fused_kernel(options), cpu, bf16),
        testing::tiny_gpt_step(options, cpu, bf16));
  }
}

TEST(GptCuda, EveryFusedKernelTogetherTrainsAsWithout) {
  if (const std::string why = testing::cuda_kernels_missing(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  // Each kernel's own test allows its rounding; together (the output of
  // one the input of the next) they stay within the sum of those. In
  // bf16 the plain loss rounds each target's log-probability to bf16 (a
  // step of 1/32 near the tiny GPT's -4.2) and the fused kernel does not:
  // over its 48 targets the losses differ by about 1.3e-3 (one standard
  // deviation), so 1e-2.
  const auto options =
      testing::without_fused_kernels(GptOptions::tiny().loss_chunk_size(5));
  const at::Device gpu(at::kCUDA, 0);
  for (const bool bf16 : {false, true}) {
    testing::expect_close_step(
        testing::tiny_gpt_step(with_every_fused_kernel(options), gpu, bf16),
        testing::tiny_gpt_step(options, gpu, bf16),
        bf16 ? 1e-2 : 2e-5,
        bf16 ? 8e-2 : 2e-3,
        bf16 ? "bf16" : "float32");
  }
}

} // namespace
} // namespace hotloop::models
