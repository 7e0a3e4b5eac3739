#include "hotloop/train/trainer_options.h"

#include "hotloop/core/compat.h"
#include "hotloop/core/error.h"
#include "hotloop/train/precision.h"

#include <algorithm>
#include <cmath>

namespace hotloop::train {
namespace {

// Whether `limit` is a valid limit_* value: -1, 0 (when allowed), a
// fraction in (0, 1) or a whole number.
void check_limit(double limit, const char* name, bool zero_allowed) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      limit == -1 || (zero_allowed && limit == 0) ||
          (limit > 0 && (limit < 1 || limit == std::floor(limit))),
      "trainer.",
      name,
      ": expected -1 (all), ",
      zero_allowed ? "0 (none), " : "",
      "a fraction in (0, 1) or a whole number of batches, got ",
      limit);
}

void check_at_least(int64_t value, int64_t min, const char* name) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      value >= min,
      "trainer.",
      name,
      " must be >= ",
      min,
      ", got ",
      value);
}

} // namespace

TrainerOptions resolve_trainer_options(TrainerOptions options) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.max_epochs() == -1 || options.max_epochs() > 0,
      "trainer.max_epochs must be positive or -1, got ",
      options.max_epochs());
  check_at_least(options.min_epochs(), 0, "min_epochs");
  check_at_least(options.benchmark_limit(), 0, "benchmark_limit");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.benchmark_limit() <= 1000000,
      "trainer.benchmark_limit must be at most 1000000 (0 times every "
      "algorithm), got ",
      options.benchmark_limit());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.max_steps() == -1 || options.max_steps() > 0,
      "trainer.max_steps must be positive or -1, got ",
      options.max_steps());
  check_limit(options.limit_train_batches(), "limit_train_batches", false);
  check_limit(options.limit_val_batches(), "limit_val_batches", true);
  check_limit(options.limit_test_batches(), "limit_test_batches", true);
  check_limit(options.limit_predict_batches(), "limit_predict_batches", true);
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.val_check_interval() > 0 &&
          (options.val_check_interval() <= 1.0 ||
           options.val_check_interval() ==
               std::floor(options.val_check_interval())),
      "trainer.val_check_interval: expected a fraction in (0, 1] or a whole "
      "number of batches, got ",
      options.val_check_interval());
  check_at_least(
      options.check_val_every_n_epoch(), 1, "check_val_every_n_epoch");
  check_limit(options.overfit_batches(), "overfit_batches", true);
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.overfit_batches() >= 0,
      "trainer.overfit_batches must be >= 0, got ",
      options.overfit_batches());
  check_at_least(
      options.accumulate_grad_batches(), 1, "accumulate_grad_batches");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.gradient_clip_val() >= 0,
      "trainer.gradient_clip_val must be >= 0, got ",
      options.gradient_clip_val());
  check_at_least(options.num_threads(), 0, "num_threads");
  check_at_least(options.blas_threads(), 0, "blas_threads");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.gradient_clip_algorithm() == "norm" ||
          options.gradient_clip_algorithm() == "value",
      "trainer.gradient_clip_algorithm: expected norm or value, got '",
      options.gradient_clip_algorithm(),
      "'");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.max_time() >= 0,
      "trainer.max_time must be >= 0, got ",
      options.max_time());
  check_at_least(options.fast_dev_run(), 0, "fast_dev_run");
  check_at_least(options.num_sanity_val_steps(), -1, "num_sanity_val_steps");
  check_at_least(options.log_every_n_steps(), 0, "log_every_n_steps");
  check_at_least(
      options.flush_logs_every_n_steps(), 0, "flush_logs_every_n_steps");
  check_at_least(options.seed(), -1, "seed");
  check_at_least(options.profiler_steps(), 1, "profiler_steps");
  check_at_least(options.profiler_skip_steps(), 0, "profiler_skip_steps");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.peak_tflops() >= 0,
      "trainer.peak_tflops must be >= 0 (0: measure the device), got ",
      options.peak_tflops());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.profiler().empty() || options.profiler() == "pytorch",
      "trainer.profiler: expected \"\" or pytorch, got '",
      options.profiler(),
      "'");
  if (options.fast_dev_run() > 0) {
    // Lightning's fast_dev_run: n batches of each, once, leaving no files.
    const int64_t n = options.fast_dev_run();
    options.max_epochs(1)
        .min_epochs(0)
        .max_steps(-1)
        .max_time(0)
        .limit_train_batches(n)
        .limit_val_batches(n)
        .limit_test_batches(n)
        .limit_predict_batches(n)
        .val_check_interval(1.0)
        .num_sanity_val_steps(0)
        .accumulate_grad_batches(1)
        .default_root_dir("");
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.on_nonfinite_loss() == "stop" ||
          options.on_nonfinite_loss() == "skip_step" ||
          options.on_nonfinite_loss() == "ignore",
      "trainer.on_nonfinite_loss: expected stop, skip_step or ignore, got '",
      options.on_nonfinite_loss(),
      "'");
  const std::string& sdpa = options.sdpa_backend();
  HOTLOOP_CHECK_AS(
      ConfigError,
      sdpa == "auto" || sdpa == "flash" || sdpa == "efficient" ||
          sdpa == "cudnn" || sdpa == "math",
      "trainer.sdpa_backend: expected auto, flash, efficient, cudnn or "
      "math, got '",
      sdpa,
      "'");
  HOTLOOP_CHECK_AS(
      ConfigError,
      compat::has_sdpa_backend(sdpa),
      "trainer.sdpa_backend=",
      sdpa,
      ": LibTorch ",
      TORCH_VERSION_MAJOR,
      ".",
      TORCH_VERSION_MINOR,
      " has no such attention kernel to choose (1.13 has math only, the "
      "cuDNN one is switchable from 2.4 on)");
  parse_precision_mode(options.precision()); // names a bad value now
  return options;
}

std::string cuda_graphs_conflict(const TrainerOptions& options) {
  if (options.accumulate_grad_batches() != 1) {
    return hotloop::detail::str_cat(
        "trainer.cuda_graphs=true captures whole optimizer steps: set "
        "trainer.accumulate_grad_batches=1 (got ",
        options.accumulate_grad_batches(),
        ")");
  }
  if (options.on_nonfinite_loss() == "skip_step") {
    return "trainer.cuda_graphs=true with trainer.on_nonfinite_loss=skip_step: "
           "a replayed step cannot be skipped; use stop or ignore";
  }
  const PrecisionMode precision = parse_precision_mode(options.precision());
  if (precision == PrecisionMode::k16Mixed) {
    return hotloop::detail::str_cat(
        "trainer.cuda_graphs=true with trainer.precision=",
        to_string(precision),
        ": the loss scaler decides on the host whether to skip each step; use "
        "bf16-mixed or 32-true");
  }
  return "";
}

namespace detail {

int64_t resolve_limit(double limit, int64_t available, const char* name) {
  if (limit < 0) {
    return available;
  }
  if (limit > 0 && limit < 1) {
    const auto batches = static_cast<int64_t>(
        std::floor(limit * static_cast<double>(available)));
    HOTLOOP_CHECK_AS(
        ConfigError,
        batches > 0,
        "trainer.",
        name,
        "=",
        limit,
        " of ",
        available,
        " batches is none: raise it or give a whole number");
    return batches;
  }
  return std::min(available, static_cast<int64_t>(limit));
}

int64_t resolve_limit(
    double limit, std::optional<int64_t> available, const char* name) {
  if (available) {
    return resolve_limit(limit, *available, name);
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      !(limit > 0 && limit < 1),
      "trainer.",
      name,
      "=",
      limit,
      " is a fraction of a loader whose IterableDataset does not know its "
      "size: give a whole number of batches");
  return limit < 0 ? kUntilStreamsEnd : static_cast<int64_t>(limit);
}

int64_t val_check_batches(
    double interval, int64_t batches_per_epoch, int64_t accumulate) {
  if (interval == 1.0) {
    return batches_per_epoch;
  }
  if (interval < 1.0) {
    const auto batches = static_cast<int64_t>(
        std::floor(interval * static_cast<double>(batches_per_epoch)));
    // Whole optimizer steps, at least one.
    return std::max(accumulate, batches / accumulate * accumulate);
  }
  const auto batches = static_cast<int64_t>(interval);
  HOTLOOP_CHECK_AS(
      ConfigError,
      batches <= batches_per_epoch,
      "trainer.val_check_interval (",
      batches,
      ") must be at most the number of training batches per epoch (",
      batches_per_epoch,
      ")");
  HOTLOOP_CHECK_AS(
      ConfigError,
      batches % accumulate == 0,
      "trainer.val_check_interval (",
      batches,
      " batches) must be a multiple of trainer.accumulate_grad_batches (",
      accumulate,
      ") so that validation falls between optimizer steps");
  return batches;
}

} // namespace detail
} // namespace hotloop::train
