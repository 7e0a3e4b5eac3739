#include "hotloop/train/metrics.h"

#include <ATen/ATen.h>

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
  reset();
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

int64_t count_correct(
    const at::Tensor& logits, const at::Tensor& target, int64_t k) {
  return correct_count(logits, target, k).item<int64_t>();
}

} // namespace hotloop::train
