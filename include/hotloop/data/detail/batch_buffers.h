#pragma once

#include "hotloop/data/batch.h"
#include "hotloop/data/dataset.h"

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace hotloop::data::detail {

/// A batch part of `rows` rows of `shape` and `dtype`, from the loader's
/// buffers.
using BufferFn = std::function<at::Tensor(
    int64_t rows, const std::vector<int64_t>& shape, c10::ScalarType dtype)>;

/// The empty batch the loader's own batching writes `rows` samples of
/// `spec` into: input, target (left undefined unless `labelled`) and each
/// of the spec's fields, from `buffer`.
Batch batch_buffers(
    const SampleSpec& spec,
    int64_t rows,
    bool labelled,
    const BufferFn& buffer);

/// Writes `sample`'s fields into row `row` of `batch`'s, which
/// `batch_buffers` made from the dataset's spec. Throws Error unless the
/// sample has exactly those fields, each of the row's shape and, with
/// `exact_dtype`, its dtype (else it is converted); `what` names the sample
/// in the message ("sample 7").
void write_fields(
    const Example& sample,
    Batch& batch,
    int64_t row,
    bool exact_dtype,
    const std::string& what);

} // namespace hotloop::data::detail
