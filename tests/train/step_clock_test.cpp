#include "hotloop/train/detail/step_clock.h"

#include "hotloop/core/process_clock.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace hotloop::train::detail {
namespace {

constexpr double kNap = 0.02;

void nap() {
  std::this_thread::sleep_for(std::chrono::duration<double>(kNap));
}

TEST(StepClock, EachPhaseGetsTheTimeUntilTheNextOneBegins) {
  StepProfile profile;
  StepClock clock(profile, c10::kCPU, /*start_step=*/0);
  clock.start_epoch();
  nap(); // waiting for the batch
  clock.start_step(0);
  clock.begin(Phase::kH2D);
  clock.begin(Phase::kForward);
  nap();
  clock.begin(Phase::kBackward);
  nap();
  nap();
  clock.begin(Phase::kOptimizer);
  clock.begin(Phase::kLogging);
  clock.end_batch(/*samples=*/8, /*stepped=*/true, /*global_step=*/1);
  EXPECT_GE(profile.data, kNap);
  EXPECT_GE(profile.forward, kNap);
  EXPECT_LT(profile.forward, 2 * kNap + 0.015);
  EXPECT_GE(profile.backward, 2 * kNap);
  EXPECT_LT(profile.h2d + profile.optimizer + profile.logging, kNap);
  EXPECT_EQ(profile.samples, 8);
  EXPECT_EQ(profile.steps, 1);
  EXPECT_EQ(clock.epoch_samples(), 8);
  // The bar's split: compute is h2d + forward + backward.
  const log::StepTimes& epoch = clock.epoch_times();
  EXPECT_DOUBLE_EQ(epoch.data, profile.data);
  EXPECT_DOUBLE_EQ(
      epoch.compute, profile.h2d + profile.forward + profile.backward);
  EXPECT_DOUBLE_EQ(epoch.optimizer, profile.optimizer + profile.logging);
}

TEST(StepClock, AScopeTimesItsPhaseAndReturnsToTheOneBefore) {
  StepProfile profile;
  StepClock clock(profile, c10::kCPU, 0);
  clock.start_epoch();
  clock.start_step(0);
  clock.begin(Phase::kForward);
  {
    const auto hooks = clock.time(Phase::kLogging);
    nap();
  }
  nap();
  {
    const auto validation = clock.time(Phase::kValidation);
    nap();
    nap();
  }
  clock.end_batch(4, /*stepped=*/false, 0);
  EXPECT_GE(profile.logging, kNap);
  EXPECT_LT(profile.logging, 2 * kNap);
  EXPECT_GE(profile.forward, kNap);
  EXPECT_LT(profile.forward, 2 * kNap);
  // Validation is kept apart from the step time.
  EXPECT_GE(profile.validation, 2 * kNap);
  EXPECT_LT(profile.step_seconds(), 3 * kNap);
  EXPECT_EQ(profile.steps, 0); // a micro-batch that did not step
}

TEST(StepClock, TheMiddleStepOfEachIntervalIsTimedSynced) {
  StepProfile profile;
  StepClock clock(profile, c10::kCPU, 0);
  clock.start_epoch();
  for (int64_t step = 0; step < 2 * kSyncedStepInterval; ++step) {
    clock.start_step(step);
    clock.begin(Phase::kForward);
    if (step == kSyncedStepInterval / 2) {
      nap();
    }
    clock.end_batch(1, /*stepped=*/true, step + 1);
  }
  EXPECT_EQ(profile.steps, 2 * kSyncedStepInterval);
  EXPECT_EQ(profile.synced_steps, 2);
  ASSERT_TRUE(profile.synced.count("forward"));
  EXPECT_GE(profile.synced.at("forward"), kNap);
  EXPECT_LE(profile.synced.at("forward"), profile.forward);
  for (const char* phase :
       {"data", "h2d", "backward", "optimizer", "logging"}) {
    EXPECT_TRUE(
        profile.synced.count(phase) == 0 || profile.synced.at(phase) < kNap)
        << phase;
  }
}

TEST(StepClock, TheWarmupEndsAfterTheFirstStepsOfThisFit) {
  StepProfile profile;
  const int64_t resumed_at = 30;
  StepClock clock(profile, c10::kCPU, resumed_at);
  clock.start_epoch();
  for (int64_t step = resumed_at; step < resumed_at + kWarmupSteps + 5;
       ++step) {
    clock.start_step(step);
    clock.begin(Phase::kForward);
    if (step == resumed_at) {
      nap();
    }
    clock.end_batch(2, /*stepped=*/true, step + 1);
  }
  EXPECT_EQ(profile.warmup_samples, 2 * kWarmupSteps);
  EXPECT_GE(profile.warmup_seconds, kNap);
  EXPECT_LE(profile.warmup_seconds, profile.step_seconds());
  EXPECT_GT(profile.steady_samples_per_s(), profile.samples_per_s());
  // From the process start: the first step's start, then the warm-up's
  // end, which the nap in the first step lies between.
  EXPECT_GT(profile.process_to_first_step, 0);
  EXPECT_GE(
      profile.process_to_warmup_end - profile.process_to_first_step,
      kNap - 0.011);
  EXPECT_LE(profile.process_to_warmup_end, seconds_since_process_start());
}

// The fit's first step (after a resume too) is split by phase apart, over
// all its micro-batches: a first-step cost names its phase.
TEST(StepClock, TheFitsFirstStepIsSplitByPhaseApart) {
  StepProfile profile;
  const int64_t resumed_at = 7;
  StepClock clock(profile, c10::kCPU, resumed_at);
  clock.start_epoch();
  for (int64_t step = resumed_at; step < resumed_at + 3; ++step) {
    clock.start_step(step);
    for (int micro = 0; micro < 2; ++micro) { // two micro-batches a step
      clock.begin(Phase::kForward);
      clock.begin(Phase::kBackward);
      if (step == resumed_at) {
        nap();
      }
      const bool stepped = micro == 1;
      if (stepped) {
        clock.begin(Phase::kOptimizer);
        clock.begin(Phase::kLogging);
        if (step == resumed_at) {
          nap();
          nap();
        }
      }
      clock.end_batch(1, stepped, step + (stepped ? 1 : 0));
    }
  }
  ASSERT_TRUE(profile.first_step.count("backward"));
  ASSERT_TRUE(profile.first_step.count("logging"));
  EXPECT_GE(profile.first_step.at("backward"), 2 * kNap);
  EXPECT_LT(profile.first_step.at("backward"), 2 * kNap + 0.015);
  EXPECT_GE(profile.first_step.at("logging"), 2 * kNap);
  EXPECT_LT(profile.first_step.at("logging"), 2 * kNap + 0.015);
  // The later steps' time is not in it; nor is the first step in `synced`.
  double first = 0;
  for (const auto& [name, seconds] : profile.first_step) {
    first += seconds;
  }
  EXPECT_LT(first, 4 * kNap + 0.02);
  EXPECT_EQ(profile.synced_steps, 0);
  EXPECT_TRUE(profile.synced.empty());
}

TEST(StepClock, AWaitReportedAtAPhasesEndMovesItToThatPhase) {
  StepProfile profile;
  StepClock clock(profile, c10::kCPU, 0);
  clock.start_epoch();
  clock.start_step(0);
  clock.begin(Phase::kBackward);
  nap();
  nap(); // the backward's last nap waited for the other processes
  clock.begin(Phase::kComm, kNap);
  clock.begin(Phase::kOptimizer);
  clock.end_batch(4, true, 1);
  EXPECT_GE(profile.backward, kNap);
  EXPECT_LT(profile.backward, 2 * kNap);
  EXPECT_GE(profile.comm, kNap - 0.002);
  EXPECT_LT(profile.comm, 2 * kNap);
  EXPECT_DOUBLE_EQ(clock.epoch_times().comm, profile.comm);
  // A wait longer than the phase takes the whole phase, no more.
  clock.start_step(1);
  clock.begin(Phase::kBackward);
  const double before = profile.backward;
  clock.begin(Phase::kComm, 100);
  EXPECT_DOUBLE_EQ(profile.backward, before);
}

TEST(StepClock, TimeBetweenEpochsCountsNowhere) {
  StepProfile profile;
  StepClock clock(profile, c10::kCPU, 0);
  clock.start_epoch();
  clock.start_step(0);
  clock.begin(Phase::kForward);
  clock.end_batch(1, true, 1);
  clock.end_epoch();
  nap(); // the epoch's end: validation, checkpoints, the epoch line
  EXPECT_LT(profile.step_seconds(), kNap);
  {
    const auto validation = clock.time(Phase::kValidation);
    nap();
  }
  nap();
  EXPECT_GE(profile.validation, kNap);
  EXPECT_LT(profile.step_seconds(), kNap);
  clock.start_epoch(); // the new epoch's split starts from zero
  EXPECT_EQ(clock.epoch_samples(), 0);
  EXPECT_EQ(clock.epoch_times().total(), 0);
  EXPECT_EQ(profile.samples, 1);
}

} // namespace
} // namespace hotloop::train::detail
