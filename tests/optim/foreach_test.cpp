// The multi-tensor optimizers against LibTorch's per-parameter ones: the same
// updates bit for bit on the CPU, and checkpoints that load either way; the
// fused Adam and AdamW steps against the multi-tensor ones (LibTorch 2.4
// and later, whose ATen has the fused CPU kernels).

#include "hotloop/optim/foreach.h"

#include "hotloop/core/compat.h"
#include "hotloop/core/error.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/serialize.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace hotloop::optim {
namespace {

namespace to = torch::optim;

// Tensors of several shapes, one of them a scalar, in two groups.
std::vector<at::Tensor> parameters(uint64_t seed) {
  at::manual_seed(seed);
  std::vector<at::Tensor> out;
  for (const auto& shape :
       std::vector<std::vector<int64_t>>{{4, 3}, {3}, {2, 2, 3}, {}, {5}}) {
    out.push_back(at::randn(shape).set_requires_grad(true));
  }
  return out;
}

// Gives each of `p` a gradient of ones.
void set_unit_gradients(std::vector<at::Tensor>& p) {
  for (at::Tensor& parameter : p) {
    parameter.mutable_grad() = at::ones_like(parameter);
  }
}

std::vector<to::OptimizerParamGroup> groups(
    const std::vector<at::Tensor>& p,
    const to::OptimizerOptions& first,
    const to::OptimizerOptions& second) {
  std::vector<to::OptimizerParamGroup> out;
  out.emplace_back(std::vector<at::Tensor>{p[0], p[1], p[2]}, first.clone());
  out.emplace_back(std::vector<at::Tensor>{p[3], p[4]}, second.clone());
  return out;
}

// The same random gradients for both sets of parameters at `step` (from
// 1); parameter 1 has none in step 2 and parameter 4 none until step 3, so
// steps differ between parameters (and a state is created in the middle of
// a group).
void set_gradients(
    const std::vector<at::Tensor>& mine_params,
    const std::vector<at::Tensor>& their_params,
    int step) {
  for (size_t i = 0; i < mine_params.size(); ++i) {
    const bool none = (i == 1 && step == 2) || (i == 4 && step < 3);
    const at::Tensor grad = at::randn(mine_params[i].sizes());
    for (const auto* params : {&mine_params, &their_params}) {
      at::Tensor p = (*params)[i];
      p.mutable_grad() = none ? at::Tensor() : grad.clone();
    }
  }
}

// Six steps with the same gradients for both (set_gradients).
void expect_same_steps(
    to::Optimizer& mine,
    const std::vector<at::Tensor>& mine_params,
    to::Optimizer& theirs,
    const std::vector<at::Tensor>& their_params) {
  std::vector<at::Tensor> initial;
  for (const at::Tensor& p : mine_params) {
    initial.push_back(p.detach().clone());
  }
  at::manual_seed(7);
  for (int step = 1; step <= 6; ++step) {
    set_gradients(mine_params, their_params, step);
    mine.step();
    theirs.step();
    for (size_t i = 0; i < mine_params.size(); ++i) {
      EXPECT_TRUE(mine_params[i].equal(their_params[i]))
          << "parameter " << i << " after step " << step << ": differs by "
          << (mine_params[i] - their_params[i]).abs().max().item<double>();
    }
  }
  for (size_t i = 0; i < mine_params.size(); ++i) {
    EXPECT_FALSE(mine_params[i].equal(initial[i])) << "parameter " << i;
  }
  // A state for the same parameters (ACheckpointOfEitherLoadsIntoTheOther
  // shows it is the one LibTorch's steps would go on from).
  EXPECT_EQ(mine.state().size(), theirs.state().size());
}

TEST(ForeachOptimizers, SgdStepsAsLibTorchsDoesBitForBit) {
  for (const bool nesterov : {false, true}) {
    auto a = parameters(1);
    auto b = parameters(1);
    const auto first =
        to::SGDOptions(0.1).momentum(0.9).nesterov(nesterov).weight_decay(0.01);
    const auto second = to::SGDOptions(0.05)
                            .momentum(nesterov ? 0.8 : 0.5)
                            .dampening(nesterov ? 0.0 : 0.1);
    ForeachSGD mine(groups(a, first, second), to::SGDOptions(0.1));
    mine.set_foreach(true);
    to::SGD theirs(groups(b, first, second), to::SGDOptions(0.1));
    SCOPED_TRACE(nesterov ? "nesterov" : "plain momentum");
    expect_same_steps(mine, a, theirs, b);
  }
  // No momentum: no state at all.
  auto a = parameters(2);
  auto b = parameters(2);
  ForeachSGD mine(
      groups(a, to::SGDOptions(0.1), to::SGDOptions(0.2).weight_decay(0.1)),
      to::SGDOptions(0.1));
  mine.set_foreach(true);
  to::SGD theirs(
      groups(b, to::SGDOptions(0.1), to::SGDOptions(0.2).weight_decay(0.1)),
      to::SGDOptions(0.1));
  expect_same_steps(mine, a, theirs, b);
}

TEST(ForeachOptimizers, AdamStepsAsLibTorchsDoesBitForBit) {
  for (const bool amsgrad : {false, true}) {
    auto a = parameters(3);
    auto b = parameters(3);
    const auto first = to::AdamOptions(0.01)
                           .betas(std::make_tuple(0.8, 0.99))
                           .eps(1e-7)
                           .weight_decay(0.01)
                           .amsgrad(amsgrad);
    const auto second = to::AdamOptions(0.02).amsgrad(amsgrad);
    ForeachAdam mine(groups(a, first, second), to::AdamOptions(0.01));
    mine.set_foreach(true);
    to::Adam theirs(groups(b, first, second), to::AdamOptions(0.01));
    SCOPED_TRACE(amsgrad ? "amsgrad" : "adam");
    expect_same_steps(mine, a, theirs, b);
  }
}

TEST(ForeachOptimizers, AdamWStepsAsLibTorchsDoesBitForBit) {
  for (const bool amsgrad : {false, true}) {
    auto a = parameters(4);
    auto b = parameters(4);
    const auto first =
        to::AdamWOptions(0.01).weight_decay(0.1).amsgrad(amsgrad);
    const auto second =
        to::AdamWOptions(0.003).weight_decay(0.0).eps(1e-6).amsgrad(amsgrad);
    ForeachAdamW mine(groups(a, first, second), to::AdamWOptions(0.01));
    mine.set_foreach(true);
    to::AdamW theirs(groups(b, first, second), to::AdamWOptions(0.01));
    SCOPED_TRACE(amsgrad ? "amsgrad" : "adamw");
    expect_same_steps(mine, a, theirs, b);
  }
}

TEST(ForeachOptimizers, ACheckpointOfEitherLoadsIntoTheOther) {
  auto a = parameters(5);
  auto b = parameters(5);
  const auto options = to::AdamWOptions(0.01).weight_decay(0.1);
  ForeachAdamW mine(groups(a, options, options), options);
  mine.set_foreach(true);
  to::AdamW theirs(groups(b, options, options), options);
  expect_same_steps(mine, a, theirs, b);
  // LibTorch's state into the multi-tensor optimizer, then one more step
  // each: still the same.
  std::stringstream bytes;
  torch::save(theirs, bytes);
  auto c = parameters(5);
  for (size_t i = 0; i < c.size(); ++i) {
    at::NoGradGuard no_grad;
    c[i].copy_(b[i]);
  }
  ForeachAdamW resumed(groups(c, options, options), options);
  resumed.set_foreach(true);
  torch::load(resumed, bytes);
  for (size_t i = 0; i < c.size(); ++i) {
    const at::Tensor grad = at::full(c[i].sizes(), 0.5);
    c[i].mutable_grad() = grad.clone();
    b[i].mutable_grad() = grad.clone();
  }
  resumed.step();
  theirs.step();
  for (size_t i = 0; i < c.size(); ++i) {
    EXPECT_TRUE(c[i].equal(b[i])) << "parameter " << i;
  }
}

TEST(ForeachOptimizers, TheMultiTensorOpsAreForCudaParametersUnlessChosen) {
  // As PyTorch's default: on a CPU one parameter at a time is faster.
  auto cpu = parameters(6);
  ForeachAdamW adamw(cpu, to::AdamWOptions(0.1));
  EXPECT_FALSE(adamw.foreach ().has_value());
  EXPECT_FALSE(adamw.uses_foreach(adamw.param_groups()));
  adamw.set_foreach(true);
  EXPECT_TRUE(adamw.uses_foreach(adamw.param_groups()));
  adamw.set_foreach(false);
  EXPECT_FALSE(adamw.uses_foreach(adamw.param_groups()));
  if (at::hasCUDA() && at::getNumGPUs() > 0) {
    std::vector<at::Tensor> gpu;
    for (const at::Tensor& p : cpu) {
      gpu.push_back(p.detach().cuda().set_requires_grad(true));
    }
    ForeachSGD sgd(gpu, to::SGDOptions(0.1));
    EXPECT_TRUE(sgd.uses_foreach(sgd.param_groups()));
  }
}

TEST(ForeachOptimizers, SparseGradientsAreRefused) {
  at::Tensor p = at::zeros({3}).set_requires_grad(true);
  p.mutable_grad() = at::zeros({3}).to_sparse();
  ForeachAdamW adamw(std::vector<at::Tensor>{p}, to::AdamWOptions(0.1));
  adamw.set_foreach(true);
  try {
    adamw.step();
    FAIL() << "a sparse gradient was stepped";
  } catch (const c10::Error& error) {
    EXPECT_NE(
        std::string(error.what())
            .find("AdamW does not support sparse gradients"),
        std::string::npos)
        << error.what();
  }
}

// Sets what a schedule changes between steps: the rate and (one-cycle's
// cycle_momentum) SGD's momentum or Adam's beta1.
void schedule_step(to::Optimizer& optimizer, int step) {
  for (auto& group : optimizer.param_groups()) {
    auto& options = group.options();
    options.set_lr(options.get_lr() * (1 + 0.1 * step));
    const double momentum = 0.95 - 0.02 * step;
    if (auto* sgd = dynamic_cast<to::SGDOptions*>(&options)) {
      if (sgd->momentum() != 0) {
        sgd->momentum(momentum);
      }
    } else if (auto* adam = dynamic_cast<to::AdamOptions*>(&options)) {
      adam->betas(std::make_tuple(momentum, std::get<1>(adam->betas())));
    } else if (auto* adamw = dynamic_cast<to::AdamWOptions*>(&options)) {
      adamw->betas(std::make_tuple(momentum, std::get<1>(adamw->betas())));
    }
  }
}

// graph_step against LibTorch's step() over six steps with the same
// gradients (set_gradients), and a rate and a
// momentum that change every step as a schedule's would: equal to float32
// rounding of the scalars, and the scalars' device tensor never
// reallocated.
void expect_graph_steps_match(
    to::Optimizer& mine,
    const std::vector<at::Tensor>& mine_params,
    to::Optimizer& theirs,
    const std::vector<at::Tensor>& their_params,
    double rtol = 1e-6) {
  auto& graph = dynamic_cast<GraphStep&>(mine);
  const void* storage = nullptr;
  at::manual_seed(8);
  for (int step = 1; step <= 6; ++step) {
    schedule_step(mine, step);
    schedule_step(theirs, step);
    set_gradients(mine_params, their_params, step);
    graph.prepare_graph_step();
    graph.graph_step();
    theirs.step();
    if (step >= 3) { // every parameter has its gradient from step 3 on
      if (storage == nullptr) {
        storage = graph.graph_scalars().data_ptr();
      }
      EXPECT_EQ(graph.graph_scalars().data_ptr(), storage) << "step " << step;
    }
    for (size_t i = 0; i < mine_params.size(); ++i) {
      EXPECT_TRUE(at::allclose(mine_params[i], their_params[i], rtol, 1e-7))
          << "parameter " << i << " after step " << step << ": differs by "
          << (mine_params[i] - their_params[i]).abs().max().item<double>();
    }
  }
  EXPECT_EQ(mine.state().size(), theirs.state().size());
}

TEST(GraphStep, SgdMatchesLibTorchsStepWithTheRateOnTheDevice) {
  for (const bool nesterov : {false, true}) {
    auto a = parameters(11);
    auto b = parameters(11);
    const auto first =
        to::SGDOptions(0.1).momentum(0.9).nesterov(nesterov).weight_decay(0.01);
    const auto second = to::SGDOptions(0.05)
                            .momentum(nesterov ? 0.8 : 0.5)
                            .dampening(nesterov ? 0.0 : 0.1);
    ForeachSGD mine(groups(a, first, second), to::SGDOptions(0.1));
    to::SGD theirs(groups(b, first, second), to::SGDOptions(0.1));
    SCOPED_TRACE(nesterov ? "nesterov" : "plain momentum");
    // The graph step multiplies by the device's rate and momentum before
    // adding (multi-tensor kernels): a rounding more per product than
    // LibTorch's add with alpha, a few float32 ulps after six steps.
    expect_graph_steps_match(mine, a, theirs, b, 1e-5);
  }
  auto a = parameters(12);
  auto b = parameters(12);
  const auto plain = to::SGDOptions(0.2).weight_decay(0.1);
  ForeachSGD mine(groups(a, plain, plain), plain);
  to::SGD theirs(groups(b, plain, plain), plain);
  SCOPED_TRACE("no momentum");
  expect_graph_steps_match(mine, a, theirs, b, 1e-5);
}

TEST(GraphStep, AdamAndAdamWMatchLibTorchsStepsWithBiasCorrectionsOnTheDevice) {
  for (const bool amsgrad : {false, true}) {
    SCOPED_TRACE(amsgrad ? "amsgrad" : "plain");
    auto a = parameters(13);
    auto b = parameters(13);
    const auto adam = to::AdamOptions(0.01)
                          .betas(std::make_tuple(0.8, 0.99))
                          .eps(1e-7)
                          .weight_decay(0.01)
                          .amsgrad(amsgrad);
    ForeachAdam mine(groups(a, adam, to::AdamOptions(0.02)), adam);
    to::Adam theirs(groups(b, adam, to::AdamOptions(0.02)), adam);
    expect_graph_steps_match(mine, a, theirs, b);
    // One set of scalars (step size, root correction, beta1, 1 - beta1)
    // per group and step count, not per parameter: each group has two
    // counts (parameter 1 skipped step 2, parameter 4 began at step 3).
    EXPECT_EQ(mine.graph_scalars().numel(), 2 * 2 * 4);

    auto c = parameters(14);
    auto d = parameters(14);
    const auto adamw =
        to::AdamWOptions(0.01).weight_decay(0.1).amsgrad(amsgrad);
    const auto other = to::AdamWOptions(0.003).weight_decay(0.0).eps(1e-6);
    ForeachAdamW mine_w(groups(c, adamw, other), adamw);
    to::AdamW theirs_w(groups(d, adamw, other), adamw);
    expect_graph_steps_match(mine_w, c, theirs_w, d);
    EXPECT_EQ(mine_w.graph_scalars().numel(), 2 * 2 * 5); // and the decay
  }
}

TEST(GraphStep, AStepWithoutItsPreparationIsRefused) {
  auto p = parameters(15);
  ForeachAdamW adamw(p, to::AdamWOptions(0.1));
  set_unit_gradients(p);
  try {
    adamw.graph_step();
    FAIL() << "graph_step ran with no state";
  } catch (const c10::Error& error) {
    EXPECT_NE(
        std::string(error.what()).find("run prepare_graph_step first"),
        std::string::npos)
        << error.what();
  }
}

// ---------------------------------------------------------------------------
// The fused kernels (ATen's _fused_adam_ / _fused_adamw_)

// Why a fused test cannot run with this LibTorch, or empty.
std::string without_fused_cpu_kernels() {
  if (compat::has_fused_adam(c10::DeviceType::CPU)) {
    return "";
  }
  return "LibTorch " + std::to_string(TORCH_VERSION_MAJOR) + "." +
         std::to_string(TORCH_VERSION_MINOR) +
         " has no fused Adam/AdamW CPU kernels (ATen has them from 2.4)";
}

// The largest difference between two sets of parameters.
double max_difference(
    const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double most = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    most = std::max(most, (a[i] - b[i]).abs().max().item<double>());
  }
  return most;
}

// Six steps of `fused` and `multi` with the same gradients (set_gradients):
// within 1e-6 of each other after every one.
void expect_fused_steps_match(
    to::Optimizer& fused,
    const std::vector<at::Tensor>& fused_params,
    to::Optimizer& multi,
    const std::vector<at::Tensor>& multi_params,
    const std::function<void(to::Optimizer&, int)>& step) {
  std::vector<at::Tensor> initial;
  for (const at::Tensor& p : fused_params) {
    initial.push_back(p.detach().clone());
  }
  at::manual_seed(9);
  for (int n = 1; n <= 6; ++n) {
    set_gradients(fused_params, multi_params, n);
    step(fused, n);
    step(multi, n);
    EXPECT_LE(max_difference(fused_params, multi_params), 1e-6)
        << "after step " << n;
  }
  EXPECT_GT(max_difference(fused_params, initial), 1e-3);
  EXPECT_EQ(fused.state().size(), multi.state().size());
}

TEST(FusedOptimizers, AdamAndAdamWStepAsTheMultiTensorStepsDo) {
  const std::string skip = without_fused_cpu_kernels();
  if (!skip.empty()) {
    GTEST_SKIP() << skip;
  }
  const auto plain = [](to::Optimizer& o, int) { o.step(); };
  for (const bool amsgrad : {false, true}) {
    SCOPED_TRACE(amsgrad ? "amsgrad" : "plain");
    auto a = parameters(21);
    auto b = parameters(21);
    const auto adam = to::AdamOptions(0.01)
                          .betas(std::make_tuple(0.8, 0.99))
                          .eps(1e-7)
                          .weight_decay(0.01)
                          .amsgrad(amsgrad);
    const auto adam_other = to::AdamOptions(0.02).amsgrad(amsgrad);
    ForeachAdam fused(groups(a, adam, adam_other), adam);
    fused.set_fused(true);
    ForeachAdam multi(groups(b, adam, adam_other), adam);
    multi.set_foreach(true);
    multi.set_fused(false);
    ASSERT_TRUE(fused.uses_fused(fused.param_groups(), fused.foreach ()));
    ASSERT_FALSE(multi.uses_fused(multi.param_groups(), multi.foreach ()));
    expect_fused_steps_match(fused, a, multi, b, plain);

    auto c = parameters(22);
    auto d = parameters(22);
    const auto adamw =
        to::AdamWOptions(0.01).weight_decay(0.1).amsgrad(amsgrad);
    const auto adamw_other =
        to::AdamWOptions(0.003).weight_decay(0.0).eps(1e-6).amsgrad(amsgrad);
    ForeachAdamW fused_w(groups(c, adamw, adamw_other), adamw);
    fused_w.set_fused(true);
    ForeachAdamW multi_w(groups(d, adamw, adamw_other), adamw);
    multi_w.set_foreach(true);
    expect_fused_steps_match(fused_w, c, multi_w, d, plain);
  }
}

// Changes each group's rate as a schedule would, leaving beta1 alone (a
// captured fused update fixes it; FusedOptimizers.ACapturedFusedStepWhose
// Beta1ChangedIsStale).
void schedule_rate(to::Optimizer& optimizer, int step) {
  for (auto& group : optimizer.param_groups()) {
    group.options().set_lr(group.options().get_lr() * (1 + 0.1 * step));
  }
}

TEST(FusedOptimizers, TheGraphStepReadsTheRateFromATensorAsTheMultiTensorOne) {
  const std::string skip = without_fused_cpu_kernels();
  if (!skip.empty()) {
    GTEST_SKIP() << skip;
  }
  const auto graph = [](to::Optimizer& o, int n) {
    schedule_rate(o, n);
    auto& step = dynamic_cast<GraphStep&>(o);
    step.prepare_graph_step();
    step.graph_step();
  };
  auto a = parameters(23);
  auto b = parameters(23);
  const auto adamw = to::AdamWOptions(0.01).weight_decay(0.1);
  const auto other = to::AdamWOptions(0.003).weight_decay(0.0).eps(1e-6);
  ForeachAdamW fused(groups(a, adamw, other), adamw);
  fused.set_fused(true);
  ForeachAdamW multi(groups(b, adamw, other), adamw);
  expect_fused_steps_match(fused, a, multi, b, graph);
  // One rate per param group in the device tensor the kernel reads.
  EXPECT_EQ(fused.graph_scalars().numel(), 2);
  EXPECT_EQ(fused.graph_step_stale(), "");

  auto c = parameters(24);
  auto d = parameters(24);
  const auto adam = to::AdamOptions(0.01).weight_decay(0.01);
  ForeachAdam fused_adam(groups(c, adam, adam), adam);
  fused_adam.set_fused(true);
  ForeachAdam multi_adam(groups(d, adam, adam), adam);
  expect_fused_steps_match(fused_adam, c, multi_adam, d, graph);
}

TEST(FusedOptimizers, ACapturedFusedStepWhoseBeta1ChangedIsStale) {
  const std::string skip = without_fused_cpu_kernels();
  if (!skip.empty()) {
    GTEST_SKIP() << skip;
  }
  auto p = parameters(25);
  const auto options = to::AdamWOptions(0.01).weight_decay(0.1);
  ForeachAdamW adamw(groups(p, options, options), options);
  adamw.set_fused(true);
  set_unit_gradients(p);
  adamw.prepare_graph_step();
  adamw.graph_step();
  adamw.prepare_graph_step();
  EXPECT_EQ(adamw.graph_step_stale(), "");
  adamw.graph_step();
  auto& changed =
      static_cast<to::AdamWOptions&>(adamw.param_groups()[1].options());
  changed.betas(std::make_tuple(0.85, 0.999));
  adamw.prepare_graph_step();
  EXPECT_EQ(
      adamw.graph_step_stale(),
      "the fused AdamW update fixed its options when it was captured, and "
      "beta1 0.9 -> 0.85 (param group 2) since (a schedule that cycles "
      "momentum, such as onecycle's cycle_momentum): set optimizer.fused=false "
      "to capture the multi-tensor update, which reads beta1 and "
      "weight_decay at every replay");
  // An eager graph step reads the new value: fresh again afterwards.
  adamw.graph_step();
  adamw.prepare_graph_step();
  EXPECT_EQ(adamw.graph_step_stale(), "");
}

TEST(
    ForeachOptimizers, AMultiTensorGraphStepIsStaleWhenAnOptionItFixedChanged) {
  // Adam's multi-tensor graph step reads the rate and beta1 from its device
  // scalars at every replay; beta2, eps and the weight decay it adds to the
  // gradient are numbers in the captured kernels.
  auto p = parameters(26);
  const auto options = to::AdamOptions(0.01).weight_decay(0.1);
  ForeachAdam adam(groups(p, options, options), options);
  adam.set_fused(false);
  set_unit_gradients(p);
  adam.prepare_graph_step();
  adam.graph_step();
  auto& second =
      static_cast<to::AdamOptions&>(adam.param_groups()[1].options());
  second.lr(0.02).betas(std::make_tuple(0.85, 0.999));
  adam.prepare_graph_step();
  EXPECT_EQ(adam.graph_step_stale(), "");
  adam.graph_step();
  second.betas(std::make_tuple(0.85, 0.99));
  adam.prepare_graph_step();
  EXPECT_EQ(
      adam.graph_step_stale(),
      "the multi-tensor Adam update fixed beta2, eps and weight_decay when it "
      "was captured, and beta2 0.999 -> 0.99 (param group 2) since: a "
      "captured step cannot follow that (set trainer.cuda_graphs=false)");
  adam.graph_step();
  second.weight_decay(0.2);
  adam.prepare_graph_step();
  EXPECT_THAT(
      adam.graph_step_stale(),
      ::testing::HasSubstr(
          "and weight_decay 0.1 -> 0.2 (param group 2) since"));

  // AdamW's decay is in the parameters' factor, read at every replay.
  auto q = parameters(27);
  const auto decoupled = to::AdamWOptions(0.01).weight_decay(0.1);
  ForeachAdamW adamw(groups(q, decoupled, decoupled), decoupled);
  adamw.set_fused(false);
  set_unit_gradients(q);
  adamw.prepare_graph_step();
  adamw.graph_step();
  auto& first =
      static_cast<to::AdamWOptions&>(adamw.param_groups()[0].options());
  first.weight_decay(0.2);
  adamw.prepare_graph_step();
  EXPECT_EQ(adamw.graph_step_stale(), "");
  adamw.graph_step();
  first.eps(1e-6);
  adamw.prepare_graph_step();
  EXPECT_EQ(
      adamw.graph_step_stale(),
      "the multi-tensor AdamW update fixed beta2 and eps when it was "
      "captured, and eps 1e-08 -> 1e-06 (param group 1) since: a captured "
      "step cannot follow that (set trainer.cuda_graphs=false)");
}

TEST(ForeachOptimizers, AnSgdGraphStepIsStaleWhenAnOptionItFixedChanged) {
  // The rate and momentum are device scalars (a schedule may change both
  // between replays); dampening, nesterov and the weight decay are not.
  auto p = parameters(28);
  const auto options = to::SGDOptions(0.1).momentum(0.9).weight_decay(0.01);
  ForeachSGD sgd(groups(p, options, options), options);
  set_unit_gradients(p);
  sgd.prepare_graph_step();
  EXPECT_EQ(sgd.graph_step_stale(), "");
  sgd.graph_step();
  auto& second = static_cast<to::SGDOptions&>(sgd.param_groups()[1].options());
  second.lr(0.05).momentum(0.8);
  sgd.prepare_graph_step();
  EXPECT_EQ(sgd.graph_step_stale(), "");
  sgd.graph_step();
  second.nesterov(true).dampening(0);
  sgd.prepare_graph_step();
  EXPECT_EQ(
      sgd.graph_step_stale(),
      "the multi-tensor SGD update fixed dampening, nesterov and weight_decay "
      "when it was captured, and nesterov 0 -> 1 (param group 2) since: a "
      "captured step cannot follow that (set trainer.cuda_graphs=false)");
  // An eager graph step takes the new values: fresh again afterwards.
  sgd.graph_step();
  sgd.prepare_graph_step();
  EXPECT_EQ(sgd.graph_step_stale(), "");
  sgd.graph_step();
  second.weight_decay(0.02);
  sgd.prepare_graph_step();
  EXPECT_THAT(
      sgd.graph_step_stale(),
      ::testing::HasSubstr("weight_decay 0.01 -> 0.02 (param group 2)"));
}

TEST(FusedOptimizers, ACheckpointResumesTheStepCounts) {
  const std::string skip = without_fused_cpu_kernels();
  if (!skip.empty()) {
    GTEST_SKIP() << skip;
  }
  // Three fused steps, a checkpoint loaded into a fresh fused optimizer,
  // then three more each: the counts the kernels read follow LibTorch's
  // state, so the resumed run equals the uninterrupted one.
  auto a = parameters(26);
  auto b = parameters(26);
  const auto options = to::AdamWOptions(0.01).weight_decay(0.1);
  ForeachAdamW fused(groups(a, options, options), options);
  fused.set_fused(true);
  ForeachAdamW multi(groups(b, options, options), options);
  multi.set_foreach(true);
  at::manual_seed(10);
  for (int n = 1; n <= 3; ++n) {
    set_gradients(a, b, n);
    fused.step();
    multi.step();
  }
  std::stringstream bytes;
  torch::save(fused, bytes);
  auto c = parameters(26);
  for (size_t i = 0; i < c.size(); ++i) {
    at::NoGradGuard no_grad;
    c[i].copy_(a[i]);
  }
  ForeachAdamW resumed(groups(c, options, options), options);
  resumed.set_fused(true);
  torch::load(resumed, bytes);
  for (int n = 4; n <= 6; ++n) {
    set_gradients(c, b, n);
    for (size_t i = 0; i < a.size(); ++i) {
      a[i].mutable_grad() = c[i].grad().clone();
    }
    resumed.step();
    fused.step();
    multi.step();
    EXPECT_LE(max_difference(c, a), 0) << "resumed, step " << n;
    EXPECT_LE(max_difference(c, b), 1e-6) << "multi-tensor, step " << n;
  }
}

TEST(FusedOptimizers, AutomaticallyOnlyForCudaParameters) {
  auto cpu = parameters(27);
  ForeachAdamW adamw(cpu, to::AdamWOptions(0.1));
  EXPECT_FALSE(adamw.fused().has_value());
  EXPECT_FALSE(adamw.uses_fused(adamw.param_groups(), std::nullopt));
  adamw.set_fused(false);
  EXPECT_FALSE(adamw.uses_fused(adamw.param_groups(), true));
  if (at::hasCUDA() && at::getNumGPUs() > 0) {
    std::vector<at::Tensor> gpu;
    for (const at::Tensor& p : cpu) {
      gpu.push_back(p.detach().cuda().set_requires_grad(true));
    }
    ForeachAdamW on_gpu(gpu, to::AdamWOptions(0.1));
    EXPECT_EQ(
        on_gpu.uses_fused(on_gpu.param_groups(), std::nullopt),
        compat::has_fused_adam(c10::DeviceType::CUDA));
    // optimizer.foreach=false keeps LibTorch's loop unless fused is chosen.
    EXPECT_FALSE(on_gpu.uses_fused(on_gpu.param_groups(), false));
  }
}

TEST(FusedOptimizers, ChosenWhereLibTorchHasNoKernelsIsAConfigError) {
  // No LibTorch has fused kernels for the meta device.
  const at::Tensor p = at::zeros({3}, at::TensorOptions().device(c10::kMeta))
                           .set_requires_grad(true);
  ForeachAdam adam(std::vector<at::Tensor>{p}, to::AdamOptions(0.1));
  adam.set_fused(true);
  try {
    adam.uses_fused(adam.param_groups(), std::nullopt);
    FAIL() << "fused=true accepted meta parameters";
  } catch (const ConfigError& error) {
    EXPECT_EQ(
        std::string(error.what()),
        "optimizer.fused=true: LibTorch " +
            std::to_string(TORCH_VERSION_MAJOR) + "." +
            std::to_string(TORCH_VERSION_MINOR) +
            " has no fused Adam/AdamW kernels for meta parameters (CUDA from "
            "LibTorch 2.1, the CPU from 2.4); use optimizer.fused=auto or "
            "false");
  }
}

} // namespace
} // namespace hotloop::optim
