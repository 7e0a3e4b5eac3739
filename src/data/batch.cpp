#include "hotloop/data/batch.h"

#include "hotloop/core/error.h"
#include "hotloop/data/detail/batch_buffers.h"

namespace hotloop::data {
namespace {

// "mask, weight", or "none".
template <typename Map>
std::string names_of(const Map& fields) {
  std::string names;
  for (const auto& entry : fields) {
    names += names.empty() ? entry.first : ", " + entry.first;
  }
  return names.empty() ? std::string("none") : names;
}

} // namespace

at::Tensor Batch::field(const std::string& name) const {
  const auto found = fields.find(name);
  HOTLOOP_CHECK(
      found != fields.end(),
      "the batch has no field '",
      name,
      "' (its fields: ",
      names_of(fields),
      "); a batch's fields come from its dataset's SampleSpec::fields, or "
      "from the loader's collate");
  return found->second;
}

namespace detail {

Batch batch_buffers(
    const SampleSpec& spec,
    int64_t rows,
    bool labelled,
    const BufferFn& buffer) {
  Batch batch{
      buffer(rows, spec.input_shape, spec.input_dtype),
      labelled ? buffer(rows, spec.target_shape, spec.target_dtype)
               : at::Tensor()};
  for (const auto& [name, field] : spec.fields) {
    batch.fields.emplace(name, buffer(rows, field.shape, field.dtype));
  }
  return batch;
}

void write_fields(
    const Example& sample,
    Batch& batch,
    int64_t row,
    bool exact_dtype,
    const std::string& what) {
  for (const auto& [name, tensor] : sample.fields) {
    HOTLOOP_CHECK(
        batch.fields.count(name) > 0,
        what,
        ": field '",
        name,
        "' is not in the dataset's spec (its fields: ",
        names_of(batch.fields),
        ")");
  }
  for (const auto& [name, rows] : batch.fields) {
    const auto found = sample.fields.find(name);
    HOTLOOP_CHECK(
        found != sample.fields.end(),
        what,
        ": no field '",
        name,
        "', which the dataset's spec has (its fields: ",
        names_of(batch.fields),
        ")");
    const at::Tensor& field = found->second;
    HOTLOOP_CHECK(
        field.defined(), what, ": field '", name, "' is an undefined tensor");
    const at::Tensor into = rows[row];
    HOTLOOP_CHECK(
        field.sizes() == into.sizes(),
        what,
        ": field '",
        name,
        "' has shape ",
        field.sizes(),
        " but the dataset's spec says ",
        into.sizes());
    HOTLOOP_CHECK(
        !exact_dtype || field.scalar_type() == into.scalar_type(),
        what,
        ": field '",
        name,
        "' is ",
        field.scalar_type(),
        " but the dataset's spec says ",
        into.scalar_type());
    into.copy_(field);
  }
}

} // namespace detail
} // namespace hotloop::data
