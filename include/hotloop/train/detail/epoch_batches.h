#pragma once

#include "hotloop/data/dataloader.h"

#include <cstdint>

namespace hotloop::train {
class Strategy;
} // namespace hotloop::train

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
  ///
  /// `together`: the processes that step together on their own streams (a
  /// data-parallel fit): each read of a stream asks all of them
  /// (Strategy::any) whether one's stream has ended, and the pass ends for
  /// every process at the first end, so none waits in a step's collective
  /// for a process that has no batch. Null, or a map-style loader (whose
  /// shares are equal): this process's reads alone.
  EpochBatches(
      data::DataLoader& loader,
      int64_t done,
      int64_t limit,
      Strategy* together = nullptr);

  /// The next batch into `out`; false at the pass's end.
  bool next(data::Batch& out, bool& last);

  /// Whether the loader ran out before the limit (a stream shorter than
  /// its size or the limit says, or another process's stream read
  /// together).
  bool ran_out() const {
    return done_ < limit_ && ended_;
  }

 private:
  /// Whether there is no batch at `it_` (for streams read together: in
  /// some process); asked once per position.
  bool ended();

  data::DataLoader::Iterator it_;
  data::DataLoader::Iterator end_;
  bool read_ahead_;
  bool finishes_epoch_; // the limit is a map-style loader's whole epoch
  Strategy* together_;
  bool advance_ = false;
  bool checked_ = false; // whether ended_ holds for it_'s position
  bool ended_ = false;
  int64_t done_;
  int64_t limit_;
};

} // namespace hotloop::train::detail
