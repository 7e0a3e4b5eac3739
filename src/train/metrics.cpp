#include "hotloop/train/metrics.h"

#include "hotloop/core/error.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <cmath>
#include <limits>
#include <string_view>

namespace hotloop::train {

void MeanMetric::update(const at::Tensor& value, double weight) {
  if (value.device().is_cpu()) {
    update(value.detach().item<double>(), weight);
    return;
  }
  const at::Tensor weighted = value.detach().to(at::kDouble) * weight;
  if (device_sum_.defined()) {
    device_sum_.add_(weighted);
  } else {
    // The device sum takes over the host's (a resumed epoch's), so that the
    // additions happen in the order of an uninterrupted run.
    device_sum_ = weighted.add(sum_);
    sum_ = 0;
  }
  weight_ += weight;
}

double MeanMetric::sum() const {
  return sum_ + (device_sum_.defined() ? device_sum_.item<double>() : 0.0);
}

double MeanMetric::compute() const {
  if (weight_ <= 0) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  return sum() / weight_;
}

void MetricCollection::log(
    const std::string& name, double value, double weight) {
  metrics_[name].update(value, weight);
  last_[name] = {at::scalar_tensor(value, at::kDouble), weight};
}

void MetricCollection::log(
    const std::string& name, const at::Tensor& value, double weight) {
  metrics_[name].update(value, weight);
  last_[name] = {value.detach(), weight};
}

void MetricCollection::count(
    const std::string& name, const at::Tensor& counts) {
  const at::Tensor added = counts.detach();
  auto it = counts_.find(name);
  if (it == counts_.end()) {
    // A normal tensor even in an evaluation's InferenceMode, so that the
    // total can be summed over processes (in place) after it.
    const c10::InferenceMode normal(/*enabled=*/false);
    counts_.emplace(name, added.clone());
    return;
  }
  HOTLOOP_CHECK(
      it->second.sizes() == added.sizes(),
      "the count '",
      name,
      "' was ",
      it->second.sizes(),
      " and is now added ",
      added.sizes(),
      ": every batch must count the same shape");
  it->second.add_(added);
}

void MetricCollection::log_last(const MetricCollection& step) {
  for (const auto& [name, logged] : step.last_) {
    log(name, logged.value, logged.weight);
  }
}

namespace {

// A root-mean-square metric: logged as mean squares, reported as the root
// of their mean.
double reported(const std::string& name, double mean) {
  constexpr std::string_view kRoot = "_rmse";
  const bool root =
      name.size() >= kRoot.size() &&
      name.compare(name.size() - kRoot.size(), kRoot.size(), kRoot) == 0;
  return root ? std::sqrt(mean) : mean;
}

} // namespace

std::map<std::string, double> MetricCollection::last() const {
  std::map<std::string, double> out;
  for (const auto& [name, logged] : last_) {
    out[name] = reported(name, logged.value.item<double>());
  }
  return out;
}

std::map<std::string, double> MetricCollection::compute() const {
  std::map<std::string, double> out;
  for (const auto& [name, metric] : metrics_) {
    out[name] = reported(name, metric.compute());
  }
  return out;
}

std::map<std::string, std::pair<double, double>> MetricCollection::state()
    const {
  std::map<std::string, std::pair<double, double>> out;
  for (const auto& [name, metric] : metrics_) {
    out[name] = {metric.sum(), metric.weight()};
  }
  return out;
}

void MetricCollection::load_state(
    const std::map<std::string, std::pair<double, double>>& state) {
  metrics_.clear();
  last_.clear();
  for (const auto& [name, sum_weight] : state) {
    metrics_[name].load(sum_weight.first, sum_weight.second);
  }
}

double MetricCollection::get(const std::string& name) const {
  auto it = metrics_.find(name);
  return it == metrics_.end() ? std::numeric_limits<double>::quiet_NaN()
                              : it->second.compute();
}

at::Tensor correct_count(
    const at::Tensor& logits, const at::Tensor& target, int64_t k) {
  TORCH_CHECK(logits.dim() == 2, "logits must be [N, C], got ", logits.sizes());
  TORCH_CHECK(
      k >= 1 && k <= logits.size(1),
      "k must be in [1, ",
      logits.size(1),
      "], got ",
      k);
  const at::Tensor top = std::get<1>(logits.detach().topk(k, /*dim=*/1));
  return top.eq(target.view({-1, 1})).any(/*dim=*/1).sum();
}

at::Tensor confusion_counts(
    const at::Tensor& logits, const at::Tensor& target) {
  HOTLOOP_CHECK(
      logits.dim() == 2,
      "confusion counts need logits [N, C], got ",
      logits.sizes());
  HOTLOOP_CHECK(
      target.dim() == 1 && target.size(0) == logits.size(0),
      "confusion counts need a target [",
      logits.size(0),
      "], got ",
      target.sizes());
  const int64_t classes = logits.size(1);
  const at::Tensor cell =
      target.to(at::kLong) * classes + logits.detach().argmax(/*dim=*/1);
  at::Tensor counts = at::zeros({classes * classes}, cell.options());
  // Accumulating index_put_: deterministic on CUDA too (sorted), and no
  // read of the cells' range, unlike bincount.
  counts.index_put_({cell}, at::ones_like(cell), /*accumulate=*/true);
  return counts.view({classes, classes});
}

int64_t count_correct(
    const at::Tensor& logits, const at::Tensor& target, int64_t k) {
  return correct_count(logits, target, k).item<int64_t>();
}

} // namespace hotloop::train
