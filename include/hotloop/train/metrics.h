#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>

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
  /// The mean so far; NaN before the first update.
  double compute() const;
  double weight() const {
    return weight_;
  }
  void reset() {
    sum_ = 0;
    weight_ = 0;
  }

 private:
  double sum_ = 0;
  double weight_ = 0;
};

/// Named running means that steps log into. Values are plain doubles, so no
/// autograd graph is ever kept alive by a logged value.
class MetricCollection {
 public:
  /// Adds `value` (a batch mean) with `weight` (its sample count) to `name`.
  void log(const std::string& name, double value, double weight = 1.0);
  /// Logs a 0-dim tensor: detached and read as a double.
  void log(
      const std::string& name, const at::Tensor& value, double weight = 1.0);
  /// Every metric's mean.
  std::map<std::string, double> compute() const;
  /// Every metric's most recent logged value (what a per-step log shows).
  std::map<std::string, double> last() const {
    return last_;
  }
  /// The mean of `name`; NaN when it was never logged.
  double get(const std::string& name) const;
  void reset() {
    metrics_.clear();
    last_.clear();
  }

 private:
  std::map<std::string, MeanMetric> metrics_;
  std::map<std::string, double> last_;
};

/// Number of rows of `logits` [N, C] whose target [N] is among the top `k`
/// scores: the count, not a mean, so uneven batches add up exactly.
int64_t count_correct(
    const at::Tensor& logits, const at::Tensor& target, int64_t k = 1);

} // namespace hotloop::train
