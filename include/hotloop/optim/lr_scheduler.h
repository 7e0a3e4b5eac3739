#pragma once

#include <torch/arg.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hotloop::optim {

/// The learning rate of each of `optimizer`'s param groups, in order.
std::vector<double> group_lrs(const torch::optim::Optimizer& optimizer);

/// A learning-rate schedule bound to one optimizer, matching
/// `torch.optim.lr_scheduler` step for step. Building a schedule applies its
/// step-0 learning rates to every param group (as PyTorch's constructors do);
/// call `step()` once after each `optimizer.step()` (or once an epoch).
///
/// Every schedule except ReduceLROnPlateau computes its rates from
/// `last_epoch()` and `base_lrs()` alone (PyTorch's closed form, equal to its
/// chainable form within rounding), so rates set on the optimizer by anyone
/// else are overwritten at the next step.
///
/// Not thread-safe; the optimizer must outlive the schedule and keep its
/// param groups (count and order) for the schedule's lifetime.
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  /// One schedule step: advances `last_epoch()` by one and sets each param
  /// group's lr (and momentum, for OneCycleLR). Throws `hotloop::Error` when
  /// the schedule watches a metric (`needs_metric()`): use `step(metric)`.
  void step();

  /// One schedule step given the monitored metric (such as val_loss).
  /// Schedules that watch no metric ignore it.
  void step(double metric);

  /// Whether `step` needs the monitored metric (ReduceLROnPlateau, or a
  /// warmup around it).
  virtual bool needs_metric() const;

  /// Returns the schedule to step 0 and applies its step-0 rates, as if it
  /// were built anew on the same base rates.
  void restart();

  /// The rates set at the last step (or at construction), one per group.
  const std::vector<double>& last_lr() const;

  /// Steps taken since construction (PyTorch's `last_epoch`; 0 when built).
  int64_t last_epoch() const;

  /// The param groups' rates when the schedule was built (PyTorch's
  /// `initial_lr`; for OneCycleLR, `max_lr / div_factor`).
  const std::vector<double>& base_lrs() const;

  /// The schedule's class name, such as "StepLR"; checked on `load`.
  const std::string& name() const;

  /// The optimizer whose rates this schedule sets.
  torch::optim::Optimizer& optimizer() const;

  /// Writes the schedule's progress (not its options) into `archive`.
  virtual void save(torch::serialize::OutputArchive& archive) const;

  /// Restores progress written by `save` of a schedule built with the same
  /// options, and re-applies the saved rates to the optimizer, so the run
  /// continues exactly as the saved one would have. Throws
  /// `hotloop::ConfigError` if the archive holds another kind of schedule
  /// or another number of param groups.
  virtual void load(torch::serialize::InputArchive& archive);

 protected:
  /// Captures the optimizer's current rates as `base_lrs()`. Derived
  /// constructors end with `restart()` to apply step 0.
  LRScheduler(torch::optim::Optimizer& optimizer, std::string name);

  /// Moves to `last_epoch() + 1` and applies its rates. The default sets
  /// `compute_lr()` after advancing; `metric` is present only when the
  /// caller passed one.
  virtual void advance(std::optional<double> metric);

  /// The rates at `last_epoch()`, one per group. May set momentum as a side
  /// effect (OneCycleLR).
  virtual std::vector<double> compute_lr() = 0;

  /// Resets schedule-specific state for `restart()`; the default does
  /// nothing.
  virtual void reset_state();

  /// Sets each group's lr to `lrs[i]` and records them as `last_lr()`.
  void apply_lr(const std::vector<double>& lrs);

  void set_base_lrs(std::vector<double> lrs);
  void set_last_epoch(int64_t epoch);

 private:
  torch::optim::Optimizer* optimizer_;
  std::string name_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  int64_t last_epoch_ = 0;
};

/// lr = base * gamma^(epoch / step_size) (integer division).
class StepLR final : public LRScheduler {
 public:
  /// Requires step_size > 0 and gamma > 0 (else `hotloop::ConfigError`).
  StepLR(torch::optim::Optimizer& optimizer, int64_t step_size, double gamma);

 protected:
  std::vector<double> compute_lr() override;

 private:
  int64_t step_size_;
  double gamma_;
};

/// lr = base * gamma^(number of milestones <= epoch).
class MultiStepLR final : public LRScheduler {
 public:
  /// Requires non-empty, positive, strictly increasing milestones and
  /// gamma > 0 (else `hotloop::ConfigError`).
  MultiStepLR(
      torch::optim::Optimizer& optimizer,
      std::vector<int64_t> milestones,
      double gamma);

 protected:
  std::vector<double> compute_lr() override;

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

/// lr = base * gamma^epoch.
class ExponentialLR final : public LRScheduler {
 public:
  /// Requires gamma > 0 (else `hotloop::ConfigError`).
  ExponentialLR(torch::optim::Optimizer& optimizer, double gamma);

 protected:
  std::vector<double> compute_lr() override;

 private:
  double gamma_;
};

/// lr = eta_min + (base - eta_min) * (1 + cos(pi * epoch / t_max)) / 2.
/// Past t_max the cosine continues (the rate rises again), as in PyTorch.
class CosineAnnealingLR final : public LRScheduler {
 public:
  /// Requires t_max > 0 and eta_min >= 0 (else `hotloop::ConfigError`).
  CosineAnnealingLR(
      torch::optim::Optimizer& optimizer, int64_t t_max, double eta_min = 0.0);

  int64_t t_max() const {
    return t_max_;
  }
  double eta_min() const {
    return eta_min_;
  }

 protected:
  std::vector<double> compute_lr() override;

 private:
  int64_t t_max_;
  double eta_min_;
};

/// SGDR: cosine from base to eta_min over t_0 steps, then restarts with
/// periods t_0 * t_mult, t_0 * t_mult^2, ...
class CosineAnnealingWarmRestarts final : public LRScheduler {
 public:
  /// Requires t_0 > 0, t_mult >= 1 and eta_min >= 0 (else
  /// `hotloop::ConfigError`).
  CosineAnnealingWarmRestarts(
      torch::optim::Optimizer& optimizer,
      int64_t t_0,
      int64_t t_mult = 1,
      double eta_min = 0.0);

 protected:
  std::vector<double> compute_lr() override;

 private:
  int64_t t_0_;
  int64_t t_mult_;
  double eta_min_;
};

/// lr = base * (1 - min(epoch, total_iters) / total_iters)^power.
class PolynomialLR final : public LRScheduler {
 public:
  /// Requires total_iters > 0 and power >= 0 (else `hotloop::ConfigError`).
  PolynomialLR(
      torch::optim::Optimizer& optimizer,
      int64_t total_iters,
      double power = 1.0);

 protected:
  std::vector<double> compute_lr() override;

 private:
  int64_t total_iters_;
  double power_;
};

/// lr = base * factor for the first total_iters steps, then base.
class ConstantLR final : public LRScheduler {
 public:
  /// Requires factor in (0, 1] and total_iters >= 0, and total_iters > 0
  /// for a factor below 1 (else `hotloop::ConfigError`): PyTorch's
  /// ConstantLR then holds the factor for ever in its step-by-step form
  /// and never in its closed form. PyTorch also takes a factor of 0, whose
  /// chainable form then divides by it at total_iters.
  explicit ConstantLR(
      torch::optim::Optimizer& optimizer,
      double factor = 1.0 / 3,
      int64_t total_iters = 5);

 protected:
  std::vector<double> compute_lr() override;

 private:
  double factor_;
  int64_t total_iters_;
};

/// lr = base * (start_factor + (end_factor - start_factor) *
/// min(epoch, total_iters) / total_iters): a straight line from
/// start_factor to end_factor over total_iters steps, then flat.
class LinearLR final : public LRScheduler {
 public:
  /// Requires start_factor in (0, 1], end_factor in [0, 1] and
  /// total_iters > 0 (else `hotloop::ConfigError`).
  explicit LinearLR(
      torch::optim::Optimizer& optimizer,
      double start_factor = 1.0 / 3,
      double end_factor = 1.0,
      int64_t total_iters = 5);

 protected:
  std::vector<double> compute_lr() override;

 private:
  double start_factor_;
  double end_factor_;
  int64_t total_iters_;
};

/// A factor of the step number, such as `[](int64_t step) { return 0.95 *
/// step; }`.
using LrLambda = std::function<double(int64_t)>;

/// lr = base * lambda(epoch), one lambda for every param group or one per
/// group. The lambdas are not saved with the schedule: a resumed run
/// builds it with the same ones.
class LambdaLR final : public LRScheduler {
 public:
  LambdaLR(torch::optim::Optimizer& optimizer, LrLambda lambda);
  /// One lambda per param group (else `hotloop::ConfigError`).
  LambdaLR(torch::optim::Optimizer& optimizer, std::vector<LrLambda> lambdas);

 protected:
  std::vector<double> compute_lr() override;

 private:
  std::vector<LrLambda> lambdas_;
};

/// Each step multiplies the optimizer's current rates by lambda(epoch)
/// (from epoch 1): PyTorch's MultiplicativeLR, which like
/// ReduceLROnPlateau reads the rates from the optimizer, so a rate set by
/// anyone else is multiplied on from there. One lambda for every group or
/// one per group; not saved (build a resumed run's with the same ones).
class MultiplicativeLR final : public LRScheduler {
 public:
  MultiplicativeLR(torch::optim::Optimizer& optimizer, LrLambda lambda);
  /// One lambda per param group (else `hotloop::ConfigError`).
  MultiplicativeLR(
      torch::optim::Optimizer& optimizer, std::vector<LrLambda> lambdas);

 protected:
  void advance(std::optional<double> metric) override;
  std::vector<double> compute_lr() override;

 private:
  std::vector<LrLambda> lambdas_;
};

/// How CyclicLR scales a cycle's amplitude: not at all (triangular),
/// halved each cycle (triangular2), or by gamma^step (exp_range).
enum class CyclicMode { kTriangular, kTriangular2, kExpRange };

/// Options of CyclicLR; names and defaults as in PyTorch.
struct CyclicLROptions {
  /// One lower and one upper rate for every param group.
  CyclicLROptions(double base_lr, double max_lr);
  /// One value, or one per param group, of each.
  CyclicLROptions(std::vector<double> base_lr, std::vector<double> max_lr);

  /// The rate at the start of each cycle (>= 0); replaces the optimizer's.
  TORCH_ARG(std::vector<double>, base_lr);
  /// The rate at the top of each cycle (>= 0).
  TORCH_ARG(std::vector<double>, max_lr);
  /// Steps from base_lr up to max_lr (> 0).
  TORCH_ARG(int64_t, step_size_up) = 2000;
  /// Steps back down (>= 0); unset: step_size_up.
  TORCH_ARG(std::optional<int64_t>, step_size_down) = std::nullopt;
  TORCH_ARG(CyclicMode, mode) = CyclicMode::kTriangular;
  /// exp_range's factor per step (> 0).
  TORCH_ARG(double, gamma) = 1.0;
  /// Cycle momentum inversely to the rate (SGD/RMSprop `momentum`,
  /// Adam/AdamW first beta, as PyTorch 2.x does; 1.13 refuses betas).
  TORCH_ARG(bool, cycle_momentum) = true;
  /// Momentum at the top of the cycle, in [0, 1).
  TORCH_ARG(double, base_momentum) = 0.8;
  /// Momentum at the start of the cycle, in [0, 1).
  TORCH_ARG(double, max_momentum) = 0.9;
};

/// The cyclical learning rate policy (Smith, 2017): each cycle climbs
/// linearly from base_lr to max_lr over step_size_up steps and back over
/// step_size_down, its amplitude scaled by the mode; momentum moves the
/// opposite way. Overwrites the optimizer's rates with base_lr when built
/// (`base_lrs()`). PyTorch's custom `scale_fn` is not offered.
class CyclicLR final : public LRScheduler {
 public:
  /// Validates `options` (`hotloop::ConfigError` naming the bad option).
  CyclicLR(torch::optim::Optimizer& optimizer, CyclicLROptions options);

  const CyclicLROptions& options() const;

  void load(torch::serialize::InputArchive& archive) override;

 protected:
  std::vector<double> compute_lr() override;

 private:
  CyclicLROptions options_;
  std::vector<double> max_lrs_;
};

/// How OneCycleLR interpolates within a phase.
enum class AnnealStrategy { kCos, kLinear };

/// Options of OneCycleLR; names and defaults as in PyTorch.
struct OneCycleLROptions {
  /// One peak rate for every param group.
  OneCycleLROptions(double max_lr, int64_t total_steps);
  /// One peak rate per param group.
  OneCycleLROptions(std::vector<double> max_lr, int64_t total_steps);

  /// Peak rates: one value, or one per param group; each > 0.
  TORCH_ARG(std::vector<double>, max_lr);
  /// Steps in the cycle (> 0); `step()` may be called this many times.
  TORCH_ARG(int64_t, total_steps);
  /// Fraction of the cycle spent raising the rate, in [0, 1].
  TORCH_ARG(double, pct_start) = 0.3;
  TORCH_ARG(AnnealStrategy, anneal_strategy) = AnnealStrategy::kCos;
  /// Cycle momentum inversely to the rate (SGD/RMSprop `momentum`,
  /// Adam/AdamW first beta); needs an optimizer that has one.
  TORCH_ARG(bool, cycle_momentum) = true;
  /// Momentum at the peak rate, in [0, 1).
  TORCH_ARG(double, base_momentum) = 0.85;
  /// Momentum at the start and end of the cycle, in [0, 1).
  TORCH_ARG(double, max_momentum) = 0.95;
  /// Initial rate = max_lr / div_factor (> 0).
  TORCH_ARG(double, div_factor) = 25.0;
  /// Final rate = initial rate / final_div_factor (> 0).
  TORCH_ARG(double, final_div_factor) = 1e4;
  /// Up, down to the initial rate, then down to the final rate (as in the
  /// paper) instead of up then down to the final rate (fastai).
  TORCH_ARG(bool, three_phase) = false;
};

/// The 1cycle policy: rates rise from max_lr / div_factor to max_lr over
/// pct_start of the cycle, then anneal to the final rate; momentum moves
/// the opposite way. Overwrites the optimizer's rates with
/// max_lr / div_factor when built (`base_lrs()`).
class OneCycleLR final : public LRScheduler {
 public:
  /// Validates `options` (`hotloop::ConfigError` naming the bad option).
  OneCycleLR(torch::optim::Optimizer& optimizer, OneCycleLROptions options);

  const OneCycleLROptions& options() const;

  void load(torch::serialize::InputArchive& archive) override;

 protected:
  /// Throws `hotloop::Error` when stepping past `total_steps`.
  void advance(std::optional<double> metric) override;
  std::vector<double> compute_lr() override;

 private:
  struct Phase {
    double end_step;
    // Indices into {initial, max, min} rates and {max, base} momentum.
    int start_lr;
    int end_lr;
    int start_momentum;
    int end_momentum;
  };
  double anneal(double start, double end, double pct) const;

  OneCycleLROptions options_;
  std::vector<double> max_lrs_;
  std::vector<Phase> phases_;
};

/// Whether ReduceLROnPlateau waits for the metric to fall or to rise.
enum class PlateauMode { kMin, kMax };
/// Whether an improvement must beat the best by a fraction or an amount.
enum class ThresholdMode { kRel, kAbs };

/// Options of ReduceLROnPlateau; names and defaults as in PyTorch.
struct ReduceLROnPlateauOptions {
  TORCH_ARG(PlateauMode, mode) = PlateauMode::kMin;
  /// new lr = lr * factor, in [0, 1).
  TORCH_ARG(double, factor) = 0.1;
  /// Steps without improvement tolerated before reducing (>= 0).
  TORCH_ARG(int64_t, patience) = 10;
  /// Minimum improvement (>= 0), relative or absolute per threshold_mode.
  TORCH_ARG(double, threshold) = 1e-4;
  TORCH_ARG(ThresholdMode, threshold_mode) = ThresholdMode::kRel;
  /// Steps after a reduction during which bad steps are not counted (>= 0).
  TORCH_ARG(int64_t, cooldown) = 0;
  /// Lower bound of every group's rate (>= 0).
  TORCH_ARG(double, min_lr) = 0.0;
  /// Reductions smaller than this are skipped (>= 0).
  TORCH_ARG(double, eps) = 1e-8;
};

/// Multiplies the rates by `factor` when the metric passed to
/// `step(metric)` has not improved for more than `patience` steps. Reads
/// the current rates from the optimizer, like PyTorch.
class ReduceLROnPlateau final : public LRScheduler {
 public:
  /// Validates `options` (`hotloop::ConfigError` naming the bad option).
  ReduceLROnPlateau(
      torch::optim::Optimizer& optimizer,
      ReduceLROnPlateauOptions options = {});

  /// Always true: `step()` without a metric throws.
  bool needs_metric() const override;

  const ReduceLROnPlateauOptions& options() const;

  /// Best metric seen since the last restart (+-inf before the first step).
  double best() const;

  /// Bad steps counted towards `patience`.
  int64_t num_bad_epochs() const;

  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 protected:
  void advance(std::optional<double> metric) override;
  std::vector<double> compute_lr() override;
  void reset_state() override;

 private:
  bool is_better(double value) const;

  ReduceLROnPlateauOptions options_;
  double best_ = 0.0;
  int64_t num_bad_epochs_ = 0;
  int64_t cooldown_counter_ = 0;
};

/// Options of SWALR; names and defaults as in torch.optim.swa_utils.
struct SWALROptions {
  /// One SWA rate for every param group, or one per group; each >= 0.
  /* implicit */ SWALROptions(double swa_lr);
  /* implicit */ SWALROptions(std::vector<double> swa_lr);

  TORCH_ARG(std::vector<double>, swa_lr);
  /// Steps from the optimizer's rates to swa_lr (>= 0; 0: at once).
  TORCH_ARG(int64_t, anneal_epochs) = 10;
  /// Cosine ((1 - cos(pi t)) / 2) or linear (t) mixing.
  TORCH_ARG(AnnealStrategy, anneal_strategy) = AnnealStrategy::kCos;
};

/// torch.optim.swa_utils.SWALR: anneals each group's rate to its swa_lr over
/// anneal_epochs steps and holds it there, for Stochastic Weight Averaging's
/// last epochs (train::WeightAveraging with average "swa"). Like PyTorch's,
/// it reads the optimizer's current rates at each step (undoing its own
/// last mix), so it can take over from another schedule.
class SWALR final : public LRScheduler {
 public:
  /// Validates `options` (`hotloop::ConfigError` naming the bad option).
  SWALR(torch::optim::Optimizer& optimizer, SWALROptions options);

  const SWALROptions& options() const {
    return options_;
  }

 protected:
  void advance(std::optional<double> metric) override;
  std::vector<double> compute_lr() override;

 private:
  /// The rates at `step` from the rates `lrs` of step - 1.
  std::vector<double> anneal(std::vector<double> lrs, int64_t step) const;

  SWALROptions options_;
  std::vector<double> swa_lrs_;
};

/// Linear warmup in front of any schedule: for `warmup_steps` steps the
/// rate rises linearly from start_factor * target to the target, where the
/// target is the wrapped schedule's step-0 rate; then the wrapped schedule
/// runs from its step 0. Equals PyTorch's
/// `SequentialLR([LinearLR(start_factor, 1.0, warmup_steps), inner],
/// milestones=[warmup_steps])`. A null `inner` keeps the target rate after
/// warmup. During warmup the metric of `step(metric)` is ignored.
class LinearWarmup final : public LRScheduler {
 public:
  /// `inner` must be bound to `optimizer` and not yet stepped. Requires
  /// warmup_steps > 0 and start_factor in (0, 1] (else
  /// `hotloop::ConfigError`).
  LinearWarmup(
      torch::optim::Optimizer& optimizer,
      std::unique_ptr<LRScheduler> inner,
      int64_t warmup_steps,
      double start_factor = 1.0 / 3);

  bool needs_metric() const override;

  /// The wrapped schedule, or null.
  const LRScheduler* inner() const;

  int64_t warmup_steps() const;

  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 protected:
  void advance(std::optional<double> metric) override;
  std::vector<double> compute_lr() override;
  void reset_state() override;

 private:
  std::unique_ptr<LRScheduler> inner_;
  int64_t warmup_steps_;
  double start_factor_;
};

} // namespace hotloop::optim
