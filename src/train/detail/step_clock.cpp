#include "hotloop/train/detail/step_clock.h"

#include "hotloop/core/process_clock.h"
#include "hotloop/train/device.h"

#include <algorithm>

namespace hotloop::train::detail {
namespace {

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kData:
      return "data";
    case Phase::kH2D:
      return "h2d";
    case Phase::kForward:
      return "forward";
    case Phase::kBackward:
      return "backward";
    case Phase::kComm:
      return "comm";
    case Phase::kOptimizer:
      return "optimizer";
    case Phase::kLogging:
      return "logging";
    case Phase::kValidation:
    case Phase::kNone:
      break;
  }
  return nullptr;
}

} // namespace

StepClock::StepClock(
    StepProfile& profile, c10::Device device, int64_t start_step)
    : profile_(profile), device_(device), start_step_(start_step) {}

void StepClock::start_epoch() {
  epoch_ = log::StepTimes{};
  epoch_samples_ = 0;
  phase_ = Phase::kData;
  mark_ = Clock::now();
}

void StepClock::start_step(int64_t global_step) {
  synced_ = global_step % kSyncedStepInterval == kSyncedStepInterval / 2;
  first_ = global_step == start_step_;
  if (profile_.process_to_first_step < 0) {
    profile_.process_to_first_step = seconds_since_process_start();
  }
}

void StepClock::begin(Phase phase, double seconds_ago) {
  // A synced step waits for the device at the end of each phase of device
  // work, so that the phase's time is the device's, not when the host
  // queued it. Waiting for data queues nothing.
  if ((synced_ || first_) && phase_ != Phase::kData &&
      phase_name(phase_) != nullptr) {
    synchronize_device(device_);
  }
  const auto start =
      Clock::now() -
      std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(std::max(0.0, seconds_ago)));
  const auto split = std::max(start, mark_);
  const double seconds = std::chrono::duration<double>(split - mark_).count();
  charge(phase_, seconds, synced_);
  if (first_) {
    if (const char* name = phase_name(phase_)) {
      profile_.first_step[name] += seconds;
    }
  }
  phase_ = phase;
  mark_ = split;
}

void StepClock::end_batch(int64_t samples, bool stepped, int64_t global_step) {
  profile_.samples += samples;
  epoch_samples_ += samples;
  const bool next_synced =
      stepped && global_step % kSyncedStepInterval == kSyncedStepInterval / 2;
  const bool warmup_ends = stepped && global_step == start_step_ + kWarmupSteps;
  if (stepped) {
    ++profile_.steps;
    profile_.synced_steps += synced_ ? 1 : 0;
  }
  // A synced step starts on an idle device.
  if (next_synced || warmup_ends) {
    synchronize_device(device_);
  }
  begin(Phase::kData);
  if (stepped) {
    first_ = false;
  }
  if (warmup_ends) {
    profile_.warmup_seconds = profile_.step_seconds();
    profile_.warmup_samples = profile_.samples;
    // The device finished the warm-up's work above.
    profile_.process_to_warmup_end = seconds_since_process_start();
  }
}

void StepClock::end_epoch() {
  // The time since the last batch (the loader reaching its end) is no
  // step's; the work still queued on the device is the last steps'.
  const auto start = Clock::now();
  synchronize_device(device_);
  mark_ = Clock::now();
  charge(
      Phase::kOptimizer,
      std::chrono::duration<double>(mark_ - start).count(),
      /*synced=*/false);
  phase_ = Phase::kNone;
}

void StepClock::charge(Phase phase, double seconds, bool synced) {
  switch (phase) {
    case Phase::kData:
      profile_.data += seconds;
      epoch_.data += seconds;
      break;
    case Phase::kH2D:
      profile_.h2d += seconds;
      epoch_.compute += seconds;
      break;
    case Phase::kForward:
      profile_.forward += seconds;
      epoch_.compute += seconds;
      break;
    case Phase::kBackward:
      profile_.backward += seconds;
      epoch_.compute += seconds;
      break;
    case Phase::kComm:
      profile_.comm += seconds;
      epoch_.comm += seconds;
      break;
    case Phase::kOptimizer:
      profile_.optimizer += seconds;
      epoch_.optimizer += seconds;
      break;
    case Phase::kLogging:
      profile_.logging += seconds;
      epoch_.optimizer += seconds;
      break;
    case Phase::kValidation:
      profile_.validation += seconds;
      break;
    case Phase::kNone:
      break;
  }
  if (synced) {
    if (const char* name = phase_name(phase)) {
      profile_.synced[name] += seconds;
    }
  }
}

} // namespace hotloop::train::detail
