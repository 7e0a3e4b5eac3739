#include "hotloop/train/timer.h"

#include "hotloop/core/error.h"
#include "hotloop/train/trainer.h"

#include <nlohmann/json.hpp>

namespace hotloop::train {

using Clock = std::chrono::steady_clock;

Timer::Timer(double duration, std::string interval, bool verbose)
    : duration_(duration), interval_(std::move(interval)), verbose_(verbose) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      duration_ > 0,
      "Timer duration (trainer.max_time) must be positive seconds, got ",
      duration_);
  HOTLOOP_CHECK_AS(
      ConfigError,
      interval_ == "step" || interval_ == "epoch",
      "Timer interval: expected step or epoch, got '",
      interval_,
      "'");
}

double Timer::time_elapsed() const {
  if (!start_) {
    return offset_;
  }
  const Clock::time_point end = end_ ? *end_ : Clock::now();
  return offset_ + std::chrono::duration<double>(end - *start_).count();
}

void Timer::on_fit_start(Trainer& trainer, Module& module) {
  start_ = Clock::now();
  end_.reset();
}

void Timer::on_fit_end(Trainer& trainer, Module& module) {
  end_ = Clock::now();
}

void Timer::on_train_batch_end(
    Trainer& trainer,
    Module& module,
    const at::Tensor& loss,
    const data::Batch& batch,
    int64_t batch_idx) {
  if (interval_ == "step") {
    check(trainer);
  }
}

void Timer::on_train_epoch_end(Trainer& trainer, Module& module) {
  if (interval_ == "epoch") {
    check(trainer);
  }
}

void Timer::check(Trainer& trainer) {
  if (!trainer.should_stop() && time_elapsed() >= duration_) {
    trainer.should_stop(true);
    if (verbose_) {
      trainer.out() << "time limit reached: " << time_elapsed() << " s of "
                    << duration_ << " s; stopping\n";
    }
  }
}

nlohmann::json Timer::state_dict() const {
  return {{"time_elapsed", {{"train", time_elapsed()}}}};
}

void Timer::load_state_dict(const nlohmann::json& state) {
  const auto elapsed = state.value("time_elapsed", nlohmann::json::object());
  offset_ = elapsed.value("train", 0.0);
  start_.reset();
  end_.reset();
}

} // namespace hotloop::train
