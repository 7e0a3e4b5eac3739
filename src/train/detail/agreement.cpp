#include "hotloop/train/detail/agreement.h"

#include "hotloop/core/error.h"

#include <ATen/ATen.h>

namespace hotloop::train::detail {

std::vector<Extremes> extremes_everywhere(
    Strategy& strategy, const std::vector<int64_t>& values) {
  std::vector<int64_t> both;
  for (const int64_t value : values) {
    both.push_back(value);
    both.push_back(-value);
  }
  at::Tensor maxima = at::tensor(both);
  if (strategy.world_size() > 1) {
    strategy.all_reduce(maxima, Reduction::kMax);
  }
  const int64_t* most = maxima.data_ptr<int64_t>();
  std::vector<Extremes> out;
  for (size_t i = 0; i < values.size(); ++i) {
    out.push_back({-most[2 * i + 1], most[2 * i]});
  }
  return out;
}

bool same_everywhere(Strategy& strategy, const std::vector<int64_t>& values) {
  if (strategy.world_size() == 1) {
    return true;
  }
  for (const Extremes& e : extremes_everywhere(strategy, values)) {
    if (e.least != e.most) {
      return false;
    }
  }
  return true;
}

void agree_on_failure(
    Strategy& strategy, const char* what, const std::exception_ptr& failed) {
  if (strategy.world_size() == 1) {
    if (failed) {
      std::rethrow_exception(failed);
    }
    return;
  }
  // The lowest failed rank r as world - r, the highest value.
  const int64_t world = strategy.world_size();
  const int64_t first =
      extremes_everywhere(strategy, {failed ? world - strategy.rank() : 0})[0]
          .most;
  if (failed) {
    std::rethrow_exception(failed);
  }
  HOTLOOP_CHECK_AS(
      DistError,
      first == 0,
      "rank ",
      world - first,
      " failed in ",
      what,
      " (its error is in its own output); this process, rank ",
      strategy.rank(),
      ", stops with it");
}

} // namespace hotloop::train::detail
