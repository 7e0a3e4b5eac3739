#include "hotloop/models/chunked_cross_entropy.h"

#include "hotloop/core/compat.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

// The kernels' declarations; CMakeLists.txt defines HOTLOOP_HAS_CUDA_KERNELS
// (1 where it builds them: LibTorch with CUDA, and CUDA's compiler; 0
// elsewhere), which guards their calls below.
#include "softmax_cross_entropy_kernels.h"

namespace hotloop::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class ChunkedCrossEntropy
    : public torch::autograd::Function<ChunkedCrossEntropy> {
 public:
  static at::Tensor forward(
      AutogradContext* ctx,
      const at::Tensor& hidden,
      const at::Tensor& weight,
      const at::Tensor& targets,
      int64_t chunk_rows,
      at::ScalarType compute,
      bool fused,
      bool wanted) {
    const int64_t width = hidden.size(-1);
    const at::Tensor rows = hidden.reshape({-1, width});
    // Contiguous, as the fused kernel reads them (a strided 1-D view stays
    // strided through reshape).
    const at::Tensor labels = targets.reshape({-1}).contiguous();
    const int64_t n = rows.size(0);
    // The loss and the gradients' sums in float32, or double for double.
    const at::ScalarType wide = at::promote_types(compute, at::kFloat);
    // The count of counted targets as a device scalar: no read-back.
    const at::Tensor counted = labels.ne(-1);
    const at::Tensor scale = counted.sum().to(wide).reciprocal();
    const at::Tensor w = weight.to(compute);
    // Every operand is cast to `compute` here: autocast has no say below.
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(
        c10::autocast_dispatch_keyset);
    at::Tensor total = at::zeros({}, hidden.options().dtype(wide));
    at::Tensor grad_rows;
    at::Tensor grad_weight;
    // What log-softmax's backward takes for the loss of one chunk: minus
    // one at each counted target, zero elsewhere. Zeroed once; each chunk
    // writes its targets and clears them after.
    at::Tensor seed;
    at::Tensor minus_counted;
    if (wanted) {
      grad_rows = at::empty({n, width}, hidden.options().dtype(wide));
      grad_weight = at::zeros_like(weight, weight.options().dtype(wide));
    }
    at::Tensor losses;
    if (fused) {
      losses = at::empty(
          {std::min(n, chunk_rows)}, labels.options().dtype(at::kFloat));
    } else if (wanted) {
      seed = at::zeros(
          {std::min(n, chunk_rows), weight.size(0)},
          hidden.options().dtype(compute));
      minus_counted = counted.to(compute).neg().unsqueeze(1);
    }
    for (int64_t start = 0; start < n; start += chunk_rows) {
      const int64_t end = std::min(n, start + chunk_rows);
      const at::Tensor x = rows.slice(0, start, end).to(compute);
      // d loss / d logits of the chunk: softmax - one_hot(target) on
      // counted rows (the 1 / count comes in backward), zero elsewhere;
      // undefined without gradients.
      at::Tensor grad;
#if HOTLOOP_HAS_CUDA_KERNELS
      if (fused) {
        // One kernel: the rows' losses, and the logits replaced by their
        // gradient.
        at::Tensor logits = at::mm(x, w.t());
        at::Tensor chunk_losses = losses.slice(0, 0, end - start);
        cuda::softmax_cross_entropy_(
            logits, labels.slice(0, start, end), chunk_losses, wanted);
        total.add_(chunk_losses.sum());
        if (wanted) {
          grad = logits;
        }
      }
#endif
      if (!fused) {
        // One kernel each way, as PyTorch's cross_entropy on these logits:
        // log-softmax in the products' dtype, its sums in float32.
        const at::Tensor log_probs =
            at::_log_softmax(at::mm(x, w.t()), 1, /*half_to_float=*/false);
        const at::Tensor index =
            labels.slice(0, start, end).clamp_min(0).unsqueeze(1);
        const at::Tensor mask = counted.slice(0, start, end).unsqueeze(1);
        total.sub_(log_probs.gather(1, index)
                       .to(wide)
                       .masked_fill(mask.logical_not(), 0)
                       .sum());
        if (wanted) {
          // Log-softmax's backward of the seed.
          at::Tensor chunk_seed = seed.slice(0, 0, end - start);
          chunk_seed.scatter_(1, index, minus_counted.slice(0, start, end));
          grad = at::_log_softmax_backward_data(
              chunk_seed, log_probs, 1, compute);
          chunk_seed.scatter_(1, index, 0);
        }
      }
      if (wanted) {
        grad_rows.slice(0, start, end).copy_(at::mm(grad, w));
        grad_weight.add_(at::mm(grad.t(), x));
      }
    }
    if (wanted) {
      ctx->save_for_backward({grad_rows, grad_weight, scale});
    }
    ctx->saved_data["hidden_sizes"] = hidden.sizes().vec();
    ctx->saved_data["hidden_dtype"] =
        static_cast<int64_t>(hidden.scalar_type());
    ctx->saved_data["weight_dtype"] =
        static_cast<int64_t>(weight.scalar_type());
    return total.mul_(scale);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // The gradients were made in the forward, with no graph of their own.
    TORCH_CHECK(
        !at::GradMode::is_enabled(),
        "chunked_cross_entropy (model.loss_chunk_size) has no double "
        "backward (backward with create_graph): set model.loss_chunk_size=0 "
        "for it");
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& go = grads.at(0);
    const auto hidden_dtype =
        static_cast<at::ScalarType>(ctx->saved_data["hidden_dtype"].toInt());
    const auto weight_dtype =
        static_cast<at::ScalarType>(ctx->saved_data["weight_dtype"].toInt());
    const std::vector<int64_t> sizes =
        ctx->saved_data["hidden_sizes"].toIntVector();
    const at::Tensor factor = go * saved.at(2);
    return {
        saved.at(0).mul(factor).reshape(sizes).to(hidden_dtype),
        saved.at(1).mul(factor).to(weight_dtype),
        at::Tensor(),
        at::Tensor(),
        at::Tensor(),
        at::Tensor(),
        at::Tensor()};
  }
};

// The dtype the plain path's linear would multiply in: autocast's where it
// is on for the device, else the input's.
at::ScalarType product_dtype(const at::Tensor& hidden) {
  const c10::DeviceType type = hidden.device().type();
  if ((type == c10::DeviceType::CPU || type == c10::DeviceType::CUDA) &&
      compat::autocast_enabled(type) &&
      at::isFloatingType(hidden.scalar_type())) {
    return compat::autocast_dtype(type);
  }
  return hidden.scalar_type();
}

} // namespace

bool chunked_cross_entropy_is_fused(
    const at::Tensor& hidden,
    const at::Tensor& targets,
    at::ScalarType compute) {
#if HOTLOOP_HAS_CUDA_KERNELS
  return hidden.is_cuda() && targets.device() == hidden.device() &&
      targets.scalar_type() == at::kLong &&
      (compute == at::kFloat || compute == at::kBFloat16 ||
       compute == at::kHalf);
#else
  return false;
#endif
}

at::Tensor chunked_cross_entropy(
    const at::Tensor& hidden,
    const at::Tensor& weight,
    const at::Tensor& targets,
    int64_t chunk_rows,
    bool fused) {
  TORCH_CHECK(
      chunk_rows > 0,
      "chunked_cross_entropy: chunk_rows must be positive, got ",
      chunk_rows);
  TORCH_CHECK(
      weight.dim() == 2 && hidden.size(-1) == weight.size(1),
      "chunked_cross_entropy: hidden [..., ",
      hidden.size(-1),
      "] does not fit weight ",
      weight.sizes());
  TORCH_CHECK(
      targets.numel() * hidden.size(-1) == hidden.numel(),
      "chunked_cross_entropy: targets ",
      targets.sizes(),
      " do not match hidden ",
      hidden.sizes());
  const at::ScalarType compute = product_dtype(hidden);
  // Gradients are worked out in the forward only where a backward can
  // follow: not under no_grad or inference mode (an evaluation), where
  // the parameters still require them.
  const bool wanted = at::GradMode::is_enabled() &&
      (hidden.requires_grad() || weight.requires_grad());
  return compat::apply_function<ChunkedCrossEntropy>(
      hidden,
      weight,
      targets,
      chunk_rows,
      compute,
      fused && chunked_cross_entropy_is_fused(hidden, targets, compute),
      wanted);
}

} // namespace hotloop::models
