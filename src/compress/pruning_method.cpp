#include "hotloop/compress/pruning_method.h"

#include "hotloop/core/error.h"

#include <ATen/ATen.h>
#include <ATen/TensorIndexing.h>

#include <vector>

namespace hotloop::compress {
namespace {

using at::indexing::Slice;
using at::indexing::TensorIndex;

// A negative dim counted from the end; ConfigError when outside `t`.
int64_t channel_dim(const at::Tensor& t, int64_t dim) {
  const int64_t dims = t.dim();
  HOTLOOP_CHECK_AS(
      ConfigError,
      dims > 1,
      "Structured pruning can only be applied to multidimensional tensors. "
      "Found tensor of shape ",
      t.sizes(),
      " with ",
      dims,
      " dims");
  HOTLOOP_CHECK_AS(
      ConfigError,
      dim < dims && dim >= -dims,
      "Invalid index ",
      dim,
      " for tensor of size ",
      t.sizes());
  return dim < 0 ? dim + dims : dim;
}

// Every dimension of `t` but `dim`.
std::vector<int64_t> other_dims(const at::Tensor& t, int64_t dim) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (d != dim) {
      dims.push_back(d);
    }
  }
  return dims;
}

// A zero mask of `t`'s shape with ones on the channels `channels` selects
// along `dim` (indices, or a bool per channel).
at::Tensor channel_mask(
    const at::Tensor& t, int64_t dim, const at::Tensor& channels) {
  at::Tensor mask = at::zeros_like(t, at::MemoryFormat::Contiguous);
  std::vector<TensorIndex> index(t.dim(), Slice());
  index[dim] = channels.to(t.device());
  mask.index_put_(index, 1);
  return mask;
}

} // namespace

at::Tensor L1Unstructured::compute_mask(
    const at::Tensor& t, const at::Tensor& default_mask) const {
  const int64_t prune = amount_.of(t.numel(), "L1Unstructured");
  at::Tensor mask = default_mask.clone(at::MemoryFormat::Contiguous);
  if (prune != 0) {
    const auto smallest =
        at::topk(t.abs().reshape(-1), prune, /*dim=*/-1, /*largest=*/false);
    mask.view(-1).index_put_({std::get<1>(smallest)}, 0);
  }
  return mask;
}

at::Tensor RandomUnstructured::compute_mask(
    const at::Tensor& t, const at::Tensor& default_mask) const {
  const int64_t prune = amount_.of(t.numel(), "RandomUnstructured");
  at::Tensor mask = default_mask.clone(at::MemoryFormat::Contiguous);
  if (prune != 0) {
    const at::Tensor probability =
        at::rand_like(t, at::MemoryFormat::Contiguous);
    const auto top = at::topk(probability.view(-1), prune);
    mask.view(-1).index_put_({std::get<1>(top)}, 0);
  }
  return mask;
}

at::Tensor LnStructured::compute_mask(
    const at::Tensor& t, const at::Tensor& default_mask) const {
  const int64_t dim = channel_dim(t, dim_);
  const int64_t channels = t.size(dim);
  const int64_t prune = amount_.of(channels, "LnStructured");
  if (prune == 0) {
    return default_mask;
  }
  const at::Tensor norm = at::norm(t, at::Scalar(n_), other_dims(t, dim));
  const auto kept = at::topk(norm, channels - prune, -1, /*largest=*/true);
  at::Tensor mask = channel_mask(t, dim, std::get<1>(kept));
  mask.mul_(default_mask.to(mask.scalar_type()));
  return mask;
}

at::Tensor RandomStructured::compute_mask(
    const at::Tensor& t, const at::Tensor& default_mask) const {
  const int64_t dim = channel_dim(t, dim_);
  const int64_t channels = t.size(dim);
  const int64_t prune = amount_.of(channels, "RandomStructured");
  if (prune == 0) {
    return default_mask;
  }
  const at::Tensor probability = at::rand({channels});
  const at::Tensor threshold = std::get<0>(at::kthvalue(probability, prune));
  at::Tensor mask = channel_mask(t, dim, probability > threshold);
  mask.mul_(default_mask.to(mask.scalar_type()));
  return mask;
}

at::Tensor CustomFromMask::compute_mask(
    const at::Tensor& t, const at::Tensor& default_mask) const {
  HOTLOOP_CHECK_AS(
      ConfigError,
      default_mask.sizes() == mask_.sizes(),
      "the mask has shape ",
      mask_.sizes(),
      ", the tensor ",
      default_mask.sizes());
  return default_mask *
         mask_.to(default_mask.device(), default_mask.scalar_type());
}

at::Tensor combine_masks(
    const PruningMethod& method, const at::Tensor& t, const at::Tensor& mask) {
  at::Tensor new_mask =
      mask.to(t.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
  std::vector<TensorIndex> slice;
  switch (method.type()) {
    case PruningType::kUnstructured:
      slice.emplace_back(mask == 1);
      break;
    case PruningType::kStructured: {
      const int64_t dim = channel_dim(t, method.dim());
      const at::Tensor keep = mask.sum(other_dims(t, dim)) != 0;
      slice.assign(t.dim(), Slice());
      slice[dim] = keep;
      break;
    }
    case PruningType::kGlobal:
      slice.assign(t.dim(), Slice());
      break;
  }
  const at::Tensor partial =
      method.compute_mask(t.index(slice), mask.index(slice));
  new_mask.index_put_(slice, partial.to(new_mask.scalar_type()));
  return new_mask;
}

} // namespace hotloop::compress
