#pragma once

#include "hotloop/data/dataloader.h"
#include "hotloop/train/strategy.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace hotloop::train::detail {

/// Runs `predict` over the first `batches` batches of a loader and returns
/// its outputs, one per batch.
using PredictBatches =
    std::function<std::vector<at::Tensor>(data::DataLoader&, int64_t)>;

/// Trainer::predict. One process predicts `loader` as it is. Under a
/// data-parallel strategy each process predicts its share of `loader`
/// (data::shard), and every process returns all the outputs, in the order
/// of one process predicting the loader:
/// - of a loader that batches samples, sample by sample: process r holds
///   the samples r, r + W, ... of the loader's order (a shuffling loader's
///   included; its last batch is not dropped, so that every sample one
///   process predicts is predicted), and the outputs' rows are put back in
///   that order and cut into one process's batches. Each output's first
///   dimension must count its batch's samples, and all must have one dtype
///   and the same other dimensions (ConfigError);
/// - of a batch_sampler, or of batch_size=None, output by output: process
///   r holds the loader's batches (or samples) r, r + W, ...;
/// - of an IterableDataset that splits by process, or of a loader that
///   already is one process's share (data::is_share), process after
///   process: one process's order is not known;
/// - of an IterableDataset that does not split by process: every process
///   predicts it all, as one process would (no collective).
/// Every process must draw the same order (ConfigError otherwise). What
/// one process throws while it predicts goes on there, and the others
/// throw DistError naming it (agree_on_failure); every error here is
/// raised on every process alike, so none waits in a collective.
/// `limit`: trainer.limit_predict_batches, counted in one process's
/// batches (in each process's own for a share or streams).
std::vector<at::Tensor> predict_in_shares(
    Strategy& strategy,
    data::DataLoader& loader,
    double limit,
    c10::Device device,
    const PredictBatches& predict);

} // namespace hotloop::train::detail
