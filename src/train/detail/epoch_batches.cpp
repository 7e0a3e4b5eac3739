#include "hotloop/train/detail/epoch_batches.h"

#include "hotloop/train/strategy.h"

#include <utility>

namespace hotloop::train::detail {

EpochBatches::EpochBatches(
    data::DataLoader& loader, int64_t done, int64_t limit, Strategy* together)
    : it_(loader.begin()),
      end_(loader.end()),
      read_ahead_(loader.iterable()),
      finishes_epoch_(!read_ahead_ && loader.length() == limit),
      together_(
          read_ahead_ && together != nullptr && together->world_size() > 1
              ? together
              : nullptr),
      done_(done),
      limit_(limit) {}

bool EpochBatches::ended() {
  if (!checked_) {
    ended_ = it_ == end_;
    if (together_ != nullptr) {
      ended_ = together_->any(ended_);
    }
    checked_ = true;
  }
  return ended_;
}

bool EpochBatches::next(data::Batch& out, bool& last) {
  if (advance_) {
    ++it_;
    checked_ = false;
    advance_ = false;
  }
  if (done_ >= limit_ || ended()) {
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
    checked_ = false;
    last = ended();
  } else {
    advance_ = true;
    last = false;
  }
  return true;
}

} // namespace hotloop::train::detail
