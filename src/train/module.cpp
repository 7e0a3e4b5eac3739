#include "hotloop/train/module.h"

#include "hotloop/core/error.h"

namespace hotloop::train {

at::Tensor Module::predict_step(const data::Batch& batch, int64_t batch_idx) {
  throw Error(
      "Trainer::predict needs the Module to override predict_step, which "
      "this one does not");
}

} // namespace hotloop::train
