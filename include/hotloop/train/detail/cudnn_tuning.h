#pragma once

#include "hotloop/data/batch.h"
#include "hotloop/data/dataloader.h"

namespace hotloop::train::detail {

/// cuDNN's benchmark mode (trainer.benchmark) times every algorithm of
/// every convolution the first time it meets a shape: worth it for the
/// batch shape a loader gives again and again, a loss for a shape met once
/// (an epoch's last, smaller batch; the model summary's one sample). While
/// a CudnnBenchmarkOff made with `off` true lives, the mode is off; the
/// setting before it comes back after.
class CudnnBenchmarkOff {
 public:
  explicit CudnnBenchmarkOff(bool off = true);
  ~CudnnBenchmarkOff();
  CudnnBenchmarkOff(const CudnnBenchmarkOff&) = delete;
  CudnnBenchmarkOff& operator=(const CudnnBenchmarkOff&) = delete;

 private:
  bool restore_ = false;
};

/// Whether `batch` holds fewer samples than `loader`'s batch_size, as an
/// epoch's last batch does without drop_last: its input's first dimension
/// is the batch's (as every loader's collation makes it). False for a
/// loader without a batch_size (single samples, or a batch_sampler's own
/// sizes).
bool is_short_batch(const data::Batch& batch, const data::DataLoader& loader);

} // namespace hotloop::train::detail
