// trainer.cuda_graphs: the graph-safe step's arithmetic against a plain
// LibTorch loop (on the CPU, where it runs eagerly), the options it refuses,
// and on a GPU the captured fit against the eager one.

#include "hotloop/train/detail/graphed_step.h"
#include "hotloop/core/compat.h"
#include "hotloop/core/error.h"
#include "hotloop/optim/clip_grad.h"
#include "hotloop/train/precision.h"
#include "trainer_fixture.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>

namespace hotloop::train {
namespace {

using ::testing::HasSubstr;

void expect_same_tensors(
    const std::vector<at::Tensor>& a,
    const std::vector<at::Tensor>& b,
    double rtol,
    double atol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const at::Tensor x = a[i].detach().cpu().to(at::kDouble);
    const at::Tensor y = b[i].detach().cpu().to(at::kDouble);
    EXPECT_TRUE(at::allclose(x, y, rtol, atol))
        << "tensor " << i << " differs by "
        << (x - y).abs().max().item<double>();
  }
}

// Two epochs of batches 32, 32, 16 with Adam, a rate halved every 5 steps
// and norm clipping: the step GraphedStep captures on a GPU, run eagerly,
// against zero_grad / autocast{training_step} / backward / clip / LibTorch's
// step, in float32 and under bfloat16 autocast.
TEST(GraphedStep, ItsStepIsTheEagerLoopsArithmetic) {
  for (const PrecisionMode mode :
       {PrecisionMode::k32True, PrecisionMode::kBf16Mixed}) {
    SCOPED_TRACE(to_string(mode));
    auto graphed = make_module(0);
    auto plain = make_module(0);
    FitPlan plan;
    plan.total_steps = 6;
    plan.steps_per_epoch = 3;
    plan.max_epochs = 2;
    const OptimizerSetup graphed_setup = graphed->configure_optimizers(plan);
    const OptimizerSetup plain_setup = plain->configure_optimizers(plan);
    const Precision precision(mode, at::kCPU);
    constexpr double kMaxNorm = 0.5;
    int clips = 0;
    detail::GraphedStep step(*graphed, graphed_setup, precision, [&] {
      optim::clip_grad_norm_(graphed->parameters(), kMaxNorm);
      ++clips;
    });

    data::DataLoader loader(quadrants(80, 1), data::DataLoaderOptions(32));
    MetricCollection graphed_metrics;
    MetricCollection plain_metrics;
    graphed->train();
    plain->train();
    int64_t batches = 0;
    for (int epoch = 0; epoch < 2; ++epoch) {
      int64_t batch_idx = 0;
      for (auto it = loader.begin(); it != loader.end(); ++it, ++batch_idx) {
        const data::Batch& batch = *it;
        const at::Tensor loss = step.run(batch, batch_idx, graphed_metrics);

        for (const auto& optimizer : plain_setup.optimizers) {
          compat::zero_grad_set_to_none(*optimizer);
        }
        at::Tensor expected;
        {
          const AutocastGuard autocast = precision.autocast();
          expected = plain->training_step(batch, batch_idx, plain_metrics);
        }
        expected.backward();
        optim::clip_grad_norm_(plain->parameters(), kMaxNorm);
        for (const auto& optimizer : plain_setup.optimizers) {
          optimizer->step();
        }
        for (const auto* setup : {&graphed_setup, &plain_setup}) {
          for (const auto& schedule : setup->schedules) {
            schedule.scheduler->step();
          }
        }
        EXPECT_FALSE(loss.requires_grad());
        EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 1e-5)
            << "batch " << batch_idx << " of epoch " << epoch;
        ++batches;
      }
    }
    EXPECT_EQ(batches, 6);
    EXPECT_EQ(clips, 6);
    EXPECT_FALSE(step.captured()); // a CPU never captures
    expect_same_tensors(graphed->parameters(), plain->parameters(), 1e-5, 1e-6);
    expect_same_tensors(graphed->buffers(), plain->buffers(), 1e-5, 1e-6);
    EXPECT_NEAR(
        graphed_metrics.get("train_loss"),
        plain_metrics.get("train_loss"),
        1e-6);
    // The gradients stay allocated: a captured step writes into them.
    for (const at::Tensor& p : graphed->parameters()) {
      EXPECT_TRUE(p.grad().defined());
    }
  }
}

TEST(GraphedStep, AnOptimizerWithoutAGraphStepIsNamed) {
  optim::OptimizerOptions optimizer;
  optimizer.name = "rmsprop";
  optimizer.lr = 1e-3;
  ImageClassifier module(
      torch::nn::AnyModule(models::FashionCnn(small_model())),
      optimizer,
      optim::SchedulerOptions());
  FitPlan plan;
  plan.total_steps = 1;
  const OptimizerSetup setup = module.configure_optimizers(plan);
  const Precision precision(PrecisionMode::k32True, at::kCPU);
  EXPECT_THAT(
      [&] { detail::GraphedStep(module, setup, precision, [] {}); },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr(
          "trainer.cuda_graphs=true: optimizer 1 of 1 (torch::optim::RMSprop) "
          "has no step a CUDA graph can replay; hotloop's SGD, Adam and AdamW "
          "(optimizer.name sgd, adam, adamw) have one")));
}

TEST_F(TrainerTest, CudaGraphsRefuseWhatACapturedStepCannotHold) {
  auto fit = [&](TrainerOptions options) {
    return [this, options] {
      auto train = train_loader();
      auto module = make_module(0);
      TrainerOptions graphed = options;
      Trainer(graphed.max_epochs(1).cuda_graphs(true))
          .fit(*module, train, &val_loader_);
    };
  };
  EXPECT_THAT(
      fit(options()),
      ::testing::ThrowsMessage<ConfigError>(HasSubstr(
          "trainer.cuda_graphs=true needs a CUDA device; this fit runs on "
          "cpu")));
  EXPECT_THAT(
      fit(options().accumulate_grad_batches(2)),
      ::testing::ThrowsMessage<ConfigError>(HasSubstr(
          "trainer.cuda_graphs=true captures whole optimizer steps: set "
          "trainer.accumulate_grad_batches=1 (got 2)")));
  EXPECT_THAT(
      fit(options().on_nonfinite_loss("skip_step")),
      ::testing::ThrowsMessage<ConfigError>(HasSubstr(
          "trainer.cuda_graphs=true with trainer.on_nonfinite_loss=skip_step: "
          "a replayed step cannot be skipped; use stop or ignore")));
}

// On a GPU: the fit captured after the warm-up (and eager for each epoch's
// last, smaller batch) trains as the eager fit does, with norm clipping
// inside the graph, in float32 and in bf16-mixed.
TEST_F(TrainerTest, CudaGraphsTrainAsTheEagerStepOnTheGpu) {
  if (!at::hasCUDA() || at::getNumGPUs() == 0) {
    GTEST_SKIP() << "needs a CUDA build of LibTorch and a GPU";
  }
  for (const char* precision : {"32-true", "bf16-mixed"}) {
    SCOPED_TRACE(precision);
    auto train = [&] {
      return data::DataLoader(
          train_set_, data::DataLoaderOptions(48).shuffle(true).seed(3));
    };
    auto cuda = [&] {
      return options()
          .max_epochs(2)
          .accelerator("cuda")
          .precision(precision)
          .gradient_clip_val(1.0)
          .enable_progress_bar(true);
    };
    std::ostringstream eager_out;
    auto eager = make_module(0);
    auto eager_train = train();
    const FitResult eager_fit =
        Trainer(cuda(), eager_out).fit(*eager, eager_train, &val_loader_);
    std::ostringstream graphed_out;
    auto graphed = make_module(0);
    auto graphed_train = train();
    const FitResult graphed_fit =
        Trainer(cuda().cuda_graphs(true), graphed_out)
            .fit(*graphed, graphed_train, &val_loader_);
    EXPECT_EQ(graphed_fit.steps, 12); // 5 of 48 and one of 16, twice
    EXPECT_THAT(
        graphed_out.str(),
        HasSubstr("trainer.cuda_graphs: the training step is captured at "
                  "step 4 and replayed for batches of shape [48, 1, 12, 12]"));
    EXPECT_THAT(eager_out.str(), ::testing::Not(HasSubstr("captured")));
    const double tolerance = std::string(precision) == "32-true" ? 1e-4 : 2e-2;
    expect_same_tensors(
        graphed->parameters(), eager->parameters(), tolerance, tolerance);
    EXPECT_NEAR(
        graphed_fit.metrics.at("train_loss"),
        eager_fit.metrics.at("train_loss"),
        tolerance);
    EXPECT_NEAR(
        graphed_fit.metrics.at("val_acc"),
        eager_fit.metrics.at("val_acc"),
        0.05);
  }
}

} // namespace
} // namespace hotloop::train
