#pragma once

// Schedules made of schedules: SequentialLR (one after another) and
// ChainedScheduler (all at once, their changes multiplied).

#include "hotloop/optim/lr_scheduler.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace hotloop::optim {

/// Builds one schedule on the optimizer it is given, such as
/// `[](auto& o) { return std::make_unique<StepLR>(o, 10, 0.5); }`.
using ScheduleFactory =
    std::function<std::unique_ptr<LRScheduler>(torch::optim::Optimizer&)>;

/// What SequentialLR and ChainedScheduler share: the schedules they are
/// made of, in order, whose states are saved with theirs.
class ComposedSchedule : public LRScheduler {
 public:
  /// The schedules, in order.
  int64_t size() const;
  const LRScheduler& schedule(int64_t index) const;

  /// The schedules' progress too.
  void save(torch::serialize::OutputArchive& archive) const override;

 protected:
  using LRScheduler::LRScheduler;

  std::vector<std::unique_ptr<LRScheduler>> schedules_;
};

/// torch.optim.lr_scheduler.SequentialLR: schedule i runs from milestone
/// i - 1 (0 for the first) until milestone i, each starting at its
/// milestone from its own step 0, as PyTorch's `step(0)` starts it:
///
///   using std::make_unique;
///   SequentialLR warmup_then_cosine(
///       optimizer,
///       {[](auto& o) { return make_unique<LinearLR>(o, 0.1, 1.0, 500); },
///        [](auto& o) { return make_unique<CosineAnnealingLR>(o, 9500); }},
///       {500});
///
/// Equal to PyTorch's step for step. The schedules are built here, each on
/// the optimizer's rates from before the first (PyTorch's `initial_lr`:
/// the first schedule's base rates; a OneCycleLR's, or a first CyclicLR's,
/// own starting rates for the schedules built after it), so a schedule
/// never takes the rates the one before it set at step 0 as its base.
/// MultiplicativeLR and SWALR, which change the rates they find, take over
/// at their milestone from the rates the schedule before them left (SWALR
/// with its first annealing step): PyTorch's SequentialLR into SWALR at
/// `swa_start`. One PyTorch quirk is not reproduced: there, a OneCycleLR
/// after the first schedule moves the rates the first schedule starts
/// from to OneCycleLR's initial rates.
class SequentialLR final : public ComposedSchedule {
 public:
  /// Builds `schedules` (at least one) on `optimizer`, with one milestone
  /// fewer than schedules: positive and strictly increasing steps.
  /// Refused, as PyTorch's SequentialLR cannot step them: a schedule that
  /// watches a metric (ReduceLROnPlateau; LinearWarmup can warm up in
  /// front of it), and a SequentialLR or ChainedScheduler inside (a
  /// LinearWarmup is taken). Throws `hotloop::ConfigError` naming what is
  /// wrong.
  SequentialLR(
      torch::optim::Optimizer& optimizer,
      const std::vector<ScheduleFactory>& schedules,
      std::vector<int64_t> milestones);

  const std::vector<int64_t>& milestones() const;

  /// The milestones and the schedules' progress too; `load` refuses a
  /// state saved with other milestones or schedules.
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 protected:
  void advance(std::optional<double> metric) override;
  std::vector<double> compute_lr() override;
  void reset_state() override;

 private:
  /// The rates at schedule `index`'s milestone, as PyTorch's `step(0)`
  /// starts it.
  std::vector<double> start(size_t index);

  std::vector<int64_t> milestones_;
};

/// torch.optim.lr_scheduler.ChainedScheduler: every schedule steps at each
/// step, in order, each changing the rate the one before it left as
/// PyTorch's chainable form does:
///
///   ChainedScheduler decay_with_a_slow_start(
///       optimizer,
///       {[](auto& o) { return make_unique<ConstantLR>(o, 0.1, 2); },
///        [](auto& o) { return make_unique<ExponentialLR>(o, 0.9); }});
///
/// gives base x 0.1, 0.09, 0.81, 0.729, ... Equal to PyTorch's step for
/// step, schedules built in order (their step 0s compounding, as their
/// PyTorch constructors' first steps do): StepLR, MultiStepLR, ConstantLR,
/// LinearLR, ExponentialLR and PolynomialLR multiply the rate by their
/// own rate's change; CosineAnnealingLR scales its distance to eta_min;
/// MultiplicativeLR and SWALR work on the rate they find; LambdaLR,
/// CosineAnnealingWarmRestarts, CyclicLR and OneCycleLR set their own
/// rates, replacing what came before them. Each is built on the
/// optimizer's rates from before the first, as SequentialLR builds them
/// (the multiplying ones on rates of 1: only their changes count). The
/// chain reads the optimizer's rates at each step, so a rate set by anyone
/// else is chained on from there. One PyTorch quirk is not reproduced:
/// there a CyclicLR after the first schedule takes its step 0 from
/// initial_lr, not from its base_lr (later steps agree).
class ChainedScheduler final : public ComposedSchedule {
 public:
  /// Builds `schedules` (at least one) on `optimizer`. Refused, as
  /// PyTorch's ChainedScheduler cannot step them as it steps the others: a
  /// schedule that watches a metric (ReduceLROnPlateau), and a composed one
  /// (SequentialLR, ChainedScheduler, LinearWarmup; give its parts to this
  /// chain). Throws `hotloop::ConfigError` naming what is wrong.
  ChainedScheduler(
      torch::optim::Optimizer& optimizer,
      const std::vector<ScheduleFactory>& schedules);

  /// Refuses a state saved with another number of schedules.
  void load(torch::serialize::InputArchive& archive) override;

 protected:
  void advance(std::optional<double> metric) override;
  std::vector<double> compute_lr() override;
  void reset_state() override;

 private:
  /// The rates after schedule `index` has made its change to `lrs`, the
  /// rates it found (`stepped`: its step taken, else its step 0).
  std::vector<double> chain(
      size_t index, const std::vector<double>& lrs, bool stepped);
};

} // namespace hotloop::optim
