#include "hotloop/train/lr_finder.h"

#include "hotloop/core/error.h"
#include "hotloop/train/callback.h"
#include "hotloop/train/checkpoint.h"
#include "hotloop/train/detail/trial.h"
#include "hotloop/train/trainer.h"

#include <ATen/ATen.h>

#include <cmath>
#include <iomanip>
#include <limits>
#include <memory>
#include <ostream>

namespace hotloop::train {
namespace {

// Lightning's _LRCallback smooths with this.
constexpr double kBeta = 0.98;

// Sets every parameter group's rate before each optimizer step and records
// the loss after it.
class RangeTest : public Callback {
 public:
  RangeTest(LrFinder& finder, std::ostream* out) : finder_(finder), out_(out) {}

  std::string state_key() const override {
    return "LrFinder";
  }

  void on_fit_start(Trainer& trainer, Module&) override {
    start_step_ = trainer.global_step();
  }

  void on_before_optimizer_step(
      Trainer& trainer, Module&, torch::optim::Optimizer& optimizer) override {
    lr_ = finder_.lr_at(trainer.global_step() - start_step_);
    for (auto& group : optimizer.param_groups()) {
      group.options().set_lr(lr_);
    }
  }

  void on_train_batch_end(
      Trainer& trainer,
      Module&,
      const at::Tensor& loss,
      const data::Batch&,
      int64_t) override {
    const int64_t step = trainer.global_step() - start_step_;
    if (step == recorded_) {
      return; // a micro-batch before the step
    }
    recorded_ = step;
    if (finder_.record(lr_, loss.item<double>())) {
      trainer.should_stop(true);
    }
    if (out_ != nullptr && (step % 10 == 0 || trainer.should_stop())) {
      *out_ << "lr_find: step " << step << "/"
            << finder_.options().num_training() << "  lr " << std::scientific
            << std::setprecision(2) << lr_ << "  loss " << std::defaultfloat
            << std::setprecision(4) << finder_.losses().back() << "\n";
    }
  }

 private:
  LrFinder& finder_;
  std::ostream* out_;
  int64_t start_step_ = 0;
  int64_t recorded_ = 0;
  double lr_ = 0;
};

} // namespace

LrFinder::LrFinder(LrFinderOptions options) : options_(std::move(options)) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.min_lr() > 0 && options_.max_lr() > options_.min_lr(),
      "lr_find: expected 0 < min_lr < max_lr, got min_lr=",
      options_.min_lr(),
      " and max_lr=",
      options_.max_lr());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.num_training() >= 2,
      "lr_find: num_training must be at least 2, got ",
      options_.num_training());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.mode() == "exponential" || options_.mode() == "linear",
      "lr_find: mode must be exponential or linear, got '",
      options_.mode(),
      "'");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.early_stop_threshold() >= 0,
      "lr_find: early_stop_threshold must be >= 0 (0: off), got ",
      options_.early_stop_threshold());
}

double LrFinder::lr_at(int64_t step) const {
  const double min_lr = options_.min_lr();
  if (step <= 0) {
    return min_lr;
  }
  // Lightning's schedulers: r = (last_epoch + 1) / num_iter after the
  // first step, so the second step is already at r = 2 / num_iter.
  const double r = static_cast<double>(step + 1) /
                   static_cast<double>(options_.num_training());
  if (options_.mode() == "linear") {
    return min_lr + r * (options_.max_lr() - min_lr);
  }
  return min_lr * std::pow(options_.max_lr() / min_lr, r);
}

bool LrFinder::record(double lr, double loss) {
  lrs_.push_back(lr);
  const auto step = static_cast<double>(lrs_.size()); // global_step after it
  average_ = kBeta * average_ + (1 - kBeta) * loss;
  const double smoothed = average_ / (1 - std::pow(kBeta, step + 1));
  losses_.push_back(smoothed);
  const bool diverged = options_.early_stop_threshold() > 0 && step > 1 &&
                        smoothed > options_.early_stop_threshold() * best_;
  if (smoothed < best_ || step == 1) {
    best_ = smoothed;
  }
  return diverged || !std::isfinite(loss);
}

std::optional<int64_t> LrFinder::suggestion_index(
    int64_t skip_begin, int64_t skip_end) const {
  std::vector<float> losses;
  std::vector<float> lrs;
  std::vector<int64_t> index;
  const auto end = static_cast<int64_t>(losses_.size()) - skip_end;
  for (int64_t i = std::max<int64_t>(skip_begin, 0); i < end; ++i) {
    // As Lightning: float32 tensors, non-finite losses left out.
    const auto loss = static_cast<float>(losses_[i]);
    if (std::isfinite(loss)) {
      losses.push_back(loss);
      lrs.push_back(static_cast<float>(lrs_[i]));
      index.push_back(i);
    }
  }
  if (losses.size() < 2) {
    return std::nullopt;
  }
  const auto n = static_cast<int64_t>(losses.size());
  const at::Tensor spacing = at::from_blob(lrs.data(), {n}, at::kFloat);
  const at::Tensor gradients = at::gradient(
      at::from_blob(losses.data(), {n}, at::kFloat),
      at::TensorList(spacing),
      c10::optional<int64_t>(0))[0];
  return index[gradients.argmin().item<int64_t>()];
}

std::optional<double> LrFinder::suggestion(
    int64_t skip_begin, int64_t skip_end) const {
  const std::optional<int64_t> at = suggestion_index(skip_begin, skip_end);
  return at ? std::optional<double>(lrs_[*at]) : std::nullopt;
}

void LrFinder::write_csv(const std::string& path) const {
  const std::optional<int64_t> suggested = suggestion_index();
  write_file_atomically(path, [&](std::ostream& out) {
    out << "step,lr,loss,suggested\n" << std::setprecision(17);
    for (size_t i = 0; i < lrs_.size(); ++i) {
      out << i << "," << lrs_[i] << "," << losses_[i] << ","
          << (suggested && *suggested == static_cast<int64_t>(i) ? 1 : 0)
          << "\n";
    }
  });
}

LrFinder lr_find(
    Module& module,
    data::DataLoader& train,
    TrainerOptions trainer,
    LrFinderOptions options,
    std::ostream* out) {
  LrFinder finder(std::move(options));
  HOTLOOP_CHECK_AS(
      ConfigError,
      trainer.fast_dev_run() == 0,
      "lr_find: trainer.fast_dev_run runs a few batches only; turn it off "
      "to search for a learning rate");
  detail::ModuleSnapshot snapshot(module);
  // The test's own rates decide; a non-finite loss ends it (record).
  trainer = detail::trial_options(
                std::move(trainer), finder.options().num_training(), train)
                .on_nonfinite_loss("ignore");
  std::ostream quiet(nullptr);
  try {
    Trainer run(trainer, quiet);
    run.add_callback(std::make_shared<RangeTest>(finder, out));
    run.fit(module, train);
  } catch (...) {
    snapshot.restore();
    throw;
  }
  snapshot.restore();
  if (out != nullptr) {
    const std::optional<double> lr = finder.suggestion();
    *out << "lr_find: "
         << hotloop::detail::counted(
                static_cast<int64_t>(finder.lrs().size()), "step")
         << (finder.stopped_early() ? " (stopped early: the loss diverged)"
                                    : "")
         << "; suggested learning rate ";
    if (lr) {
      *out << std::setprecision(3) << *lr << std::defaultfloat << "\n";
    } else {
      *out << "none (too few finite points: raise num_training)\n";
    }
  }
  return finder;
}

} // namespace hotloop::train
