#include "hotloop/train/metrics.h"

#include <ATen/ATen.h>

#include <limits>

namespace hotloop::train {

double MeanMetric::compute() const {
  return weight_ > 0 ? sum_ / weight_
                     : std::numeric_limits<double>::quiet_NaN();
}

void MetricCollection::log(
    const std::string& name, double value, double weight) {
  metrics_[name].update(value, weight);
  last_[name] = value;
}

void MetricCollection::log(
    const std::string& name, const at::Tensor& value, double weight) {
  log(name, value.detach().item<double>(), weight);
}

std::map<std::string, double> MetricCollection::compute() const {
  std::map<std::string, double> out;
  for (const auto& [name, metric] : metrics_) {
    out[name] = metric.compute();
  }
  return out;
}

double MetricCollection::get(const std::string& name) const {
  auto it = metrics_.find(name);
  return it == metrics_.end() ? std::numeric_limits<double>::quiet_NaN()
                              : it->second.compute();
}

int64_t count_correct(
    const at::Tensor& logits, const at::Tensor& target, int64_t k) {
  TORCH_CHECK(logits.dim() == 2, "logits must be [N, C], got ", logits.sizes());
  TORCH_CHECK(
      k >= 1 && k <= logits.size(1),
      "k must be in [1, ",
      logits.size(1),
      "], got ",
      k);
  const at::Tensor top = std::get<1>(logits.detach().topk(k, /*dim=*/1));
  return top.eq(target.view({-1, 1})).any(/*dim=*/1).sum().item<int64_t>();
}

} // namespace hotloop::train
