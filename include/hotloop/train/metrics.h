#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>

namespace hotloop::train {

/// A weighted running mean: the Accumulator of d2l's evaluate_loss. Feed it
/// per-batch means with the batch size as weight and it returns the exact
/// per-sample mean, however uneven the last batch.
class MeanMetric {
 public:
  void update(double value, double weight = 1.0) {
    sum_ += value * weight;
    weight_ += weight;
  }
  /// A 0-dim tensor on an accelerator is summed there, detached: reading it
  /// would make the host wait for the device on every step. CPU tensors are
  /// read at once.
  void update(const at::Tensor& value, double weight = 1.0);
  /// The mean so far (reads the device sum, if any); NaN before the first
  /// update.
  double compute() const;
  double weight() const {
    return weight_;
  }
  /// The weighted sum so far (reads the device sum, if any).
  double sum() const;
  /// Continues from a saved sum and weight (a resumed epoch).
  void load(double sum, double weight) {
    reset();
    sum_ = sum;
    weight_ = weight;
  }
  void reset() {
    sum_ = 0;
    weight_ = 0;
    device_sum_ = at::Tensor();
  }

 private:
  double sum_ = 0;
  double weight_ = 0;
  at::Tensor device_sum_;
};

/// Named running means that steps log into, and named counts they add to.
/// A logged tensor is detached, so no autograd graph is ever kept alive by a
/// logged value.
class MetricCollection {
 public:
  /// Adds `value` (a batch mean) with `weight` (its sample count) to `name`.
  /// A name ending in `_rmse` takes batch mean squares and reports the root
  /// of their mean, so that it is exact over uneven batches and processes.
  void log(const std::string& name, double value, double weight = 1.0);
  /// Logs a 0-dim tensor, detached: a CPU value is read as a double, a
  /// device value summed on its device (read when a mean is asked for).
  void log(
      const std::string& name, const at::Tensor& value, double weight = 1.0);
  /// Logs, for every metric `step` has logged, its most recent value with
  /// the weight it was logged with: a step that logged into `step` once
  /// (a captured CUDA graph's, whose values a replay overwrites in place)
  /// logged again.
  void log_last(const MetricCollection& step);
  /// Adds `counts` (an integer tensor of any shape: per-class counts, a
  /// confusion matrix) to the total kept under `name`, on the device the
  /// counts are on, without reading them: an evaluation's histogram at no
  /// wait per batch. The first call fixes the shape; another shape throws
  /// Error naming the metric. Summed over processes as the means are
  /// (all_reduce_metrics); not part of compute() or state() (a checkpoint
  /// keeps the means only).
  void count(const std::string& name, const at::Tensor& counts);
  /// Every count's total so far, by name.
  const std::map<std::string, at::Tensor>& counts() const {
    return counts_;
  }
  /// Every metric's mean.
  std::map<std::string, double> compute() const;
  /// Every metric's most recent logged value (what a per-step log shows).
  std::map<std::string, double> last() const;
  /// The mean of `name`; NaN when it was never logged.
  double get(const std::string& name) const;
  void reset() {
    metrics_.clear();
    last_.clear();
    counts_.clear();
  }
  /// Every metric's weighted sum and weight, for a checkpoint.
  std::map<std::string, std::pair<double, double>> state() const;
  /// Replaces the means by those of `state()`; the counts stay.
  void load_state(
      const std::map<std::string, std::pair<double, double>>& state);

 private:
  std::map<std::string, MeanMetric> metrics_;
  std::map<std::string, at::Tensor> counts_;
  struct Logged {
    at::Tensor value; // as logged (on its device)
    double weight = 0;
  };
  // The latest value of each metric.
  std::map<std::string, Logged> last_;
};

/// Number of rows of `logits` [N, C] whose target [N] is among the top `k`
/// scores: the count, not a mean, so uneven batches add up exactly.
int64_t count_correct(
    const at::Tensor& logits, const at::Tensor& target, int64_t k = 1);

/// count_correct's count as a 0-dim int64 tensor on the logits' device, not
/// read back: logged as a tensor, it keeps evaluation on a GPU from waiting
/// for the device at every batch.
at::Tensor correct_count(
    const at::Tensor& logits, const at::Tensor& target, int64_t k = 1);

/// The confusion counts of one batch as an int64 [C, C] tensor on the
/// logits' device (C = logits.size(1)): counts[t][p] samples of true class
/// t whose highest score is class p (the first of equal highest scores, as
/// argmax), for MetricCollection::count. Throws Error for logits that are
/// not [N, C] or a target that is not [N]; the targets' range is not read
/// (no wait for the device), the loss beside it checks that.
at::Tensor confusion_counts(const at::Tensor& logits, const at::Tensor& target);

} // namespace hotloop::train
