#include "hotloop/data/tensor_dataset.h"

#include "hotloop/core/error.h"

#include <ATen/ATen.h>

#include <cstring>
#include <string>

namespace hotloop::data {
namespace {

at::Tensor checked(at::Tensor tensor, const std::string& name) {
  HOTLOOP_CHECK_AS(
      DataError,
      tensor.defined() && tensor.dim() >= 1,
      name,
      " must be [N, ...], got a scalar or undefined tensor");
  HOTLOOP_CHECK_AS(
      DataError,
      tensor.device().is_cpu(),
      name,
      " must be on the CPU, got ",
      tensor.device());
  return tensor.contiguous();
}

// "field 'mask'", as messages name it.
std::string field_name(const std::string& name) {
  return hotloop::detail::str_cat("field '", name, "'");
}

// Copies row indices[k] of `src` into row k of `dst`: one memcpy per row.
void gather_rows(
    const at::Tensor& src,
    c10::ArrayRef<int64_t> indices,
    at::Tensor& dst,
    const std::string& name) {
  const int64_t n = src.size(0);
  const int64_t row_bytes = n > 0 ? src.nbytes() / n : 0;
  HOTLOOP_CHECK(
      dst.is_contiguous() && dst.scalar_type() == src.scalar_type() &&
          dst.dim() == src.dim() && dst.size(0) == int64_t(indices.size()) &&
          dst.sizes().slice(1) == src.sizes().slice(1),
      "the batch's ",
      name,
      " is ",
      dst.scalar_type(),
      dst.sizes(),
      "; expected a contiguous ",
      src.scalar_type(),
      " tensor of ",
      indices.size(),
      " rows of ",
      src.sizes().slice(1));
  const auto* from = static_cast<const char*>(src.data_ptr());
  auto* to = static_cast<char*>(dst.data_ptr());
  for (size_t k = 0; k < indices.size(); ++k) {
    const int64_t i = indices[k];
    HOTLOOP_CHECK(
        i >= 0 && i < n,
        "sample index ",
        i,
        " is out of range for a dataset of ",
        n);
    if (row_bytes > 0) {
      std::memcpy(to + k * row_bytes, from + i * row_bytes, row_bytes);
    }
  }
}

} // namespace

TensorDataset::TensorDataset(
    at::Tensor inputs, at::Tensor targets, Fields fields)
    : inputs_(checked(std::move(inputs), "inputs")),
      targets_(checked(std::move(targets), "targets")) {
  HOTLOOP_CHECK_AS(
      DataError,
      inputs_.size(0) == targets_.size(0),
      "there are ",
      inputs_.size(0),
      " inputs but ",
      targets_.size(0),
      " targets");
  for (auto& [name, tensor] : fields) {
    const std::string what = field_name(name);
    at::Tensor field = checked(std::move(tensor), what);
    HOTLOOP_CHECK_AS(
        DataError,
        field.size(0) == inputs_.size(0),
        "there are ",
        inputs_.size(0),
        " inputs but ",
        field.size(0),
        " rows of ",
        what);
    fields_.emplace(name, std::move(field));
  }
}

int64_t TensorDataset::size() const {
  return inputs_.size(0);
}

SampleSpec TensorDataset::spec() const {
  SampleSpec spec{
      inputs_.sizes().slice(1).vec(),
      inputs_.scalar_type(),
      targets_.sizes().slice(1).vec(),
      targets_.scalar_type()};
  for (const auto& [name, field] : fields_) {
    spec.fields.emplace(
        name, FieldSpec{field.sizes().slice(1).vec(), field.scalar_type()});
  }
  return spec;
}

Example TensorDataset::get(
    int64_t index, const SampleContext& /*context*/) const {
  check_index(index);
  Example example{inputs_[index].clone(), targets_[index].clone()};
  for (const auto& [name, field] : fields_) {
    example.fields.emplace(name, field[index].clone());
  }
  return example;
}

void TensorDataset::get_batch(
    c10::ArrayRef<int64_t> indices,
    const SampleContext& /*context*/,
    Batch& out) const {
  gather_rows(inputs_, indices, out.input, "input");
  gather_rows(targets_, indices, out.target, "target");
  for (const auto& [name, field] : fields_) {
    at::Tensor rows = out.field(name); // the same storage as out's
    gather_rows(field, indices, rows, field_name(name));
  }
}

} // namespace hotloop::data
