#include "hotloop/train/early_stopping.h"

#include "hotloop/core/error.h"
#include "hotloop/train/trainer.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <sstream>

namespace hotloop::train {

EarlyStopping::EarlyStopping(EarlyStoppingOptions options)
    : options_(std::move(options)) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      !options_.monitor().empty(),
      "early_stopping.monitor must name a metric");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.mode() == "min" || options_.mode() == "max",
      "early_stopping.mode: expected min or max, got '",
      options_.mode(),
      "'");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.patience() >= 1,
      "early_stopping.patience must be >= 1, got ",
      options_.patience());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.min_delta() >= 0,
      "early_stopping.min_delta must be >= 0, got ",
      options_.min_delta());
  best_score_ = options_.mode() == "min" ? INFINITY : -INFINITY;
}

std::string EarlyStopping::required_metric() const {
  return options_.strict() ? options_.monitor() : std::string();
}

std::string EarlyStopping::state_key() const {
  return hotloop::detail::str_cat(
      "EarlyStopping{monitor=",
      options_.monitor(),
      ",mode=",
      options_.mode(),
      "}");
}

bool EarlyStopping::better(double current, double reference) const {
  // Lightning's rule: an improvement must beat the reference by more than
  // min_delta.
  return options_.mode() == "min" ? current + options_.min_delta() < reference
                                  : current - options_.min_delta() > reference;
}

void EarlyStopping::on_validation_end(Trainer& trainer, Module& module) {
  if (!trainer.fitting()) {
    return; // Trainer::validate
  }
  check(trainer);
}

void EarlyStopping::on_train_epoch_end(Trainer& trainer, Module& module) {
  if (!trainer.has_validation()) {
    check(trainer);
  }
}

void EarlyStopping::check(Trainer& trainer) {
  const auto& metrics = trainer.callback_metrics();
  const auto found = metrics.find(options_.monitor());
  if (found == metrics.end()) {
    std::string names;
    for (const auto& [name, value] : metrics) {
      names += (names.empty() ? "" : ", ") + name;
    }
    HOTLOOP_CHECK_AS(
        ConfigError,
        !options_.strict(),
        "EarlyStopping monitors '",
        options_.monitor(),
        "', which no step logged (logged: ",
        names.empty() ? "none" : names,
        "); set early_stopping.strict=false to skip the check");
    return;
  }
  const double current = found->second;
  const bool minimize = options_.mode() == "min";
  std::ostringstream why;
  if (options_.check_finite() && !std::isfinite(current)) {
    why << "monitored metric " << options_.monitor() << " = " << current
        << " is not finite; previous best " << best_score_;
  } else if (
      options_.stopping_threshold() &&
      (minimize ? current < *options_.stopping_threshold()
                : current > *options_.stopping_threshold())) {
    why << "stopping threshold reached: " << options_.monitor() << " = "
        << current << (minimize ? " < " : " > ")
        << *options_.stopping_threshold();
  } else if (
      options_.divergence_threshold() &&
      (minimize ? current > *options_.divergence_threshold()
                : current < *options_.divergence_threshold())) {
    why << "divergence threshold reached: " << options_.monitor() << " = "
        << current << (minimize ? " > " : " < ")
        << *options_.divergence_threshold();
  } else if (better(current, best_score_)) {
    best_score_ = current;
    wait_count_ = 0;
  } else if (++wait_count_ >= options_.patience()) {
    why << "monitored metric " << options_.monitor() << " did not improve in "
        << "the last " << wait_count_ << " records; best " << best_score_;
  }
  if (!why.str().empty()) {
    reason_ = why.str();
    stopped_epoch_ = trainer.current_epoch();
    trainer.should_stop(true);
    if (options_.verbose()) {
      trainer.out() << "early stopping: " << reason_ << "\n";
    }
  }
}

nlohmann::json EarlyStopping::state_dict() const {
  return {
      {"wait_count", wait_count_},
      {"stopped_epoch", stopped_epoch_},
      {"best_score", best_score_},
      {"patience", options_.patience()},
  };
}

void EarlyStopping::load_state_dict(const nlohmann::json& state) {
  wait_count_ = state.value("wait_count", int64_t{0});
  stopped_epoch_ = state.value("stopped_epoch", int64_t{0});
  // JSON has no infinities: an unset best comes back as null.
  const auto& best = state.value("best_score", nlohmann::json());
  if (best.is_number()) {
    best_score_ = best.get<double>();
  }
}

} // namespace hotloop::train
