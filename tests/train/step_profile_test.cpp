#include "hotloop/train/step_profile.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>

namespace hotloop::train {
namespace {

using ::testing::HasSubstr;

StepProfile profile(
    double data,
    double h2d,
    double forward,
    double backward,
    double optimizer,
    double logging) {
  StepProfile p;
  p.data = data;
  p.h2d = h2d;
  p.forward = forward;
  p.backward = backward;
  p.optimizer = optimizer;
  p.logging = logging;
  p.samples = 1000;
  p.steps = 10;
  return p;
}

TEST(StepProfile, VerdictNamesTheBottleneckAndTheOptionToChange) {
  ProfileContext context;
  context.num_workers = 1;
  context.log_every_n_steps = 50;
  EXPECT_EQ(
      profile(63, 0, 20, 15, 2, 0).verdict(context),
      "input-bound: 63% of step time waiting for data - raise "
      "data.num_workers (now 1) or data.prefetch_factor");
  EXPECT_EQ(
      profile(0, 20, 40, 40, 0, 0).verdict(context),
      "conversion-bound: 20% of step time converting batches (dtype, memory "
      "format) - produce them in the training dtype and layout in the "
      "dataset");
  EXPECT_EQ(
      profile(0, 0, 30, 30, 40, 0).verdict(context),
      "optimizer-bound: 40% of step time in the optimizer step - raise "
      "data.batch_size or trainer.accumulate_grad_batches");
  EXPECT_EQ(
      profile(0, 0, 40, 40, 5, 15).verdict(context),
      "logging-bound: 15% of step time in callbacks and logging - raise "
      "trainer.log_every_n_steps (now 50)");
  EXPECT_EQ(
      profile(1, 0, 45, 50, 4, 0).verdict(context),
      "compute-bound: forward+backward take 95% of step time - a smaller "
      "model, trainer.num_threads, or a GPU");
  context.cuda = true;
  EXPECT_EQ(
      profile(0, 20, 40, 40, 0, 0).verdict(context),
      "transfer-bound: 20% of step time copying batches to the device - set "
      "data.pin_memory=true");
  // Compute-bound advice names only what is not on yet, and channels_last
  // only for a model with convolutions.
  EXPECT_EQ(
      profile(1, 0, 45, 50, 4, 0).verdict(context),
      "compute-bound: forward+backward take 95% of step time - try "
      "trainer.precision=bf16-mixed");
  context.convolutional = true;
  EXPECT_THAT(
      profile(1, 0, 45, 50, 4, 0).verdict(context),
      HasSubstr("try trainer.precision=bf16-mixed and "
                "trainer.channels_last=true"));
  context.precision = "bf16-mixed";
  EXPECT_THAT(
      profile(1, 0, 45, 50, 4, 0).verdict(context),
      HasSubstr("- try trainer.channels_last=true"));
  context.channels_last = true;
  EXPECT_THAT(
      profile(1, 0, 45, 50, 4, 0).verdict(context),
      HasSubstr("- raise data.batch_size, or a smaller model"));
  EXPECT_EQ(StepProfile().verdict(context), "no training steps were timed");
}

TEST(StepProfile, NoAdviceToRaiseTheBatchWhenOneBatchHoldsTheWholeSet) {
  // A 135-row table at data.batch_size=256 cannot take a larger batch.
  ProfileContext context;
  context.batch_can_grow = false;
  EXPECT_EQ(
      profile(0, 0, 30, 30, 40, 0).verdict(context),
      "optimizer-bound: 40% of step time in the optimizer step - raise "
      "trainer.accumulate_grad_batches");
  context.cuda = true;
  context.precision = "bf16-mixed";
  context.channels_last = true;
  EXPECT_THAT(
      profile(1, 0, 45, 50, 4, 0).verdict(context),
      HasSubstr("- a smaller model"));
  EXPECT_THAT(
      profile(1, 0, 45, 50, 4, 0).verdict(context),
      ::testing::Not(HasSubstr("batch_size")));
}

// A GPU busy at a small share of its peak waits for the host to launch
// its kernels: capture the step. 1000 samples of 1 MFLOP in 100 s of steps
// is 10 MFLOP/s.
TEST(StepProfile, ASmallShareOfTheGpusPeakIsLaunchBound) {
  ProfileContext context;
  context.cuda = true;
  context.precision = "bf16-mixed";
  context.channels_last = true;
  StepProfile p = profile(1, 0, 45, 50, 4, 0);
  p.flops_per_sample = 1e6;
  p.peak_flops = 2e9; // 0.5% of it
  EXPECT_EQ(
      p.verdict(context),
      "launch-bound: forward+backward take 95% of step time at 0.50% MFU "
      "(training FLOPs per sample x the steady rate / 2.00 GFLOP/s, "
      "measured) - its kernels are too small to keep the device busy and wait "
      "for the host to launch them: try trainer.cuda_graphs=true, or raise "
      "data.batch_size");
  p.peak_flops = 5e7; // 20%: compute-bound
  EXPECT_THAT(p.verdict(context), HasSubstr("compute-bound: "));
  p.peak_flops = 2e9;
  context.cuda_graphs = true; // already captured
  EXPECT_THAT(
      p.verdict(context),
      HasSubstr("compute-bound: forward+backward take 95% of step time at "
                "0.50% MFU (training FLOPs per sample x the steady rate / "
                "2.00 GFLOP/s, measured) - raise data.batch_size, or a "
                "smaller model"));
  context.cuda = false; // a CPU has no launches to save
  context.cuda_graphs = false;
  EXPECT_THAT(p.verdict(context), HasSubstr("compute-bound: "));
}

TEST(StepProfile, SeveralProcessesShowTheWaitForGradientsAsItsOwnPhase) {
  ProfileContext context;
  StepProfile p = profile(2, 0, 30, 30, 3, 0);
  p.comm = 35;
  EXPECT_EQ(p.phases().count("comm"), 0u); // one process: no such phase
  p.data_parallel = true;
  EXPECT_DOUBLE_EQ(p.phases().at("comm"), 35);
  EXPECT_DOUBLE_EQ(p.step_seconds(), 100);
  EXPECT_EQ(
      p.verdict(context),
      "communication-bound: 35% of step time waiting for the other "
      "processes' gradients - larger batches per process (data.batch_size), "
      "trainer.accumulate_grad_batches, or fewer processes");
  std::ostringstream out;
  p.print(out, context);
  EXPECT_THAT(
      out.str(),
      HasSubstr("step time data 2% h2d 0% forward 30% backward 30% comm 35% "
                "optimizer 3% logging 0%"));
}

TEST(StepProfile, RatesComeFromStepTimeOnly) {
  StepProfile p = profile(1, 0, 2, 2, 0, 0);
  p.validation = 100; // not step time
  p.flops_per_sample = 3e6;
  EXPECT_DOUBLE_EQ(p.step_seconds(), 5);
  EXPECT_DOUBLE_EQ(p.samples_per_s(), 200);
  EXPECT_DOUBLE_EQ(p.flops_per_s(), 6e8);
  std::ostringstream out;
  p.print(out, ProfileContext{});
  EXPECT_THAT(
      out.str(),
      HasSubstr("profile: 10 steps, 200 samples/s; step time data 20% h2d 0% "
                "forward 40% backward 40% optimizer 0% logging 0%; "
                "validation 100.0 s; 0.60 GFLOP/s achieved"));
}

TEST(StepProfile, TheSetUpAndTheFirstStepShowTheirLargestParts) {
  StepProfile p = profile(1, 0, 2, 2, 0, 0);
  p.setup = 2.42;
  p.setup_parts = {
      {"callbacks", 0.10},
      {"strategy", 0.01},
      {"sanity_check", 1.90},
      {"model_summary", 0.41}};
  p.first_step = {{"forward", 2.22}, {"logging", 0.16}, {"data", 0.01}};
  std::ostringstream out;
  p.print(out, ProfileContext{});
  EXPECT_THAT(
      out.str(),
      HasSubstr("; set-up 2.42 s (sanity check 1.90 s, model summary 0.41 s, "
                "callbacks 0.10 s); the first step 2.39 s (forward 2.22 s, "
                "logging 0.16 s, data 0.01 s)"));
}

TEST(StepProfile, OnAnAsynchronousDeviceSharesComeFromTheSyncedSteps) {
  // Host times say the optimizer took the time (where the host waited);
  // the synced steps say forward and backward did.
  StepProfile p = profile(0, 0, 1, 1, 8, 0);
  p.synced = {
      {"data", 0},
      {"h2d", 0},
      {"forward", 0.4},
      {"backward", 0.5},
      {"optimizer", 0.1},
      {"logging", 0}};
  p.synced_steps = 2;
  ProfileContext context;
  context.cuda = true;
  EXPECT_THAT(p.verdict(context), HasSubstr("optimizer-bound: 80%"));
  p.asynchronous = true;
  EXPECT_THAT(
      p.verdict(context),
      HasSubstr("compute-bound: forward+backward take 90%"));
  std::ostringstream out;
  p.print(out, context);
  EXPECT_THAT(
      out.str(),
      HasSubstr("forward 40% backward 50% optimizer 10% logging 0% (from 2 "
                "steps timed with the device synchronised)"));
  // Rates still come from every step's time.
  EXPECT_DOUBLE_EQ(p.samples_per_s(), 100);
}

TEST(StepProfile, SteadyRateLeavesTheWarmupStepsOut) {
  StepProfile p = profile(1, 0, 4, 4, 1, 0);       // 10 s, 1000 samples
  EXPECT_DOUBLE_EQ(p.steady_samples_per_s(), 100); // no warm-up recorded
  p.warmup_seconds = 6;
  p.warmup_samples = 200;
  EXPECT_DOUBLE_EQ(p.steady_samples_per_s(), 200); // 800 samples in 4 s
  EXPECT_DOUBLE_EQ(p.samples_per_s(), 100);
}

TEST(StepProfile, UtilizationIsAchievedOverTheMeasuredPeak) {
  StepProfile p = profile(0, 0, 1, 1, 0, 0);
  p.flops_per_sample = 1e6; // 500 samples/s -> 5e8 FLOP/s
  EXPECT_DOUBLE_EQ(p.utilization(), 0);
  EXPECT_EQ(p.utilization_text(), "");
  p.peak_flops = 2e9;
  p.peak_source = "measured";
  EXPECT_DOUBLE_EQ(p.utilization(), 0.25);
  std::ostringstream out;
  p.print(out, ProfileContext{});
  EXPECT_THAT(
      out.str(),
      HasSubstr("0.50 GFLOP/s achieved at the steady rate, 25.0% MFU "
                "(training FLOPs per sample x the steady rate / 2.00 "
                "GFLOP/s, measured)"));
  p.peak_flops = 2e8;
  std::ostringstream over;
  p.print(over, ProfileContext{});
  EXPECT_THAT(
      over.str(),
      HasSubstr("250.0% MFU (training FLOPs per sample x the steady rate / "
                "0.20 GFLOP/s, measured) - over 100%: the kernels do fewer "
                "operations than the nominal count, as Winograd convolutions "
                "do"));
}

// bench/run's MFU column: the training FLOPs per token x the steady
// tokens/s (after the warm-up steps) / the GPU's dense bf16 peak from its
// table, which it passes as trainer.peak_tflops. The verdict reads that
// same figure and says where the peak came from (issue 29: a verdict at
// 9.4% "of the device's matmul peak" beside a 28% MFU column had divided
// the whole run's rate, warm-up included, by a measured peak).
TEST(StepProfile, TheVerdictReadsTheMfuColumnsFigure) {
  StepProfile p = profile(0, 0, 45, 50, 5, 0); // 100 s, 1000 samples
  p.asynchronous = true;
  p.warmup_seconds = 60; // the first steps' 200 samples: 20 samples/s
  p.warmup_samples = 200;
  const double tokens = 1024;
  const double flops_per_token = 855383040; // GPT-2 124M, vocab 50304
  p.flops_per_sample = flops_per_token * tokens;
  p.peak_flops = 989.4e12;
  p.peak_source = "trainer.peak_tflops";
  // 800 samples in 40 s: 20 samples/s steady, 10 over the whole run.
  EXPECT_DOUBLE_EQ(p.steady_samples_per_s(), 20);
  const double mfu = 20 * tokens * flops_per_token / 989.4e12;
  EXPECT_DOUBLE_EQ(p.utilization(), mfu);
  EXPECT_EQ(
      p.utilization_text(),
      "1.8% MFU (training FLOPs per sample x the steady rate / 989.4 "
      "TFLOP/s, trainer.peak_tflops)");
  ProfileContext context;
  context.cuda = true;
  context.precision = "bf16-mixed";
  context.channels_last = true;
  EXPECT_EQ(
      p.verdict(context),
      "launch-bound: forward+backward take 95% of step time at 1.8% MFU "
      "(training FLOPs per sample x the steady rate / 989.4 TFLOP/s, "
      "trainer.peak_tflops) - its kernels are too small to keep the device "
      "busy and wait for the host to launch them: try "
      "trainer.cuda_graphs=true, or raise data.batch_size");
  // At bench/run's 28% the verdict is compute-bound and says so.
  p.peak_flops = 20 * tokens * flops_per_token / 0.28;
  EXPECT_EQ(
      p.verdict(context),
      "compute-bound: forward+backward take 95% of step time at 28.0% MFU "
      "(training FLOPs per sample x the steady rate / 62.6 TFLOP/s, "
      "trainer.peak_tflops) - raise data.batch_size, or a smaller model");
}

TEST(StepProfile, MeasuredPeakIsPositiveAndLeavesTheRngAlone) {
  at::manual_seed(3);
  const at::Tensor expected = at::rand({4});
  at::manual_seed(3);
  const double peak = measure_peak_flops(c10::Device(c10::kCPU), at::kFloat);
  EXPECT_TRUE(at::rand({4}).equal(expected));
  // Even one slow core multiplies floats faster than 100 MFLOP/s.
  EXPECT_GT(peak, 1e8);
}

} // namespace
} // namespace hotloop::train
