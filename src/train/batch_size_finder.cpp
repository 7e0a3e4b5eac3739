#include "hotloop/train/batch_size_finder.h"

#include "hotloop/core/error.h"
#include "hotloop/core/memory.h"
#include "hotloop/train/detail/trial.h"
#include "hotloop/train/device.h"
#include "hotloop/train/trainer.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <optional>
#include <sstream>

namespace hotloop::train {
namespace {

// The budget when none is given: what the process holds plus most of
// what the kernel could still give it.
constexpr double kAvailableShare = 0.7;
// Margin on a predicted peak: activations grow a little faster than the
// batch (allocator rounding, workspace).
constexpr double kPredictionMargin = 1.1;

std::string mib(int64_t bytes) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(0)
       << static_cast<double>(bytes) / (1 << 20) << " MiB";
  return text.str();
}

// Runs the trials of one search and remembers what they showed.
class Search {
 public:
  Search(
      Module& module,
      const LoaderForBatchSize& loader_for,
      TrainerOptions trainer,
      const BatchSizeFinderOptions& options,
      std::ostream* out)
      : module_(module),
        loader_for_(loader_for),
        trainer_(std::move(trainer)),
        options_(options),
        out_(out),
        cuda_(resolve_device(trainer_.accelerator(), trainer_.devices())
                  .is_cuda()),
        snapshot_(module) {
    release_freed_host_memory();
    result_.max_memory = options.max_memory() > 0
        ? options.max_memory()
        : resident_bytes() +
            static_cast<int64_t>(kAvailableShare * available_host_bytes());
  }

  ~Search() {
    snapshot_.restore();
  }

  // Whether `size` trains within the budget.
  bool fits(int64_t size) {
    BatchSizeTrial trial;
    trial.batch_size = size;
    const std::optional<int64_t> predicted = predicted_peak(size);
    if (predicted && *predicted > result_.max_memory) {
      trial.peak_bytes = *predicted;
      report(trial, "predicted over the budget, not run");
      result_.trials.push_back(trial);
      return false;
    }
    std::unique_ptr<data::DataLoader> loader = loader_for_(size);
    HOTLOOP_CHECK(loader != nullptr, "scale_batch_size: no loader for ", size);
    dataset_size_ = loader->dataset_size().value_or(detail::kUntilStreamsEnd);
    snapshot_.restore(); // every trial starts from the same weights
    release_freed_host_memory();
    reset_peak_resident_bytes();
    try {
      std::ostream quiet(nullptr);
      Trainer run(
          detail::trial_options(trainer_, options_.steps_per_trial(), *loader),
          quiet);
      const FitResult fit = run.fit(module_, *loader);
      trial.measured = true;
      trial.samples_per_s = fit.train_samples_per_s;
      if (!cuda_) {
        trial.peak_bytes = peak_resident_bytes();
      }
      trial.fits = cuda_ || trial.peak_bytes <= result_.max_memory;
    } catch (const c10::OutOfMemoryError&) {
      trial.fits = false;
    }
    if (trial.fits && !cuda_ && size > fitted_size_) {
      // What one more sample costs, between the last two sizes that fit,
      // for the next prediction (the weights' gradients and optimizer
      // state cost the same at any size).
      if (fitted_size_ > 0) {
        per_sample_ = std::max<double>(
            static_cast<double>(trial.peak_bytes - fitted_peak_) /
                static_cast<double>(size - fitted_size_),
            0.0);
      }
      fitted_peak_ = trial.peak_bytes;
      fitted_size_ = size;
      ++fitted_count_;
    }
    report(
        trial,
        trial.fits ? "fits"
                   : (cuda_ ? "out of device memory" : "over the budget"));
    result_.trials.push_back(trial);
    return trial.fits;
  }

  // A batch this large covers the whole dataset: larger ones change nothing.
  bool covers_dataset(int64_t size) const {
    return dataset_size_ > 0 && size >= dataset_size_;
  }

  BatchSizeSearch& result() {
    return result_;
  }

 private:
  std::optional<int64_t> predicted_peak(int64_t size) const {
    if (cuda_ || fitted_count_ < 2 || size <= fitted_size_) {
      return std::nullopt;
    }
    return fitted_peak_ +
        static_cast<int64_t>(
               kPredictionMargin * per_sample_ *
               static_cast<double>(size - fitted_size_));
  }

  void report(const BatchSizeTrial& trial, const char* what) const {
    if (out_ == nullptr) {
      return;
    }
    *out_ << "scale_batch_size: batch " << trial.batch_size << ": " << what;
    if (trial.peak_bytes > 0) {
      *out_ << ", peak " << mib(trial.peak_bytes) << " of "
            << mib(result_.max_memory);
    }
    if (trial.samples_per_s > 0) {
      *out_ << ", " << std::fixed << std::setprecision(0)
            << trial.samples_per_s << std::defaultfloat << " samples/s";
    }
    *out_ << "\n";
  }

  Module& module_;
  const LoaderForBatchSize& loader_for_;
  TrainerOptions trainer_;
  const BatchSizeFinderOptions& options_;
  std::ostream* out_;
  bool cuda_;
  detail::ModuleSnapshot snapshot_;
  BatchSizeSearch result_;
  int64_t dataset_size_ = 0;
  double per_sample_ = 0;
  int64_t fitted_peak_ = 0;
  int64_t fitted_size_ = 0;
  int64_t fitted_count_ = 0;
};

} // namespace

namespace detail {

// Lightning's _run_power_scaling: double while it fits; after a failure,
// halve, and end at the last size that fit. Where Lightning, out of
// trials, returns the next size untried, this returns the last that fit.
int64_t power_scaling(
    const FitsBatch& fits,
    const FitsBatch& covers_dataset,
    int64_t size,
    int64_t max_trials) {
  int64_t last_fit = 0;
  for (int64_t trial = 0; trial < max_trials; ++trial) {
    if (fits(size)) {
      last_fit = size;
      if (covers_dataset(size)) {
        break;
      }
      size *= 2;
    } else {
      if (last_fit > 0 || size == 1) {
        break;
      }
      size /= 2;
    }
  }
  return last_fit;
}

// Lightning's _run_binary_scaling: double while it fits, then bisect
// between the largest size that fit and the smallest that did not.
int64_t binary_scaling(
    const FitsBatch& fits,
    const FitsBatch& covers_dataset,
    int64_t size,
    int64_t max_trials) {
  int64_t last_fit = 0;
  int64_t low = 1;
  int64_t high = 0; // none failed yet
  int64_t count = 0;
  while (true) {
    if (fits(size)) {
      last_fit = size;
      if (++count > max_trials) {
        break;
      }
      low = size;
      if (high > 0) {
        if (high - low <= 1) {
          break;
        }
        size = (high + low) / 2;
      } else {
        if (covers_dataset(size)) {
          break;
        }
        size *= 2;
      }
    } else {
      high = size;
      size = (high + low) / 2;
      if (high - low <= 1) {
        break;
      }
    }
  }
  return last_fit;
}

} // namespace detail

BatchSizeSearch scale_batch_size(
    Module& module,
    const LoaderForBatchSize& loader_for,
    TrainerOptions trainer,
    BatchSizeFinderOptions options,
    std::ostream* out) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.mode() == "power" || options.mode() == "binsearch",
      "scale_batch_size: mode must be power or binsearch, got '",
      options.mode(),
      "'");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.steps_per_trial() >= 1 && options.init_val() >= 1 &&
          options.max_trials() >= 1 && options.max_memory() >= 0,
      "scale_batch_size: steps_per_trial, init_val and max_trials must be "
      ">= 1 and max_memory >= 0, got ",
      options.steps_per_trial(),
      ", ",
      options.init_val(),
      ", ",
      options.max_trials(),
      " and ",
      options.max_memory());
  HOTLOOP_CHECK_AS(
      ConfigError,
      trainer.fast_dev_run() == 0,
      "scale_batch_size: trainer.fast_dev_run runs a few batches only; turn "
      "it off to search for a batch size");
  Search search(module, loader_for, std::move(trainer), options, out);
  const detail::FitsBatch fits = [&](int64_t size) {
    return search.fits(size);
  };
  const detail::FitsBatch covers = [&](int64_t size) {
    return search.covers_dataset(size);
  };
  const int64_t size = options.mode() == "power"
      ? detail::power_scaling(
            fits, covers, options.init_val(), options.max_trials())
      : detail::binary_scaling(
            fits, covers, options.init_val(), options.max_trials());
  BatchSizeSearch result = search.result();
  if (size == 0) {
    const BatchSizeTrial& last = result.trials.back();
    throw ConfigError(hotloop::detail::str_cat(
        "scale_batch_size: no batch size fits: a batch of ",
        last.batch_size,
        " ",
        last.peak_bytes > 0 ? "peaked at " + mib(last.peak_bytes)
                            : std::string("ran out of device memory"),
        ", over the budget of ",
        mib(result.max_memory),
        " (tuner.max_memory)"));
  }
  result.batch_size = size;
  if (out != nullptr) {
    *out << "scale_batch_size: batch size " << size << "\n";
  }
  return result;
}

double scale_learning_rate(
    double lr,
    int64_t base_batch_size,
    int64_t batch_size,
    const std::string& rule) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      rule == "none" || rule == "linear" || rule == "sqrt",
      "the learning-rate rule for a new batch size must be none, linear or "
      "sqrt, got '",
      rule,
      "'");
  const double ratio =
      static_cast<double>(batch_size) / static_cast<double>(base_batch_size);
  if (rule == "linear") {
    return lr * ratio;
  }
  return rule == "sqrt" ? lr * std::sqrt(ratio) : lr;
}

} // namespace hotloop::train
