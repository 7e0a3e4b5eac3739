#include "hotloop/train/detail/epoch_batches.h"

#include <utility>

namespace hotloop::train::detail {

EpochBatches::EpochBatches(
    data::DataLoader& loader, int64_t done, int64_t limit)
    : it_(loader.begin()),
      end_(loader.end()),
      read_ahead_(loader.iterable()),
      finishes_epoch_(!read_ahead_ && loader.length() == limit),
      done_(done),
      limit_(limit) {}

bool EpochBatches::next(data::Batch& out, bool& last) {
  if (advance_) {
    ++it_;
    advance_ = false;
  }
  if (done_ >= limit_ || it_ == end_) {
    return false;
  }
  out = std::move(*it_);
  ++done_;
  if (done_ == limit_) {
    last = true;
    if (finishes_epoch_) {
      // Reads nothing: it ends the loader's epoch (and stops its workers
      // unless they persist), as a loop to the loader's end does.
      ++it_;
    }
  } else if (read_ahead_) {
    ++it_;
    last = it_ == end_;
  } else {
    advance_ = true;
    last = false;
  }
  return true;
}

} // namespace hotloop::train::detail
