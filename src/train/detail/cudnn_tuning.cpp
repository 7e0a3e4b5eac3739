#include "hotloop/train/detail/cudnn_tuning.h"

#include <ATen/Context.h>

namespace hotloop::train::detail {

CudnnBenchmarkOff::CudnnBenchmarkOff(bool off)
    : restore_(off && at::globalContext().benchmarkCuDNN()) {
  if (restore_) {
    at::globalContext().setBenchmarkCuDNN(false);
  }
}

CudnnBenchmarkOff::~CudnnBenchmarkOff() {
  if (restore_) {
    at::globalContext().setBenchmarkCuDNN(true);
  }
}

bool is_short_batch(const data::Batch& batch, const data::DataLoader& loader) {
  const auto& options = loader.options();
  if (!options.batch_size().has_value() || options.batch_sampler() != nullptr ||
      !batch.input.defined() || batch.input.dim() == 0) {
    return false;
  }
  return batch.input.size(0) < *options.batch_size();
}

} // namespace hotloop::train::detail
