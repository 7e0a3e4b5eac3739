#pragma once

#include "hotloop/data/dataloader.h"

#include <cstdint>

namespace hotloop::train::detail {

/// One pass over a loader, as the fit's epochs and the evaluations read it:
/// at most `limit` batches, each with whether it is the pass's last.
///
/// A map-style loader's count is exact; a stream's end shows only when a
/// read finds nothing, so for a stream the next batch is read ahead
/// (Lightning's data fetcher looks one ahead for the same reason). No batch
/// past the limit is read; a pass over a map-style loader's whole epoch
/// ends that epoch (which reads nothing), so its workers stop between
/// epochs unless they persist and its state_dict is the next epoch's start.
class EpochBatches {
 public:
  /// Starts the loader's epoch (`begin()`); `done` batches of it were
  /// skipped already (a resumed epoch, by `load_state_dict`).
  EpochBatches(data::DataLoader& loader, int64_t done, int64_t limit);

  /// The next batch into `out`; false at the pass's end.
  bool next(data::Batch& out, bool& last);

  /// Whether the loader ran out before the limit (a stream shorter than
  /// its size or the limit says).
  bool ran_out() const {
    return done_ < limit_ && it_ == end_;
  }

 private:
  data::DataLoader::Iterator it_;
  data::DataLoader::Iterator end_;
  bool read_ahead_;
  bool finishes_epoch_; // the limit is a map-style loader's whole epoch
  bool advance_ = false;
  int64_t done_;
  int64_t limit_;
};

} // namespace hotloop::train::detail
