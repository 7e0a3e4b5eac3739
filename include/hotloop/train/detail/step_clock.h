#pragma once

#include "hotloop/log/progress.h"
#include "hotloop/train/step_profile.h"

#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>

namespace hotloop::train::detail {

/// What a fit's time goes to. The first six are the training step's phases
/// (StepProfile's fields); validation is kept apart from the step time, and
/// kNone counts nowhere (between epochs, before the first).
enum class Phase {
  kData,
  kH2D,
  kForward,
  kBackward,
  kComm,
  kOptimizer,
  kLogging,
  kValidation,
  kNone,
};

/// Times a fit's training steps into its StepProfile, so that the loop only
/// says which phase starts (`clock.begin(Phase::kForward)`): the time
/// between two calls goes to the phase that was current. On an asynchronous
/// device the host only queues work, so one optimizer step in
/// kSyncedStepInterval is timed with the device synchronised at the end of
/// each phase, and those steps' times go to StepProfile::synced as well;
/// the fit's first step is timed so too, into StepProfile::first_step.
/// Not thread-safe.
class StepClock {
 public:
  class Scope;

  /// `start_step`: the global step the fit starts at (after a resume), from
  /// which kWarmupSteps are counted.
  StepClock(StepProfile& profile, c10::Device device, int64_t start_step);

  /// From now the epoch's first batch is awaited (kData), and the epoch's
  /// split (epoch_times) starts from zero.
  void start_epoch();

  /// At the first micro-batch of the step that follows `global_step` steps
  /// taken: decides whether this step is timed synchronised.
  void start_step(int64_t global_step);

  /// Ends the current phase and starts `phase`, which began `seconds_ago`
  /// seconds before now (the wait a backward reports at its end, say).
  void begin(Phase phase, double seconds_ago = 0);

  /// `phase` while the returned Scope lives (callbacks inside a step are
  /// logging time, validation inside an epoch is not step time), then the
  /// phase that was current before.
  [[nodiscard]] Scope time(Phase phase);

  /// After a micro-batch of `samples` samples; `stepped` when it ended an
  /// optimizer step, after which `global_step` steps are taken. The device
  /// is synchronised, on the logging phase's account, after a synced step,
  /// before the next one and when the warm-up steps end (their queued work
  /// counts to them). The next batch is awaited from now.
  void end_batch(int64_t samples, bool stepped, int64_t global_step);

  /// After the epoch's last batch: the work still queued on the device
  /// belongs to the last steps (the optimizer's account), without which
  /// the rate would be the host's queueing rate. Then kNone.
  void end_epoch();

  /// The epoch's split as the progress bar shows it: data; h2d, forward
  /// and backward as compute; comm; optimizer and logging as the rest.
  const log::StepTimes& epoch_times() const {
    return epoch_;
  }
  int64_t epoch_samples() const {
    return epoch_samples_;
  }

 private:
  using Clock = std::chrono::steady_clock;
  void charge(Phase phase, double seconds, bool synced);

  StepProfile& profile_;
  c10::Device device_;
  int64_t start_step_;
  Phase phase_ = Phase::kNone;
  Clock::time_point mark_ = Clock::now();
  bool synced_ = false;
  // The fit's first step, timed apart (StepProfile::first_step).
  bool first_ = false;
  log::StepTimes epoch_;
  int64_t epoch_samples_ = 0;
};

/// A phase for as long as it lives; see StepClock::time.
class [[nodiscard]] StepClock::Scope {
 public:
  ~Scope() {
    clock_.begin(previous_);
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  friend class StepClock;
  Scope(StepClock& clock, Phase previous)
      : clock_(clock), previous_(previous) {}
  StepClock& clock_;
  Phase previous_;
};

inline StepClock::Scope StepClock::time(Phase phase) {
  const Phase previous = phase_;
  begin(phase);
  return Scope(*this, previous);
}

} // namespace hotloop::train::detail
