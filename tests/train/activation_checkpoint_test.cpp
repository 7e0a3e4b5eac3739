#include "hotloop/train/activation_checkpoint.h"

#include "hotloop/models/gpt.h"
#include "hotloop/models/resnet.h"
#include "hotloop/train/precision.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/utils.h>

#include <vector>

namespace hotloop::train {
namespace {

// Every parameter's gradient after one backward of `loss(model)`, with
// the generator seeded first.
template <typename Model, typename Loss>
std::vector<at::Tensor> gradients(Model& model, const Loss& loss) {
  model->zero_grad();
  torch::manual_seed(7);
  loss(model).backward();
  std::vector<at::Tensor> grads;
  for (const auto& p : model->parameters()) {
    grads.push_back(p.grad().clone());
  }
  return grads;
}

void expect_equal(
    const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(a[i].equal(b[i])) << "gradient " << i << ":\n" << a[i] << "\n" << b[i];
  }
}

TEST(ActivationCheckpoint, AGptWithDropoutGetsTheSameGradientsBitForBit) {
  torch::manual_seed(0);
  models::Gpt model(models::GptOptions::tiny().dropout(0.2));
  model->train();
  const at::Tensor idx = at::randint(0, 64, {4, 16});
  const auto loss = [&](models::Gpt& m) {
    const at::Tensor logits = m->forward(idx);
    return models::gpt_loss(logits.narrow(1, 0, 15), idx.narrow(1, 1, 15));
  };
  const auto plain = gradients(model, loss);
  // The same parameters, recomputed blocks: dropout masks drawn again from
  // the state the first run saw.
  models::Gpt checked(models::GptOptions::tiny().dropout(0.2).activation_checkpointing(true));
  {
    torch::NoGradGuard no_grad;
    const auto from = model->parameters();
    const auto to = checked->parameters();
    for (size_t i = 0; i < from.size(); ++i) {
      to[i].copy_(from[i]);
    }
  }
  checked->train();
  expect_equal(gradients(checked, loss), plain);
  // The generator goes on as without checkpointing.
  torch::manual_seed(7);
  loss(model).backward();
  const at::Tensor after_plain = at::rand({3});
  torch::manual_seed(7);
  loss(checked).backward();
  EXPECT_TRUE(at::rand({3}).equal(after_plain));
}

TEST(ActivationCheckpoint, InputGradientsAndAutocastAreThoseOfTheUncheckedSegment) {
  torch::manual_seed(1);
  torch::nn::Linear first(8, 16), second(16, 4);
  const auto segment = [&](const at::Tensor& x) {
    return second->forward(first->forward(x).relu());
  };
  for (const bool bf16 : {false, true}) {
    const at::Tensor x0 = at::randn({5, 8});
    at::Tensor a = x0.clone().requires_grad_(true);
    at::Tensor b = x0.clone().requires_grad_(true);
    std::vector<at::Tensor> plain, checked;
    {
      AutocastGuard autocast(c10::DeviceType::CPU, at::kBFloat16, bf16);
      const at::Tensor out = segment(a);
      EXPECT_EQ(out.scalar_type(), bf16 ? at::kBFloat16 : at::kFloat);
      out.to(at::kFloat).pow(2).sum().backward();
    }
    plain = {a.grad(), first->weight.grad().clone(), second->bias.grad().clone()};
    first->zero_grad();
    second->zero_grad();
    {
      AutocastGuard autocast(c10::DeviceType::CPU, at::kBFloat16, bf16);
      const at::Tensor out = checkpoint(segment, b);
      EXPECT_EQ(out.scalar_type(), bf16 ? at::kBFloat16 : at::kFloat);
      // Backward inside the autocast region, as users write it: the re-run
      // must not take the casts the first run made without grad.
      out.to(at::kFloat).pow(2).sum().backward();
    }
    checked = {b.grad(), first->weight.grad().clone(), second->bias.grad().clone()};
    first->zero_grad();
    second->zero_grad();
    expect_equal(checked, plain);
  }
}

TEST(ActivationCheckpoint, WithoutGradItIsThePlainSegment) {
  torch::nn::Linear layer(3, 2);
  const at::Tensor x = at::randn({2, 3});
  torch::NoGradGuard no_grad;
  const at::Tensor y =
      checkpoint([&](const at::Tensor& in) { return layer->forward(in); }, x);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(y.equal(layer->forward(x)));
}

TEST(ActivationCheckpoint, AResNetsRunningStatisticsAreUpdatedOnce) {
  torch::manual_seed(3);
  const auto options = models::ResNetOptions(18).num_classes(4).in_channels(1).stem("cifar");
  models::ResNet plain(options);
  models::ResNet checked(models::ResNetOptions(options).activation_checkpointing(true));
  {
    torch::NoGradGuard no_grad;
    const auto from = plain->parameters();
    const auto to = checked->parameters();
    for (size_t i = 0; i < from.size(); ++i) {
      to[i].copy_(from[i]);
    }
  }
  const at::Tensor x = at::randn({2, 1, 8, 8});
  const auto loss = [&](models::ResNet& m) { return m->forward(x).pow(2).mean(); };
  expect_equal(gradients(checked, loss), gradients(plain, loss));
  const auto a = plain->buffers();
  const auto b = checked->buffers();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(a[i].equal(b[i])) << "buffer " << i; // num_batches_tracked 1
  }
}

} // namespace
} // namespace hotloop::train
