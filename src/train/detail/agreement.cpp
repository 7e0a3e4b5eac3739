#include "hotloop/train/detail/agreement.h"

#include <ATen/ATen.h>

namespace hotloop::train::detail {

bool same_everywhere(Strategy& strategy, const std::vector<int64_t>& values) {
  if (strategy.world_size() == 1) {
    return true;
  }
  std::vector<int64_t> both;
  for (const int64_t value : values) {
    both.push_back(value);
    both.push_back(-value);
  }
  at::Tensor extremes = at::tensor(both);
  strategy.all_reduce(extremes, Reduction::kMax);
  const int64_t* most = extremes.data_ptr<int64_t>();
  for (size_t i = 0; i < values.size(); ++i) {
    if (most[2 * i] != -most[2 * i + 1]) {
      return false;
    }
  }
  return true;
}

} // namespace hotloop::train::detail
