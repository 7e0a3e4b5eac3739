#include "hotloop/compress/prune.h"
#include "hotloop/core/error.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/utils.h>

#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace hotloop::compress {
namespace {

namespace nn = torch::nn;
using hotloop::testing::Reference;

// The modules of tests/reference/make_prune_reference.py: `conv`
// Conv2d(4, 6, 3) and `linear` Linear(10, 7), their values read from the
// reference (exact float32).
struct Net : nn::Module {
  Net() {
    conv = register_module("conv", nn::Conv2d(nn::Conv2dOptions(4, 6, 3)));
    linear = register_module("linear", nn::Linear(10, 7));
  }
  nn::Conv2d conv{nullptr};
  nn::Linear linear{nullptr};
};

std::shared_ptr<Net> reference_net(const std::string& name) {
  auto net = std::make_shared<Net>();
  const at::NoGradGuard no_grad;
  for (const auto& entry : Reference::get("prune.txt").all(name, "param")) {
    net->named_parameters()[entry.name].copy_(
        hotloop::testing::to_tensor(entry, at::kFloat));
  }
  return net;
}

PruningAmount f(double fraction) {
  return PruningAmount::fraction(fraction);
}
PruningAmount n(int64_t count) {
  return PruningAmount::count(count);
}

using Calls = std::function<void(Net&)>;

// The calls of each case, as the Python script makes them; the seed the
// script sets before them (-1: none).
const std::map<std::string, std::pair<int64_t, Calls>>& cases() {
  static const std::map<std::string, std::pair<int64_t, Calls>> all = {
      {"l1_fraction",
       {-1, [](Net& m) { l1_unstructured(m, "linear.weight", f(0.3)); }}},
      {"l1_half_to_even_down",
       {-1, [](Net& m) { l1_unstructured(m, "conv.bias", f(0.75)); }}},
      {"l1_half_to_even_up",
       {-1, [](Net& m) { l1_unstructured(m, "conv.bias", f(0.25)); }}},
      {"l1_count",
       {-1, [](Net& m) { l1_unstructured(m, "linear.weight", n(5)); }}},
      {"l1_all",
       {-1, [](Net& m) { l1_unstructured(m, "linear.weight", f(1.0)); }}},
      {"l1_twice",
       {-1,
        [](Net& m) {
          l1_unstructured(m, "linear.weight", f(0.5));
          l1_unstructured(m, "linear.weight", f(0.5));
        }}},
      {"l1_importance",
       {-1,
        [](Net& m) {
          l1_unstructured(
              m,
              "linear.weight",
              f(0.4),
              at::arange(70, at::kFloat).remainder(13).view({7, 10}));
        }}},
      {"random_unstructured",
       {1,
        [](Net& m) {
          random_unstructured(m, "conv.weight", f(0.4));
          random_unstructured(m, "conv.weight", f(0.4));
        }}},
      {"ln_l2_dim0",
       {-1, [](Net& m) { ln_structured(m, "conv.weight", f(0.5), 2, 0); }}},
      {"ln_l1_dim1_count",
       {-1, [](Net& m) { ln_structured(m, "conv.weight", n(1), 1, 1); }}},
      {"ln_inf_last_dim",
       {-1,
        [](Net& m) {
          ln_structured(m, "linear.weight", f(0.3), INFINITY, -1);
        }}},
      {"ln_neg_inf_dim0",
       {-1,
        [](Net& m) {
          ln_structured(m, "conv.weight", f(0.34), -INFINITY, 0);
        }}},
      {"ln_twice",
       {-1,
        [](Net& m) {
          ln_structured(m, "conv.weight", f(0.5), 2, 0);
          ln_structured(m, "conv.weight", f(0.5), 2, 0);
        }}},
      {"random_structured",
       {2,
        [](Net& m) {
          random_structured(m, "conv.weight", f(0.5), 0);
          random_structured(m, "linear.weight", n(3), 1);
        }}},
      {"mixed",
       {3,
        [](Net& m) {
          l1_unstructured(m, "conv.weight", f(0.3));
          ln_structured(m, "conv.weight", f(0.5), 2, 0);
          l1_unstructured(m, "conv.weight", f(0.2));
          random_structured(m, "conv.weight", n(1), 1);
          random_unstructured(m, "conv.weight", f(0.1));
        }}},
      {"global_l1",
       {-1,
        [](Net& m) {
          const std::vector<ParameterRef> params = {
              find_parameter(m, "conv.weight"),
              find_parameter(m, "linear.weight"),
              find_parameter(m, "conv.bias")};
          global_unstructured(params, L1Unstructured(f(0.4)));
          global_unstructured(params, L1Unstructured(f(0.3)));
        }}},
      {"global_after_local",
       {-1,
        [](Net& m) {
          ln_structured(m, "linear.weight", n(2), 1, 0);
          global_unstructured(
              {find_parameter(m, "conv.weight"),
               find_parameter(m, "linear.weight")},
              L1Unstructured(n(100)));
        }}},
      {"global_random",
       {4,
        [](Net& m) {
          global_unstructured(
              {find_parameter(m, "conv.weight"),
               find_parameter(m, "linear.weight")},
              RandomUnstructured(n(50)));
        }}},
      {"ties_l1",
       {-1,
        [](Net& m) {
          l1_unstructured(m, "linear.weight", f(0.5));
          l1_unstructured(m, "conv.weight", f(0.37));
        }}},
      {"ties_ln",
       {-1,
        [](Net& m) {
          ln_structured(m, "conv.weight", n(2), 1, 0);
          ln_structured(m, "linear.weight", f(0.4), 2, 1);
        }}},
      {"ties_global",
       {-1,
        [](Net& m) {
          global_unstructured(
              {find_parameter(m, "conv.weight"),
               find_parameter(m, "linear.weight")},
              L1Unstructured(f(0.45)));
        }}},
      {"identity_then_l1",
       {-1,
        [](Net& m) {
          identity(m, "linear.bias");
          l1_unstructured(m, "linear.bias", n(2));
        }}},
  };
  return all;
}

TEST(Prune, EveryMethodGivesTorchNnUtilsPrunesMasks) {
  const Reference& reference = Reference::get("prune.txt");
  ASSERT_EQ(cases().size(), 22u);
  for (const auto& [name, seed_calls] : cases()) {
    auto net = reference_net(name);
    if (seed_calls.first >= 0) {
      torch::manual_seed(static_cast<uint64_t>(seed_calls.first));
    }
    seed_calls.second(*net);
    const auto masks = reference.all(name, "mask");
    ASSERT_EQ(masks.size(), net->named_buffers().size()) << name;
    for (const auto& entry : masks) {
      const at::Tensor want = hotloop::testing::to_tensor(entry, at::kFloat);
      const at::Tensor got = net->named_buffers()[entry.name];
      EXPECT_TRUE(got.equal(want))
          << name << " " << entry.name << ": " << (got != want).sum().item()
          << " entries differ";
    }
    recompute_pruned(*net);
    for (const auto& entry : reference.all(name, "pruned")) {
      const size_t dot = entry.name.find('.');
      nn::Module& module = entry.name.substr(0, dot) == "conv"
                               ? static_cast<nn::Module&>(*net->conv)
                               : static_cast<nn::Module&>(*net->linear);
      const std::string tensor = entry.name.substr(dot + 1);
      const at::Tensor got =
          tensor == "weight"
              ? (entry.name[0] == 'c' ? net->conv->weight : net->linear->weight)
              : (entry.name[0] == 'c' ? net->conv->bias : net->linear->bias);
      EXPECT_TRUE(got.equal(hotloop::testing::to_tensor(entry, at::kFloat)))
          << name << " " << entry.name;
      EXPECT_TRUE(is_pruned(module, tensor)) << name << " " << entry.name;
    }
  }
}

TEST(Prune, ReparametrisesAsPyTorchAndGradientsReachTheOriginalThroughTheMask) {
  auto net = reference_net("l1_fraction");
  const at::Tensor weight = net->linear->weight;
  l1_unstructured(*net, "linear.weight", f(0.3));
  // weight -> weight_orig (the same tensor, in weight's place) + weight_mask.
  std::vector<std::string> names;
  for (const auto& p : net->linear->named_parameters(false)) {
    names.push_back(p.key());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"weight_orig", "bias"}));
  EXPECT_TRUE(net->linear->named_parameters()["weight_orig"].is_same(weight));
  EXPECT_EQ(net->linear->named_buffers().size(), 1u);
  EXPECT_TRUE(net->linear->named_buffers().contains("weight_mask"));
  EXPECT_TRUE(is_pruned(*net));
  EXPECT_FALSE(is_pruned(*net->conv));
  ASSERT_EQ(pruned_tensors(*net).size(), 1u);
  EXPECT_EQ(pruned_tensors(*net)[0].path, "linear.weight");
  EXPECT_EQ(parameter_names(*net).at(2), "linear.weight");

  const at::Tensor mask = mask_of(*net->linear, "weight");
  EXPECT_EQ(mask.sum().item<double>(), 70 - 21);
  recompute_pruned(*net);
  const at::Tensor x = at::randn({3, 10});
  net->linear->forward(x).sum().backward();
  // d(sum(x W^T))/dW = column sums of x per row, times the mask.
  const at::Tensor expected = x.sum(0).expand({7, 10}) * mask;
  EXPECT_TRUE(at::allclose(weight.grad(), expected));
  EXPECT_TRUE(net->linear->weight.equal(weight.detach() * mask));
}

TEST(Prune, RemoveMakesThePruningPermanentInTheParametersPlace) {
  auto net = reference_net("l1_fraction");
  const at::Tensor weight = net->linear->named_parameters()["weight"];
  l1_unstructured(*net, "linear.weight", f(0.3));
  ln_structured(*net, "conv.weight", f(0.5), 2, 0);
  const at::Tensor masked = masked_tensor(*net->linear, "weight").detach();
  remove(*net->linear, "weight");
  std::vector<std::string> names;
  for (const auto& p : net->linear->named_parameters(false)) {
    names.push_back(p.key());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"weight", "bias"}));
  EXPECT_TRUE(net->linear->named_parameters()["weight"].is_same(weight));
  EXPECT_TRUE(weight.equal(masked));
  EXPECT_TRUE(net->linear->weight.is_same(weight));
  EXPECT_EQ(net->linear->named_buffers().size(), 0u);
  EXPECT_THAT(
      [&] { remove(*net->linear, "weight"); },
      ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr(
          "Parameter 'weight' of torch::nn::LinearImpl has to be pruned "
          "before pruning can be removed")));
  EXPECT_EQ(make_pruning_permanent(*net), 1);
  EXPECT_FALSE(is_pruned(*net));
  EXPECT_EQ(net->named_parameters().size(), 4u);
}

TEST(Prune, BadInputIsNamed) {
  auto net = reference_net("l1_fraction");
  EXPECT_THAT(
      [&] { PruningAmount::fraction(1.5); },
      ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr(
          "amount=1.5 should either be a float in the range [0, 1] or a "
          "non-negative integer")));
  EXPECT_THAT(
      [&] { PruningAmount::count(-2); },
      ::testing::ThrowsMessage<ConfigError>(
          ::testing::HasSubstr("amount=-2 should either be")));
  EXPECT_THAT(
      [&] { PruningAmount::parse("half", "pruning.amount"); },
      ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr(
          "pruning.amount: 'half': expected a fraction such as 0.5 or a "
          "count such as 10")));
  EXPECT_THAT(
      [&] { l1_unstructured(*net, "linear.weight", n(71)); },
      ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr(
          "pruning 'linear.weight' (L1Unstructured): L1Unstructured: "
          "amount=71 should be smaller than the number of parameters to "
          "prune=70")));
  EXPECT_THAT(
      [&] { l1_unstructured(*net, "linear.wieght", n(1)); },
      ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr(
          "no parameter 'linear.wieght' in the model; its parameters: "
          "conv.weight, conv.bias, linear.weight, linear.bias")));
  EXPECT_THAT(
      [&] { ln_structured(*net, "linear.bias", f(0.5), 2, 0); },
      ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr(
          "Structured pruning can only be applied to multidimensional "
          "tensors. Found tensor of shape [7] with 1 dims")));
  EXPECT_THAT(
      [&] { random_structured(*net, "conv.weight", f(0.5), 4); },
      ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr(
          "Invalid index 4 for tensor of size [6, 4, 3, 3]")));
  EXPECT_THAT(
      [&] {
        global_unstructured(
            {find_parameter(*net, "conv.weight")}, LnStructured(f(0.5), 2, 0));
      },
      ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr(
          "global pruning needs an unstructured method (L1Unstructured, "
          "RandomUnstructured), got LnStructured (structured)")));
  // Nothing was pruned by the failed calls.
  EXPECT_FALSE(is_pruned(*net));
}

TEST(PruningAmount, FractionsRoundHalfToEvenAsPythonsRound) {
  EXPECT_EQ(f(0.25).of(6, ""), 2); // 1.5
  EXPECT_EQ(f(0.75).of(6, ""), 4); // 4.5
  EXPECT_EQ(f(0.5).of(5, ""), 2);  // 2.5
  EXPECT_EQ(f(0.5).of(7, ""), 4);  // 3.5
  EXPECT_EQ(f(0.3).of(70, ""), 21);
  EXPECT_EQ(n(3).of(3, ""), 3);
  EXPECT_TRUE(PruningAmount::parse("5", "k").value() == 5);
  EXPECT_FALSE(PruningAmount::parse("5", "k").is_fraction());
  EXPECT_TRUE(PruningAmount::parse("1.0", "k").is_fraction());
  EXPECT_TRUE(PruningAmount::parse("5e-1", "k").is_fraction());
  EXPECT_EQ(f(0.5).str(), "0.5");
  EXPECT_EQ(f(1).str(), "1.0");
  EXPECT_EQ(n(7).str(), "7");
}

} // namespace
} // namespace hotloop::compress
