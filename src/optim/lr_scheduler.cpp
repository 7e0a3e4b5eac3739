#include "hotloop/optim/lr_scheduler.h"

#include "hotloop/core/error.h"

#include <c10/util/ArrayRef.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

namespace hotloop::optim {
namespace {

constexpr double kPi = 3.14159265358979323846;

// Each of `rates` times `factor`: most closed forms' rates.
std::vector<double> times(const std::vector<double>& rates, double factor) {
  std::vector<double> out;
  for (double rate : rates) {
    out.push_back(rate * factor);
  }
  return out;
}

void check_positive(const char* option, double value) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      value > 0,
      "lr_scheduler.",
      option,
      " must be positive, got ",
      value);
}

void check_non_negative(const char* option, double value) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      value >= 0,
      "lr_scheduler.",
      option,
      " must be non-negative, got ",
      value);
}

// The momentum OneCycleLR cycles: SGD/RMSprop `momentum`, Adam/AdamW
// `betas[0]` (PyTorch's `use_beta1`). Returns false if the group has none.
bool set_momentum(torch::optim::OptimizerOptions& options, double value) {
  if (auto* sgd = dynamic_cast<torch::optim::SGDOptions*>(&options)) {
    sgd->momentum(value);
  } else if (
      auto* rms = dynamic_cast<torch::optim::RMSpropOptions*>(&options)) {
    rms->momentum(value);
  } else if (auto* adam = dynamic_cast<torch::optim::AdamOptions*>(&options)) {
    adam->betas(std::make_tuple(value, std::get<1>(adam->betas())));
  } else if (
      auto* adamw = dynamic_cast<torch::optim::AdamWOptions*>(&options)) {
    adamw->betas(std::make_tuple(value, std::get<1>(adamw->betas())));
  } else {
    return false;
  }
  return true;
}

bool has_momentum(const torch::optim::OptimizerOptions& options) {
  return dynamic_cast<const torch::optim::SGDOptions*>(&options) ||
         dynamic_cast<const torch::optim::RMSpropOptions*>(&options) ||
         dynamic_cast<const torch::optim::AdamOptions*>(&options) ||
         dynamic_cast<const torch::optim::AdamWOptions*>(&options);
}

c10::IValue read_value(
    torch::serialize::InputArchive& archive, const std::string& key) {
  c10::IValue value;
  archive.read(key, value);
  return value;
}

} // namespace

std::vector<double> group_lrs(const torch::optim::Optimizer& optimizer) {
  std::vector<double> lrs;
  for (const auto& group : optimizer.param_groups()) {
    lrs.push_back(group.options().get_lr());
  }
  return lrs;
}

// ---------------------------------------------------------------------------
// LRScheduler

LRScheduler::LRScheduler(torch::optim::Optimizer& optimizer, std::string name)
    : optimizer_(&optimizer),
      name_(std::move(name)),
      base_lrs_(group_lrs(optimizer)),
      last_lr_(base_lrs_) {}

void LRScheduler::step() {
  HOTLOOP_CHECK(
      !needs_metric(),
      name_,
      " watches a metric: call step(metric) with the monitored value");
  advance(std::nullopt);
}

void LRScheduler::step(double metric) {
  advance(metric);
}

bool LRScheduler::needs_metric() const {
  return false;
}

void LRScheduler::restart() {
  reset_state();
  last_epoch_ = 0;
  apply_lr(compute_lr());
}

const std::vector<double>& LRScheduler::last_lr() const {
  return last_lr_;
}

int64_t LRScheduler::last_epoch() const {
  return last_epoch_;
}

const std::vector<double>& LRScheduler::base_lrs() const {
  return base_lrs_;
}

const std::string& LRScheduler::name() const {
  return name_;
}

torch::optim::Optimizer& LRScheduler::optimizer() const {
  return *optimizer_;
}

void LRScheduler::save(torch::serialize::OutputArchive& archive) const {
  archive.write("kind", c10::IValue(name_));
  archive.write("last_epoch", c10::IValue(last_epoch_));
  archive.write("base_lrs", c10::IValue(base_lrs_));
  archive.write("last_lr", c10::IValue(last_lr_));
}

void LRScheduler::load(torch::serialize::InputArchive& archive) {
  const std::string kind = read_value(archive, "kind").toStringRef();
  HOTLOOP_CHECK_AS(
      ConfigError,
      kind == name_,
      "lr_scheduler: the saved state is for ",
      kind,
      ", but the configured schedule is ",
      name_);
  const int64_t last_epoch = read_value(archive, "last_epoch").toInt();
  std::vector<double> base_lrs =
      read_value(archive, "base_lrs").toDoubleVector();
  std::vector<double> last_lr = read_value(archive, "last_lr").toDoubleVector();
  const size_t groups = optimizer_->param_groups().size();
  HOTLOOP_CHECK_AS(
      ConfigError,
      base_lrs.size() == groups && last_lr.size() == groups,
      "lr_scheduler: the saved ",
      name_,
      " state has ",
      base_lrs.size(),
      " param groups, but the optimizer has ",
      groups);
  last_epoch_ = last_epoch;
  base_lrs_ = std::move(base_lrs);
  apply_lr(last_lr);
}

void LRScheduler::advance(std::optional<double> /*metric*/) {
  ++last_epoch_;
  apply_lr(compute_lr());
}

void LRScheduler::reset_state() {}

void LRScheduler::apply_lr(const std::vector<double>& lrs) {
  auto& groups = optimizer_->param_groups();
  HOTLOOP_CHECK(
      lrs.size() == groups.size(),
      name_,
      " was built for ",
      lrs.size(),
      " param groups, but the optimizer now has ",
      groups.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    groups[i].options().set_lr(lrs[i]);
  }
  last_lr_ = lrs;
}

void LRScheduler::set_base_lrs(std::vector<double> lrs) {
  base_lrs_ = std::move(lrs);
}

void LRScheduler::set_last_epoch(int64_t epoch) {
  last_epoch_ = epoch;
}

// ---------------------------------------------------------------------------
// Closed-form schedules

StepLR::StepLR(
    torch::optim::Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer, "StepLR"), step_size_(step_size), gamma_(gamma) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      step_size > 0,
      "lr_scheduler.step_size must be positive, got ",
      step_size);
  check_positive("gamma", gamma);
  restart();
}

std::vector<double> StepLR::compute_lr() {
  // Integer division on purpose: PyTorch's `last_epoch // step_size`.
  const int64_t decays = last_epoch() / step_size_;
  const double scale = std::pow(gamma_, static_cast<double>(decays));
  return times(base_lrs(), scale);
}

MultiStepLR::MultiStepLR(
    torch::optim::Optimizer& optimizer,
    std::vector<int64_t> milestones,
    double gamma)
    : LRScheduler(optimizer, "MultiStepLR"),
      milestones_(std::move(milestones)),
      gamma_(gamma) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      !milestones_.empty(),
      "lr_scheduler.milestones must not be empty");
  for (size_t i = 0; i < milestones_.size(); ++i) {
    HOTLOOP_CHECK_AS(
        ConfigError,
        milestones_[i] > 0,
        "lr_scheduler.milestones must be positive, got ",
        c10::IntArrayRef(milestones_));
    HOTLOOP_CHECK_AS(
        ConfigError,
        i == 0 || milestones_[i] > milestones_[i - 1],
        "lr_scheduler.milestones must be strictly increasing, got ",
        c10::IntArrayRef(milestones_));
  }
  check_positive("gamma", gamma);
  restart();
}

std::vector<double> MultiStepLR::compute_lr() {
  const auto passed =
      std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch()) -
      milestones_.begin();
  const double scale = std::pow(gamma_, static_cast<double>(passed));
  return times(base_lrs(), scale);
}

ExponentialLR::ExponentialLR(torch::optim::Optimizer& optimizer, double gamma)
    : LRScheduler(optimizer, "ExponentialLR"), gamma_(gamma) {
  check_positive("gamma", gamma);
  restart();
}

std::vector<double> ExponentialLR::compute_lr() {
  const double scale = std::pow(gamma_, static_cast<double>(last_epoch()));
  return times(base_lrs(), scale);
}

CosineAnnealingLR::CosineAnnealingLR(
    torch::optim::Optimizer& optimizer, int64_t t_max, double eta_min)
    : LRScheduler(optimizer, "CosineAnnealingLR"),
      t_max_(t_max),
      eta_min_(eta_min) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      t_max > 0,
      "lr_scheduler.t_max must be positive, got ",
      t_max);
  check_non_negative("eta_min", eta_min);
  restart();
}

std::vector<double> CosineAnnealingLR::compute_lr() {
  const double cosine = 1 + std::cos(
                                kPi * static_cast<double>(last_epoch()) /
                                static_cast<double>(t_max_));
  std::vector<double> lrs;
  for (double base : base_lrs()) {
    lrs.push_back(eta_min_ + (base - eta_min_) * cosine / 2);
  }
  return lrs;
}

CosineAnnealingWarmRestarts::CosineAnnealingWarmRestarts(
    torch::optim::Optimizer& optimizer,
    int64_t t_0,
    int64_t t_mult,
    double eta_min)
    : LRScheduler(optimizer, "CosineAnnealingWarmRestarts"),
      t_0_(t_0),
      t_mult_(t_mult),
      eta_min_(eta_min) {
  HOTLOOP_CHECK_AS(
      ConfigError, t_0 > 0, "lr_scheduler.t_0 must be positive, got ", t_0);
  HOTLOOP_CHECK_AS(
      ConfigError,
      t_mult >= 1,
      "lr_scheduler.t_mult must be at least 1, got ",
      t_mult);
  check_non_negative("eta_min", eta_min);
  restart();
}

std::vector<double> CosineAnnealingWarmRestarts::compute_lr() {
  // PyTorch advances T_cur by one a step and, on reaching T_i, subtracts
  // T_i and multiplies T_i by T_mult; the same in closed form.
  int64_t t_cur = last_epoch();
  int64_t t_i = t_0_;
  if (t_mult_ == 1) {
    t_cur %= t_0_;
  } else {
    while (t_cur >= t_i) {
      t_cur -= t_i;
      t_i *= t_mult_;
    }
  }
  const double cosine =
      1 + std::cos(kPi * static_cast<double>(t_cur) / static_cast<double>(t_i));
  std::vector<double> lrs;
  for (double base : base_lrs()) {
    lrs.push_back(eta_min_ + (base - eta_min_) * cosine / 2);
  }
  return lrs;
}

PolynomialLR::PolynomialLR(
    torch::optim::Optimizer& optimizer, int64_t total_iters, double power)
    : LRScheduler(optimizer, "PolynomialLR"),
      total_iters_(total_iters),
      power_(power) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      total_iters > 0,
      "lr_scheduler.total_iters must be positive, got ",
      total_iters);
  check_non_negative("power", power);
  restart();
}

std::vector<double> PolynomialLR::compute_lr() {
  const double progress =
      static_cast<double>(std::min(total_iters_, last_epoch())) /
      static_cast<double>(total_iters_);
  const double scale = std::pow(1.0 - progress, power_);
  return times(base_lrs(), scale);
}

namespace {

// One lambda for every group, or one per group.
std::vector<LrLambda> lambdas_per_group(
    std::vector<LrLambda> lambdas,
    const torch::optim::Optimizer& optimizer,
    const char* schedule) {
  const size_t groups = optimizer.param_groups().size();
  HOTLOOP_CHECK_AS(
      ConfigError,
      lambdas.size() == groups,
      schedule,
      " was given ",
      lambdas.size(),
      " lambdas, but the optimizer has ",
      groups,
      " param groups");
  for (const LrLambda& lambda : lambdas) {
    HOTLOOP_CHECK_AS(
        ConfigError,
        static_cast<bool>(lambda),
        schedule,
        ": a lambda is empty");
  }
  return lambdas;
}

// `values` for each param group: one value for all, or one per group.
std::vector<double> values_per_group(
    const char* option,
    const std::vector<double>& values,
    const torch::optim::Optimizer& optimizer) {
  const size_t groups = optimizer.param_groups().size();
  HOTLOOP_CHECK_AS(
      ConfigError,
      values.size() == 1 || values.size() == groups,
      "lr_scheduler.",
      option,
      " has ",
      values.size(),
      " values, but the optimizer has ",
      groups,
      " param groups");
  for (double value : values) {
    check_non_negative(option, value);
  }
  return values.size() == 1 ? std::vector<double>(groups, values[0]) : values;
}

void check_momenta(double base_momentum, double max_momentum) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      base_momentum >= 0 && base_momentum < 1,
      "lr_scheduler.base_momentum must be in [0, 1), got ",
      base_momentum);
  HOTLOOP_CHECK_AS(
      ConfigError,
      max_momentum >= 0 && max_momentum < 1,
      "lr_scheduler.max_momentum must be in [0, 1), got ",
      max_momentum);
}

void check_has_momentum(const torch::optim::Optimizer& optimizer) {
  for (const auto& group : optimizer.param_groups()) {
    HOTLOOP_CHECK_AS(
        ConfigError,
        has_momentum(group.options()),
        "lr_scheduler.cycle_momentum needs an optimizer with momentum or "
        "betas (sgd, rmsprop, adam, adamw); set it to false");
  }
}

} // namespace

ConstantLR::ConstantLR(
    torch::optim::Optimizer& optimizer, double factor, int64_t total_iters)
    : LRScheduler(optimizer, "ConstantLR"),
      factor_(factor),
      total_iters_(total_iters) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      factor > 0 && factor <= 1,
      "lr_scheduler.factor must be in (0, 1] for constant, got ",
      factor);
  HOTLOOP_CHECK_AS(
      ConfigError,
      total_iters >= 0,
      "lr_scheduler.total_iters must be non-negative, got ",
      total_iters);
  HOTLOOP_CHECK_AS(
      ConfigError,
      total_iters > 0 || factor == 1,
      "lr_scheduler.total_iters: constant with factor ",
      factor,
      " needs at least one step at it, got 0 (PyTorch's ConstantLR would "
      "hold the factor for ever, its closed form never)");
  restart();
}

std::vector<double> ConstantLR::compute_lr() {
  return times(base_lrs(), last_epoch() < total_iters_ ? factor_ : 1.0);
}

LinearLR::LinearLR(
    torch::optim::Optimizer& optimizer,
    double start_factor,
    double end_factor,
    int64_t total_iters)
    : LRScheduler(optimizer, "LinearLR"),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_iters_(total_iters) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      start_factor > 0 && start_factor <= 1,
      "lr_scheduler.start_factor must be in (0, 1], got ",
      start_factor);
  HOTLOOP_CHECK_AS(
      ConfigError,
      end_factor >= 0 && end_factor <= 1,
      "lr_scheduler.end_factor must be in [0, 1], got ",
      end_factor);
  HOTLOOP_CHECK_AS(
      ConfigError,
      total_iters > 0,
      "lr_scheduler.total_iters must be positive, got ",
      total_iters);
  restart();
}

std::vector<double> LinearLR::compute_lr() {
  const double progress =
      static_cast<double>(std::min(total_iters_, last_epoch())) /
      static_cast<double>(total_iters_);
  return times(
      base_lrs(), start_factor_ + (end_factor_ - start_factor_) * progress);
}

LambdaLR::LambdaLR(torch::optim::Optimizer& optimizer, LrLambda lambda)
    : LambdaLR(
          optimizer,
          std::vector<LrLambda>(optimizer.param_groups().size(), lambda)) {}

LambdaLR::LambdaLR(
    torch::optim::Optimizer& optimizer, std::vector<LrLambda> lambdas)
    : LRScheduler(optimizer, "LambdaLR"),
      lambdas_(lambdas_per_group(std::move(lambdas), optimizer, "LambdaLR")) {
  restart();
}

std::vector<double> LambdaLR::compute_lr() {
  std::vector<double> lrs;
  for (size_t g = 0; g < lambdas_.size(); ++g) {
    lrs.push_back(base_lrs()[g] * lambdas_[g](last_epoch()));
  }
  return lrs;
}

MultiplicativeLR::MultiplicativeLR(
    torch::optim::Optimizer& optimizer, LrLambda lambda)
    : MultiplicativeLR(
          optimizer,
          std::vector<LrLambda>(optimizer.param_groups().size(), lambda)) {}

MultiplicativeLR::MultiplicativeLR(
    torch::optim::Optimizer& optimizer, std::vector<LrLambda> lambdas)
    : LRScheduler(optimizer, "MultiplicativeLR"),
      lambdas_(lambdas_per_group(
          std::move(lambdas), optimizer, "MultiplicativeLR")) {
  restart();
}

std::vector<double> MultiplicativeLR::compute_lr() {
  return base_lrs(); // step 0; each later step multiplies the current rates
}

void MultiplicativeLR::advance(std::optional<double> /*metric*/) {
  std::vector<double> lrs = group_lrs(optimizer());
  HOTLOOP_CHECK(
      lrs.size() == lambdas_.size(),
      "MultiplicativeLR was built for ",
      lambdas_.size(),
      " param groups, but the optimizer now has ",
      lrs.size());
  const int64_t epoch = last_epoch() + 1;
  for (size_t g = 0; g < lrs.size(); ++g) {
    lrs[g] *= lambdas_[g](epoch);
  }
  set_last_epoch(epoch);
  apply_lr(lrs);
}

// ---------------------------------------------------------------------------
// SWALR

SWALROptions::SWALROptions(double swa_lr) : swa_lr_({swa_lr}) {}

SWALROptions::SWALROptions(std::vector<double> swa_lr)
    : swa_lr_(std::move(swa_lr)) {}

SWALR::SWALR(torch::optim::Optimizer& optimizer, SWALROptions options)
    : LRScheduler(optimizer, "SWALR"),
      options_(std::move(options)),
      swa_lrs_(values_per_group("swa_lr", options_.swa_lr(), optimizer)) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.anneal_epochs() >= 0,
      "lr_scheduler.anneal_epochs must be >= 0, got ",
      options_.anneal_epochs());
  restart();
}

std::vector<double> SWALR::anneal(std::vector<double> lrs, int64_t step) const {
  // PyTorch's get_lr, term for term: undo the last mix, then mix anew.
  if (options_.anneal_epochs() == 0) {
    step = std::max<int64_t>(1, step);
  }
  const auto mix = [&](int64_t at) {
    const double t = std::max(
        0.0,
        std::min(
            1.0,
            static_cast<double>(at) / static_cast<double>(std::max<int64_t>(
                                          1, options_.anneal_epochs()))));
    return options_.anneal_strategy() == AnnealStrategy::kCos
               ? (1 - std::cos(kPi * t)) / 2
               : t;
  };
  const double previous = mix(step - 1);
  const double alpha = mix(step);
  for (size_t g = 0; g < lrs.size(); ++g) {
    const double initial =
        previous == 1 ? swa_lrs_[g]
                      : (lrs[g] - previous * swa_lrs_[g]) / (1 - previous);
    lrs[g] = swa_lrs_[g] * alpha + initial * (1 - alpha);
  }
  return lrs;
}

std::vector<double> SWALR::compute_lr() {
  return anneal(base_lrs(), 0); // step 0
}

void SWALR::advance(std::optional<double> /*metric*/) {
  std::vector<double> lrs = group_lrs(optimizer());
  HOTLOOP_CHECK(
      lrs.size() == swa_lrs_.size(),
      "SWALR was built for ",
      swa_lrs_.size(),
      " param groups, but the optimizer now has ",
      lrs.size());
  const int64_t step = last_epoch() + 1;
  set_last_epoch(step);
  apply_lr(anneal(std::move(lrs), step));
}

// ---------------------------------------------------------------------------
// CyclicLR

CyclicLROptions::CyclicLROptions(double base_lr, double max_lr)
    : base_lr_({base_lr}), max_lr_({max_lr}) {}

CyclicLROptions::CyclicLROptions(
    std::vector<double> base_lr, std::vector<double> max_lr)
    : base_lr_(std::move(base_lr)), max_lr_(std::move(max_lr)) {}

CyclicLR::CyclicLR(torch::optim::Optimizer& optimizer, CyclicLROptions options)
    : LRScheduler(optimizer, "CyclicLR"), options_(std::move(options)) {
  const auto& o = options_;
  std::vector<double> base_lrs =
      values_per_group("base_lr", o.base_lr(), optimizer);
  max_lrs_ = values_per_group("max_lr", o.max_lr(), optimizer);
  HOTLOOP_CHECK_AS(
      ConfigError,
      o.step_size_up() > 0,
      "lr_scheduler.step_size_up must be positive, got ",
      o.step_size_up());
  HOTLOOP_CHECK_AS(
      ConfigError,
      o.step_size_down().value_or(0) >= 0,
      "lr_scheduler.step_size_down must be non-negative, got ",
      o.step_size_down().value_or(0));
  check_positive("gamma", o.gamma());
  check_momenta(o.base_momentum(), o.max_momentum());
  if (o.cycle_momentum()) {
    check_has_momentum(optimizer);
  }
  set_base_lrs(std::move(base_lrs));
  restart();
}

const CyclicLROptions& CyclicLR::options() const {
  return options_;
}

void CyclicLR::load(torch::serialize::InputArchive& archive) {
  LRScheduler::load(archive);
  compute_lr(); // re-applies the momentum of the restored step
}

std::vector<double> CyclicLR::compute_lr() {
  // PyTorch's get_lr, term for term.
  const auto& o = options_;
  const auto up = static_cast<double>(o.step_size_up());
  const auto down =
      static_cast<double>(o.step_size_down().value_or(o.step_size_up()));
  const double total = up + down;
  const double ratio = up / total;
  const auto epoch = static_cast<double>(last_epoch());
  const double cycle = std::floor(1 + epoch / total);
  const double x = 1. + epoch / total - cycle;
  const double scale = x <= ratio ? x / ratio : (x - 1) / (ratio - 1);
  double amplitude = 1.0; // triangular
  if (o.mode() == CyclicMode::kTriangular2) {
    amplitude = 1 / std::pow(2.0, cycle - 1);
  } else if (o.mode() == CyclicMode::kExpRange) {
    amplitude = std::pow(o.gamma(), epoch);
  }
  auto& groups = optimizer().param_groups();
  std::vector<double> lrs;
  for (size_t g = 0; g < max_lrs_.size(); ++g) {
    const double height = (max_lrs_[g] - base_lrs()[g]) * scale;
    lrs.push_back(base_lrs()[g] + height * amplitude);
    if (o.cycle_momentum()) {
      const double momentum_height =
          (o.max_momentum() - o.base_momentum()) * scale;
      set_momentum(
          groups[g].options(), o.max_momentum() - momentum_height * amplitude);
    }
  }
  return lrs;
}

// ---------------------------------------------------------------------------
// OneCycleLR

OneCycleLROptions::OneCycleLROptions(double max_lr, int64_t total_steps)
    : max_lr_({max_lr}), total_steps_(total_steps) {}

OneCycleLROptions::OneCycleLROptions(
    std::vector<double> max_lr, int64_t total_steps)
    : max_lr_(std::move(max_lr)), total_steps_(total_steps) {}

namespace {
// Indices of OneCycleLR's rates and momenta within a phase.
constexpr int kInitialLr = 0;
constexpr int kMaxLr = 1;
constexpr int kMinLr = 2;
constexpr int kMaxMomentum = 0;
constexpr int kBaseMomentum = 1;
} // namespace

OneCycleLR::OneCycleLR(
    torch::optim::Optimizer& optimizer, OneCycleLROptions options)
    : LRScheduler(optimizer, "OneCycleLR"), options_(std::move(options)) {
  const auto& o = options_;
  const size_t groups = optimizer.param_groups().size();
  HOTLOOP_CHECK_AS(
      ConfigError,
      o.total_steps() > 0,
      "lr_scheduler.total_steps must be positive, got ",
      o.total_steps());
  HOTLOOP_CHECK_AS(
      ConfigError,
      o.max_lr().size() == 1 || o.max_lr().size() == groups,
      "lr_scheduler.max_lr has ",
      o.max_lr().size(),
      " values, but the optimizer has ",
      groups,
      " param groups");
  for (double max_lr : o.max_lr()) {
    check_positive("max_lr", max_lr);
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      o.pct_start() >= 0 && o.pct_start() <= 1,
      "lr_scheduler.pct_start must be in [0, 1], got ",
      o.pct_start());
  check_positive("div_factor", o.div_factor());
  check_positive("final_div_factor", o.final_div_factor());
  check_momenta(o.base_momentum(), o.max_momentum());
  if (o.cycle_momentum()) {
    check_has_momentum(optimizer);
  }

  const double total = static_cast<double>(o.total_steps());
  if (o.three_phase()) {
    phases_ = {
        {o.pct_start() * total - 1,
         kInitialLr,
         kMaxLr,
         kMaxMomentum,
         kBaseMomentum},
        {2 * o.pct_start() * total - 2,
         kMaxLr,
         kInitialLr,
         kBaseMomentum,
         kMaxMomentum},
        {total - 1, kInitialLr, kMinLr, kMaxMomentum, kMaxMomentum},
    };
  } else {
    phases_ = {
        {o.pct_start() * total - 1,
         kInitialLr,
         kMaxLr,
         kMaxMomentum,
         kBaseMomentum},
        {total - 1, kMaxLr, kMinLr, kBaseMomentum, kMaxMomentum},
    };
  }
  max_lrs_ = o.max_lr().size() == 1 ? std::vector<double>(groups, o.max_lr()[0])
                                    : o.max_lr();
  std::vector<double> initial_lrs;
  for (double max_lr : max_lrs_) {
    initial_lrs.push_back(max_lr / o.div_factor());
  }
  set_base_lrs(std::move(initial_lrs));
  restart();
}

const OneCycleLROptions& OneCycleLR::options() const {
  return options_;
}

void OneCycleLR::load(torch::serialize::InputArchive& archive) {
  LRScheduler::load(archive);
  compute_lr(); // re-applies the momentum of the restored step
}

void OneCycleLR::advance(std::optional<double> metric) {
  HOTLOOP_CHECK(
      last_epoch() < options_.total_steps(),
      "OneCycleLR was stepped ",
      last_epoch() + 1,
      " times, but lr_scheduler.total_steps is ",
      options_.total_steps());
  LRScheduler::advance(metric);
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (options_.anneal_strategy() == AnnealStrategy::kCos) {
    return end + (start - end) / 2.0 * (std::cos(kPi * pct) + 1);
  }
  return (end - start) * pct + start;
}

std::vector<double> OneCycleLR::compute_lr() {
  const auto step = static_cast<double>(last_epoch());
  // Same phase search as PyTorch's get_lr.
  double start_step = 0;
  const Phase* phase = &phases_.back();
  for (size_t i = 0; i < phases_.size(); ++i) {
    if (step <= phases_[i].end_step || i + 1 == phases_.size()) {
      phase = &phases_[i];
      break;
    }
    start_step = phases_[i].end_step;
  }
  // A zero-length first phase (pct_start * total_steps == 1) would divide
  // 0 by 0 (PyTorch raises); count it as finished.
  const double span = phase->end_step - start_step;
  const double pct = span == 0 ? 1.0 : (step - start_step) / span;

  const double momenta[] = {options_.max_momentum(), options_.base_momentum()};
  auto& groups = optimizer().param_groups();
  std::vector<double> lrs;
  for (size_t g = 0; g < max_lrs_.size(); ++g) {
    const double initial = base_lrs()[g];
    const double rates[] = {
        initial, max_lrs_[g], initial / options_.final_div_factor()};
    lrs.push_back(anneal(rates[phase->start_lr], rates[phase->end_lr], pct));
    if (options_.cycle_momentum()) {
      set_momentum(
          groups[g].options(),
          anneal(
              momenta[phase->start_momentum],
              momenta[phase->end_momentum],
              pct));
    }
  }
  return lrs;
}

// ---------------------------------------------------------------------------
// ReduceLROnPlateau

ReduceLROnPlateau::ReduceLROnPlateau(
    torch::optim::Optimizer& optimizer, ReduceLROnPlateauOptions options)
    : LRScheduler(optimizer, "ReduceLROnPlateau"), options_(options) {
  const auto& o = options_;
  HOTLOOP_CHECK_AS(
      ConfigError,
      o.factor() >= 0 && o.factor() < 1,
      "lr_scheduler.factor must be in [0, 1), got ",
      o.factor());
  HOTLOOP_CHECK_AS(
      ConfigError,
      o.patience() >= 0,
      "lr_scheduler.patience must be non-negative, got ",
      o.patience());
  check_non_negative("threshold", o.threshold());
  HOTLOOP_CHECK_AS(
      ConfigError,
      o.cooldown() >= 0,
      "lr_scheduler.cooldown must be non-negative, got ",
      o.cooldown());
  check_non_negative("min_lr", o.min_lr());
  check_non_negative("eps", o.eps());
  restart();
}

bool ReduceLROnPlateau::needs_metric() const {
  return true;
}

const ReduceLROnPlateauOptions& ReduceLROnPlateau::options() const {
  return options_;
}

double ReduceLROnPlateau::best() const {
  return best_;
}

int64_t ReduceLROnPlateau::num_bad_epochs() const {
  return num_bad_epochs_;
}

void ReduceLROnPlateau::save(torch::serialize::OutputArchive& archive) const {
  LRScheduler::save(archive);
  archive.write("best", c10::IValue(best_));
  archive.write("num_bad_epochs", c10::IValue(num_bad_epochs_));
  archive.write("cooldown_counter", c10::IValue(cooldown_counter_));
}

void ReduceLROnPlateau::load(torch::serialize::InputArchive& archive) {
  LRScheduler::load(archive);
  best_ = read_value(archive, "best").toDouble();
  num_bad_epochs_ = read_value(archive, "num_bad_epochs").toInt();
  cooldown_counter_ = read_value(archive, "cooldown_counter").toInt();
}

void ReduceLROnPlateau::reset_state() {
  best_ = options_.mode() == PlateauMode::kMin
              ? std::numeric_limits<double>::infinity()
              : -std::numeric_limits<double>::infinity();
  num_bad_epochs_ = 0;
  cooldown_counter_ = 0;
}

std::vector<double> ReduceLROnPlateau::compute_lr() {
  return base_lrs();
}

bool ReduceLROnPlateau::is_better(double value) const {
  const double threshold = options_.threshold();
  const bool rel = options_.threshold_mode() == ThresholdMode::kRel;
  if (options_.mode() == PlateauMode::kMin) {
    return rel ? value < best_ * (1.0 - threshold) : value < best_ - threshold;
  }
  return rel ? value > best_ * (threshold + 1.0) : value > best_ + threshold;
}

void ReduceLROnPlateau::advance(std::optional<double> metric) {
  TORCH_INTERNAL_ASSERT(metric.has_value());
  const double current = *metric;
  if (is_better(current)) {
    best_ = current;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0; // bad steps in cooldown do not count
  }
  std::vector<double> lrs = group_lrs(optimizer());
  if (num_bad_epochs_ > options_.patience()) {
    for (double& lr : lrs) {
      const double reduced =
          std::max(lr * options_.factor(), options_.min_lr());
      if (lr - reduced > options_.eps()) {
        lr = reduced;
      }
    }
    cooldown_counter_ = options_.cooldown();
    num_bad_epochs_ = 0;
  }
  set_last_epoch(last_epoch() + 1);
  apply_lr(lrs);
}

// ---------------------------------------------------------------------------
// LinearWarmup

LinearWarmup::LinearWarmup(
    torch::optim::Optimizer& optimizer,
    std::unique_ptr<LRScheduler> inner,
    int64_t warmup_steps,
    double start_factor)
    : LRScheduler(optimizer, "LinearWarmup"),
      inner_(std::move(inner)),
      warmup_steps_(warmup_steps),
      start_factor_(start_factor) {
  TORCH_CHECK(
      inner_ == nullptr || &inner_->optimizer() == &optimizer,
      "LinearWarmup: the wrapped schedule sets another optimizer");
  HOTLOOP_CHECK_AS(
      ConfigError,
      warmup_steps > 0,
      "lr_scheduler.warmup_steps must be positive, got ",
      warmup_steps);
  HOTLOOP_CHECK_AS(
      ConfigError,
      start_factor > 0 && start_factor <= 1,
      "lr_scheduler.warmup_start_factor must be in (0, 1], got ",
      start_factor);
  // The targets are the wrapped schedule's step-0 rates, which its
  // constructor applied: exactly what the base class captured.
  restart();
}

bool LinearWarmup::needs_metric() const {
  return inner_ != nullptr && inner_->needs_metric();
}

const LRScheduler* LinearWarmup::inner() const {
  return inner_.get();
}

int64_t LinearWarmup::warmup_steps() const {
  return warmup_steps_;
}

void LinearWarmup::save(torch::serialize::OutputArchive& archive) const {
  LRScheduler::save(archive);
  if (inner_ != nullptr) {
    torch::serialize::OutputArchive inner(archive.compilation_unit());
    inner_->save(inner);
    archive.write("inner", inner);
  }
}

void LinearWarmup::load(torch::serialize::InputArchive& archive) {
  LRScheduler::load(archive);
  if (inner_ != nullptr) {
    torch::serialize::InputArchive inner;
    HOTLOOP_CHECK_AS(
        ConfigError,
        archive.try_read("inner", inner),
        "lr_scheduler: the saved LinearWarmup state wraps no schedule, but "
        "the configured one wraps a ",
        inner_->name());
    inner_->load(inner);
    // The inner schedule re-applied its own rates; during warmup ours rule.
    apply_lr(last_lr());
  }
}

void LinearWarmup::reset_state() {
  if (inner_ != nullptr) {
    inner_->restart();
  }
}

std::vector<double> LinearWarmup::compute_lr() {
  // PyTorch's LinearLR closed form with end_factor 1 and
  // total_iters = warmup_steps; only used before the warmup ends.
  const double factor = start_factor_ + (1.0 - start_factor_) *
                                            static_cast<double>(last_epoch()) /
                                            static_cast<double>(warmup_steps_);
  return times(base_lrs(), factor);
}

void LinearWarmup::advance(std::optional<double> metric) {
  const int64_t epoch = last_epoch() + 1;
  if (epoch < warmup_steps_) {
    set_last_epoch(epoch);
    apply_lr(compute_lr());
    return;
  }
  if (inner_ == nullptr) {
    set_last_epoch(epoch);
    apply_lr(base_lrs());
    return;
  }
  // SequentialLR calls `step(0)` on the next schedule at its milestone.
  if (epoch == warmup_steps_) {
    inner_->restart();
  } else if (metric.has_value()) {
    inner_->step(*metric);
  } else {
    inner_->step();
  }
  set_last_epoch(epoch);
  apply_lr(inner_->last_lr());
}

} // namespace hotloop::optim
