#include "hotloop/optim/composed_lr.h"

#include "hotloop/core/error.h"

#include <c10/util/ArrayRef.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

namespace hotloop::optim {
namespace {

std::string key(size_t index) {
  return "schedule" + std::to_string(index);
}

void set_rates(
    torch::optim::Optimizer& optimizer, const std::vector<double>& lrs) {
  auto& groups = optimizer.param_groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    groups[i].options().set_lr(lrs[i]);
  }
}

// Whether `schedule` is made of schedules (LinearWarmup is a SequentialLR).
bool composed(const LRScheduler& schedule) {
  return dynamic_cast<const ComposedSchedule*>(&schedule) ||
         dynamic_cast<const LinearWarmup*>(&schedule);
}

// Schedules whose chainable form multiplies the rate by their own rate's
// change.
bool multiplies(const LRScheduler& schedule) {
  return dynamic_cast<const StepLR*>(&schedule) ||
         dynamic_cast<const MultiStepLR*>(&schedule) ||
         dynamic_cast<const ConstantLR*>(&schedule) ||
         dynamic_cast<const LinearLR*>(&schedule) ||
         dynamic_cast<const ExponentialLR*>(&schedule) ||
         dynamic_cast<const PolynomialLR*>(&schedule);
}

// Builds `schedules` on `optimizer`, each on the rates PyTorch's initial_lr
// would hold: the optimizer's rates now, then the first schedule's base
// rates (CyclicLR's base_lr, where PyTorch's setdefault first sets it),
// then any OneCycleLR's (which sets initial_lr wherever it is). `owner`
// names the composed schedule in errors; `chained`: ChainedScheduler's,
// whose multiplying schedules are built on rates of 1 (their own rate is
// then their factor, whatever the rates), and which refuses a composed
// schedule inside (PyTorch chains its parts' steps one by one), as
// SequentialLR refuses one but LinearWarmup (PyTorch's cannot step(0)
// one).
std::vector<std::unique_ptr<LRScheduler>> build_each(
    torch::optim::Optimizer& optimizer,
    const std::vector<ScheduleFactory>& schedules,
    const std::string& owner,
    bool chained) {
  HOTLOOP_CHECK_AS(
      ConfigError, !schedules.empty(), owner, " needs at least one schedule");
  std::vector<std::unique_ptr<LRScheduler>> built;
  std::vector<double> initial = group_lrs(optimizer);
  for (size_t i = 0; i < schedules.size(); ++i) {
    set_rates(optimizer, initial);
    std::unique_ptr<LRScheduler> schedule =
        schedules[i] ? schedules[i](optimizer) : nullptr;
    HOTLOOP_CHECK_AS(
        ConfigError,
        schedule != nullptr,
        owner,
        ": schedule ",
        i,
        " was not built (an empty factory, or one that returned null)");
    HOTLOOP_CHECK_AS(
        ConfigError,
        &schedule->optimizer() == &optimizer,
        owner,
        ": schedule ",
        i,
        " (",
        schedule->name(),
        ") sets another optimizer's rates");
    HOTLOOP_CHECK_AS(
        ConfigError,
        !schedule->needs_metric(),
        owner,
        ": schedule ",
        i,
        " (",
        schedule->name(),
        ") watches a metric, which PyTorch's ",
        owner,
        " cannot step (LinearWarmup can warm up in front of it)");
    HOTLOOP_CHECK_AS(
        ConfigError,
        !composed(*schedule) ||
            (!chained && dynamic_cast<const LinearWarmup*>(schedule.get())),
        owner,
        ": schedule ",
        i,
        " is a ",
        schedule->name(),
        ", which PyTorch's ",
        owner,
        " cannot step as one schedule: give its schedules ",
        chained ? "to this ChainedScheduler" : "to this SequentialLR",
        " instead");
    if (i == 0 || dynamic_cast<const OneCycleLR*>(schedule.get())) {
      initial = schedule->base_lrs();
    }
    if (chained && multiplies(*schedule)) {
      set_rates(optimizer, std::vector<double>(initial.size(), 1.0));
      schedule = schedules[i](optimizer);
    }
    built.push_back(std::move(schedule));
  }
  return built;
}

// build_each, leaving the optimizer's rates as they were when it throws.
std::vector<std::unique_ptr<LRScheduler>> build_schedules(
    torch::optim::Optimizer& optimizer,
    const std::vector<ScheduleFactory>& schedules,
    const std::string& owner,
    bool chained) {
  const std::vector<double> found = group_lrs(optimizer);
  try {
    return build_each(optimizer, schedules, owner, chained);
  } catch (...) {
    set_rates(optimizer, found); // a refused build leaves the rates alone
    throw;
  }
}

// Schedules that change the rates they find rather than set their own.
bool takes_over(const LRScheduler& schedule) {
  return dynamic_cast<const MultiplicativeLR*>(&schedule) ||
         dynamic_cast<const SWALR*>(&schedule);
}

} // namespace

int64_t ComposedSchedule::size() const {
  return static_cast<int64_t>(schedules_.size());
}

const LRScheduler& ComposedSchedule::schedule(int64_t index) const {
  HOTLOOP_CHECK(
      index >= 0 && index < size(),
      name(),
      " has ",
      size(),
      " schedules, asked for schedule ",
      index);
  return *schedules_[static_cast<size_t>(index)];
}

void ComposedSchedule::save(torch::serialize::OutputArchive& archive) const {
  LRScheduler::save(archive);
  for (size_t i = 0; i < schedules_.size(); ++i) {
    torch::serialize::OutputArchive schedule(archive.compilation_unit());
    schedules_[i]->save(schedule);
    archive.write(key(i), schedule);
  }
}

SequentialLR::SequentialLR(
    torch::optim::Optimizer& optimizer,
    const std::vector<ScheduleFactory>& schedules,
    std::vector<int64_t> milestones)
    : ComposedSchedule(optimizer, "SequentialLR"),
      milestones_(std::move(milestones)) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      !schedules.empty(),
      "SequentialLR needs at least one schedule");
  HOTLOOP_CHECK_AS(
      ConfigError,
      milestones_.size() + 1 == schedules.size(),
      "SequentialLR: expected one milestone fewer than the ",
      schedules.size(),
      " schedules, got ",
      milestones_.size(),
      " milestones ",
      c10::IntArrayRef(milestones_));
  for (size_t i = 0; i < milestones_.size(); ++i) {
    HOTLOOP_CHECK_AS(
        ConfigError,
        milestones_[i] > 0 && (i == 0 || milestones_[i] > milestones_[i - 1]),
        "SequentialLR: the milestones must be positive and strictly "
        "increasing steps, got ",
        c10::IntArrayRef(milestones_));
  }
  schedules_ = build_schedules(optimizer, schedules, name(), false);
  restart();
}

const std::vector<int64_t>& SequentialLR::milestones() const {
  return milestones_;
}

void SequentialLR::reset_state() {
  // As built anew: every schedule at its step 0 in order (what each sets
  // besides the rate, such as CyclicLR's momentum, stays as a build
  // leaves it), then the first's rates.
  for (const auto& schedule : schedules_) {
    schedule->restart();
  }
  schedules_.front()->restart();
}

std::vector<double> SequentialLR::compute_lr() {
  return schedules_.front()->last_lr(); // step 0: the first schedule's
}

std::vector<double> SequentialLR::start(size_t index) {
  LRScheduler& schedule = *schedules_[index];
  if (!takes_over(schedule)) {
    schedule.restart();
    return schedule.last_lr();
  }
  // PyTorch's step(0) leaves MultiplicativeLR's rates as found; SWALR
  // counts its steps apart from the epoch, so its first is an annealing
  // step from the rates found.
  const std::vector<double> found = group_lrs(optimizer());
  schedule.restart();
  apply_lr(found);
  if (dynamic_cast<SWALR*>(&schedule)) {
    schedule.step();
    return schedule.last_lr();
  }
  return found;
}

void SequentialLR::advance(std::optional<double> /*metric*/) {
  const int64_t epoch = last_epoch() + 1;
  const auto index = static_cast<size_t>(
      std::upper_bound(milestones_.begin(), milestones_.end(), epoch) -
      milestones_.begin());
  std::vector<double> lrs;
  if (index > 0 && milestones_[index - 1] == epoch) {
    lrs = start(index);
  } else {
    schedules_[index]->step();
    lrs = schedules_[index]->last_lr();
  }
  set_last_epoch(epoch);
  apply_lr(lrs);
}

void SequentialLR::save(torch::serialize::OutputArchive& archive) const {
  ComposedSchedule::save(archive);
  archive.write("milestones", c10::IValue(milestones_));
}

void SequentialLR::load(torch::serialize::InputArchive& archive) {
  // Checked before anything changes; a state without milestones is another
  // kind of schedule's, which the base class names.
  c10::IValue saved;
  if (!archive.try_read("milestones", saved)) {
    LRScheduler::load(archive);
    HOTLOOP_CHECK_AS(
        ConfigError,
        false,
        "lr_scheduler: the saved SequentialLR state has no milestones");
  }
  const std::vector<int64_t> milestones = saved.toIntVector();
  HOTLOOP_CHECK_AS(
      ConfigError,
      milestones == milestones_,
      "lr_scheduler: the saved SequentialLR has milestones ",
      c10::IntArrayRef(milestones),
      ", the configured one ",
      c10::IntArrayRef(milestones_));
  std::vector<torch::serialize::InputArchive> states(schedules_.size());
  for (size_t i = 0; i < schedules_.size(); ++i) {
    HOTLOOP_CHECK_AS(
        ConfigError,
        archive.try_read(key(i), states[i]),
        "lr_scheduler: the saved SequentialLR holds ",
        i,
        " schedules, the configured one ",
        schedules_.size());
  }
  LRScheduler::load(archive);
  // Each load re-applies its schedule's rates (and momentum): those not yet
  // started first, then the others in the order they ran, so the
  // optimizer ends as the run left it.
  const auto active = static_cast<size_t>(
      std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch()) -
      milestones_.begin());
  for (size_t i = active + 1; i < schedules_.size(); ++i) {
    schedules_[i]->load(states[i]);
  }
  for (size_t i = 0; i <= active; ++i) {
    schedules_[i]->load(states[i]);
  }
  apply_lr(last_lr());
}

// ---------------------------------------------------------------------------
// ChainedScheduler

ChainedScheduler::ChainedScheduler(
    torch::optim::Optimizer& optimizer,
    const std::vector<ScheduleFactory>& schedules)
    : ComposedSchedule(optimizer, "ChainedScheduler") {
  schedules_ = build_schedules(optimizer, schedules, name(), true);
  restart();
}

std::vector<double> ChainedScheduler::chain(
    size_t index, const std::vector<double>& lrs, bool stepped) {
  LRScheduler& schedule = *schedules_[index];
  if (takes_over(schedule)) {
    // At step 0 both leave the rate they find, but SWALR annealing over 0
    // steps, which is at swa_lr from its first.
    if (!stepped) {
      const auto* swa = dynamic_cast<const SWALR*>(&schedule);
      return swa != nullptr && swa->options().anneal_epochs() == 0
                 ? schedule.last_lr()
                 : lrs;
    }
    set_rates(optimizer(), lrs);
    schedule.step();
    return schedule.last_lr();
  }
  if (const auto* cosine = dynamic_cast<const CosineAnnealingLR*>(&schedule)) {
    if (!stepped) {
      return lrs;
    }
    schedule.step();
    // PyTorch's chainable form, term for term.
    constexpr double kPi = 3.14159265358979323846;
    const auto t_max = static_cast<double>(cosine->t_max());
    const int64_t epoch = schedule.last_epoch();
    const double eta_min = cosine->eta_min();
    std::vector<double> out = lrs;
    for (size_t g = 0; g < out.size(); ++g) {
      if ((epoch - 1 - cosine->t_max()) % (2 * cosine->t_max()) == 0) {
        out[g] = lrs[g] + (schedule.base_lrs()[g] - eta_min) *
                              (1 - std::cos(kPi / t_max)) / 2;
      } else {
        out[g] =
            (1 + std::cos(kPi * static_cast<double>(epoch) / t_max)) /
                (1 + std::cos(kPi * static_cast<double>(epoch - 1) / t_max)) *
                (lrs[g] - eta_min) +
            eta_min;
      }
    }
    return out;
  }
  if (!multiplies(schedule)) {
    // LambdaLR, CosineAnnealingWarmRestarts, CyclicLR and OneCycleLR set
    // their own rates.
    if (stepped) {
      schedule.step();
    }
    return schedule.last_lr();
  }
  // The change of the schedule's own rate, built on 1 (from 1 at step 0);
  // a rate that was 0 stays (PolynomialLR or LinearLR past their end).
  const std::vector<double> before =
      stepped ? schedule.last_lr() : schedule.base_lrs();
  if (stepped) {
    schedule.step();
  }
  const std::vector<double>& after = schedule.last_lr();
  std::vector<double> out = lrs;
  for (size_t g = 0; g < out.size(); ++g) {
    if (before[g] != 0) {
      out[g] = lrs[g] * (after[g] / before[g]);
    }
  }
  return out;
}

void ChainedScheduler::reset_state() {
  // As built anew: every schedule at its step 0, in order.
  for (const auto& schedule : schedules_) {
    schedule->restart();
  }
}

std::vector<double> ChainedScheduler::compute_lr() {
  // Step 0: each schedule's first step on what the ones before it left,
  // as PyTorch's constructors take theirs one after another.
  std::vector<double> lrs = base_lrs();
  for (size_t i = 0; i < schedules_.size(); ++i) {
    lrs = chain(i, lrs, /*stepped=*/false);
  }
  return lrs;
}

void ChainedScheduler::advance(std::optional<double> /*metric*/) {
  std::vector<double> lrs = group_lrs(optimizer());
  for (size_t i = 0; i < schedules_.size(); ++i) {
    lrs = chain(i, lrs, /*stepped=*/true);
  }
  set_last_epoch(last_epoch() + 1);
  apply_lr(lrs);
}

void ChainedScheduler::load(torch::serialize::InputArchive& archive) {
  // Checked before anything changes.
  std::vector<torch::serialize::InputArchive> states(schedules_.size() + 1);
  for (size_t i = 0; i <= schedules_.size(); ++i) {
    const bool saved = archive.try_read(key(i), states[i]);
    HOTLOOP_CHECK_AS(
        ConfigError,
        saved == (i < schedules_.size()) || (i == 0 && !saved),
        "lr_scheduler: the saved ChainedScheduler holds ",
        i < schedules_.size() ? "only " : "more than ",
        i,
        " schedules, the configured one ",
        schedules_.size());
    if (i == 0 && !saved) {
      break; // another kind of schedule's state: the base class names it
    }
  }
  LRScheduler::load(archive);
  // In the order they step, so the last one's momentum (a CyclicLR's) is
  // the optimizer's, as the run left it.
  for (size_t i = 0; i < schedules_.size(); ++i) {
    schedules_[i]->load(states[i]);
  }
  apply_lr(last_lr());
}

} // namespace hotloop::optim
