#include "hotloop/data/dataset.h"

#include "hotloop/core/error.h"
#include "hotloop/data/detail/batch_buffers.h"

#include <ATen/ATen.h>

namespace hotloop::data {

void Dataset::get_batch(
    c10::ArrayRef<int64_t> indices,
    const SampleContext& context,
    Batch& out) const {
  for (size_t k = 0; k < indices.size(); ++k) {
    const Example example = get(indices[k], context);
    const auto row = static_cast<int64_t>(k);
    HOTLOOP_CHECK(
        example.input.sizes() == out.input[row].sizes() &&
            example.target.sizes() == out.target[row].sizes(),
        "sample ",
        indices[k],
        " has input ",
        example.input.sizes(),
        " and target ",
        example.target.sizes(),
        " but the dataset's spec says ",
        out.input[row].sizes(),
        " and ",
        out.target[row].sizes());
    out.input[row].copy_(example.input);
    out.target[row].copy_(example.target);
    detail::write_fields(
        example,
        out,
        row,
        /*exact_dtype=*/false,
        hotloop::detail::str_cat("sample ", indices[k]));
  }
}

void Dataset::check_index(int64_t index) const {
  HOTLOOP_CHECK(
      index >= 0 && index < size(),
      "sample index ",
      index,
      " is out of range for a dataset of ",
      size());
}

} // namespace hotloop::data
