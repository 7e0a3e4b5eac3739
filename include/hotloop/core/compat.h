#pragma once

// The one place that hides differences between LibTorch 1.13 (Debian, CPU)
// and LibTorch 2.x (the CUDA wheels). Code elsewhere calls these helpers
// instead of testing TORCH_VERSION_* itself.

#include <ATen/autocast_mode.h>
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Exception.h>
#include <torch/optim/optimizer.h>
#include <torch/version.h>

#include <cmath>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

/// LibTorch's version as one comparable number: 1.13 -> 113, 2.4 -> 204.
#define HOTLOOP_TORCH_VERSION (TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR)

/// c10d from 2.0 on splits a ProcessGroup from its backends (Gloo, NCCL),
/// which are set on it; in 1.13 ProcessGroupGloo is the process group.
#define HOTLOOP_C10D_HAS_BACKENDS (HOTLOOP_TORCH_VERSION >= 200)

#if HOTLOOP_TORCH_VERSION >= 200
#include <ATen/Context.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#endif
#if HOTLOOP_TORCH_VERSION >= 201
#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/_fused_adamw.h>
#endif
#if HOTLOOP_TORCH_VERSION >= 202
#include <ATen/ops/_foreach_mul.h>
#endif
#if HOTLOOP_TORCH_VERSION < 200
#include <ATen/ops/baddbmm.h>
#include <ATen/ops/dropout.h>
#include <ATen/ops/full.h>
#endif

namespace hotloop::compat {

/// Every tensor of `list` times the 0-dim tensor `scalar`, in place: one
/// multi-tensor kernel from LibTorch 2.2 on (`_foreach_mul_`'s Tensor
/// overload, which reads the factor on the device, as a captured CUDA
/// graph needs), a kernel per tensor before.
inline void foreach_mul_(at::TensorList list, const at::Tensor& scalar) {
#if HOTLOOP_TORCH_VERSION >= 202
  at::_foreach_mul_(list, scalar);
#else
  for (const at::Tensor& t : list) {
    at::Tensor(t).mul_(scalar);
  }
#endif
}

/// foreach_mul_'s out-of-place form.
inline std::vector<at::Tensor> foreach_mul(
    at::TensorList list, const at::Tensor& scalar) {
#if HOTLOOP_TORCH_VERSION >= 202
  return at::_foreach_mul(list, scalar);
#else
  std::vector<at::Tensor> out;
  out.reserve(list.size());
  for (const at::Tensor& t : list) {
    out.push_back(t.mul(scalar));
  }
  return out;
#endif
}

/// Drops every gradient of `optimizer`'s parameters (PyTorch's
/// `zero_grad(set_to_none=True)`): the next backward writes fresh gradient
/// tensors instead of adding into zero-filled ones, which saves a memset per
/// parameter and lets the allocator reuse the memory. LibTorch 1.13's
/// `zero_grad()` has no such flag and zero-fills; 2.x defaults to it.
inline void zero_grad_set_to_none(torch::optim::Optimizer& optimizer) {
#if HOTLOOP_TORCH_VERSION >= 200
  optimizer.zero_grad(/*set_to_none=*/true);
#else
  for (auto& group : optimizer.param_groups()) {
    for (auto& param : group.params()) {
      if (param.mutable_grad().defined()) {
        param.mutable_grad().reset();
      }
    }
  }
#endif
}

/// Autocast state per device type (CPU or CUDA). LibTorch 2.4 replaced the
/// per-device
// functions (`set_cpu_enabled`, `set_autocast_gpu_dtype`, ...) with ones
// taking the device type and deprecated the old names; 1.13 to 2.3 have only
// the old ones. Callers pass CPU or CUDA only (check_autocast_device).
#if HOTLOOP_TORCH_VERSION >= 204
inline bool autocast_enabled(c10::DeviceType type) {
  return at::autocast::is_autocast_enabled(type);
}
inline void set_autocast_enabled(c10::DeviceType type, bool enabled) {
  at::autocast::set_autocast_enabled(type, enabled);
}
inline at::ScalarType autocast_dtype(c10::DeviceType type) {
  return at::autocast::get_autocast_dtype(type);
}
inline void set_autocast_dtype(c10::DeviceType type, at::ScalarType dtype) {
  at::autocast::set_autocast_dtype(type, dtype);
}
#else
inline bool autocast_enabled(c10::DeviceType type) {
  return type == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled()
                                      : at::autocast::is_enabled();
}
inline void set_autocast_enabled(c10::DeviceType type, bool enabled) {
  if (type == c10::DeviceType::CPU) {
    at::autocast::set_cpu_enabled(enabled);
  } else {
    at::autocast::set_enabled(enabled);
  }
}
inline at::ScalarType autocast_dtype(c10::DeviceType type) {
  return type == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype()
                                      : at::autocast::get_autocast_gpu_dtype();
}
inline void set_autocast_dtype(c10::DeviceType type, at::ScalarType dtype) {
  if (type == c10::DeviceType::CPU) {
    at::autocast::set_autocast_cpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
}
#endif

/// Whether ATen has CPU kernels for `_amp_foreach_non_finite_check_and_
/// unscale_` and `_amp_update_scale_`: PyTorch registered them in 2.3
/// (pytorch/pytorch#109281, for `torch.amp.GradScaler("cpu")`); 1.13 has
/// them for CUDA (and Meta) only. The GradScaler test checks this against
/// the dispatcher of the LibTorch it is built with.
constexpr bool cpu_has_amp_scaler_kernels() {
  return HOTLOOP_TORCH_VERSION >= 203;
}

/// Whether ATen has the fused Adam and AdamW updates (`_fused_adam_`,
/// `_fused_adamw_`, one kernel per step for a whole list of parameters, as
/// PyTorch's `fused=True`) for parameters on devices of `type`, with the
/// overload that reads the learning rate from a tensor: on CUDA from
/// LibTorch 2.1 (the tensor-rate overload, pytorch/pytorch#106916; the
/// kernels came in 2.0), on the CPU from 2.4; none in 1.13.
constexpr bool has_fused_adam(c10::DeviceType type) {
  return (type == c10::DeviceType::CUDA && HOTLOOP_TORCH_VERSION >= 201) ||
         (type == c10::DeviceType::CPU && HOTLOOP_TORCH_VERSION >= 204);
}

/// The rate of a fused update: a number, or a 0-dim float32 tensor on the
/// parameters' device that the kernel reads when it runs (a captured CUDA
/// graph then follows a schedule without being captured again).
struct FusedRate {
  double value = 0;
  const at::Tensor* tensor = nullptr;
};

/// One fused Adam (`decoupled` false: the weight decay added to the
/// gradient) or AdamW (`decoupled` true: the parameters scaled by 1 - lr *
/// weight_decay) update of `params` in place, as PyTorch's
/// `torch.optim.Adam(W)(fused=True)` runs it: every list holds the tensors
/// of one device and dtype; `steps` are float32 counts on that device,
/// already advanced to this step (the kernels read them for the bias
/// corrections and do not advance them); `max_exp_avg_sqs` is empty
/// unless `amsgrad`. Only where has_fused_adam(device type) is true: 1.13
/// throws.
inline void fused_adam(
    bool decoupled,
    at::TensorList params,
    at::TensorList grads,
    at::TensorList exp_avgs,
    at::TensorList exp_avg_sqs,
    at::TensorList max_exp_avg_sqs,
    at::TensorList steps,
    const FusedRate& lr,
    double beta1,
    double beta2,
    double weight_decay,
    double eps,
    bool amsgrad) {
#if HOTLOOP_TORCH_VERSION >= 201
  // Each op has a number-rate and a tensor-rate overload.
  const auto run = [&](const auto& rate) {
    if (decoupled) {
      at::_fused_adamw_(
          params,
          grads,
          exp_avgs,
          exp_avg_sqs,
          max_exp_avg_sqs,
          steps,
          rate,
          beta1,
          beta2,
          weight_decay,
          eps,
          amsgrad,
          /*maximize=*/false);
    } else {
      at::_fused_adam_(
          params,
          grads,
          exp_avgs,
          exp_avg_sqs,
          max_exp_avg_sqs,
          steps,
          rate,
          beta1,
          beta2,
          weight_decay,
          eps,
          amsgrad,
          /*maximize=*/false);
    }
  };
  if (lr.tensor != nullptr) {
    run(*lr.tensor);
  } else {
    run(lr.value);
  }
#else
  TORCH_CHECK(
      false,
      "fused Adam/AdamW: LibTorch ",
      TORCH_VERSION_MAJOR,
      ".",
      TORCH_VERSION_MINOR,
      " has no fused kernels (2.1 on CUDA, 2.4 on the "
      "CPU)");
#endif
}

/// Whether set_sdpa_backend can choose `backend` (one of auto, flash,
/// efficient, cudnn, math) here: 1.13 has no fused attention (math is its
/// only path); the cuDNN one is switchable from 2.4 on.
inline bool has_sdpa_backend(const std::string& backend) {
#if HOTLOOP_TORCH_VERSION >= 204
  return true;
#elif HOTLOOP_TORCH_VERSION >= 200
  return backend != "cudnn";
#else
  return backend == "auto" || backend == "math";
#endif
}

/// Allows scaled_dot_product_attention the one kernel `backend` names
/// ("flash", "efficient", "cudnn", "math"), or all LibTorch allows by
/// default ("auto"), for the whole process; `backend` is one that
/// has_sdpa_backend accepts.
inline void set_sdpa_backend(const std::string& backend) {
#if HOTLOOP_TORCH_VERSION >= 200
  auto& context = at::globalContext();
  const bool all = backend == "auto";
  context.setSDPUseFlash(all || backend == "flash");
  context.setSDPUseMemEfficient(all || backend == "efficient");
  context.setSDPUseMath(all || backend == "math");
#if HOTLOOP_TORCH_VERSION >= 204
  context.setSDPUseCuDNN(all || backend == "cudnn");
#endif
#else
  (void)backend; // math, 1.13's only attention
#endif
}

/// Causal scaled-dot-product attention, softmax(q k^T / sqrt(D)) v, where
/// position i attends to positions 0..i only; `dropout_p` drops attention
/// weights (pass 0 when not training). q, k, v: [B, H, T, D], same dtype and
/// device; returns [B, H, T, D]. LibTorch 2.x has
/// `at::scaled_dot_product_attention` (fused flash / memory-efficient
/// kernels that never build the [T, T] matrix); 1.13 has only the private
/// `_scaled_dot_product_attention`, so there the masked softmax is written
/// out. Where nanoGPT's non-flash path scales the scores and fills the
/// future with -inf in two passes over [B, H, T, T] (and two more in the
/// backward), the product here starts from a [T, T] bias of 0s and -infs
/// and takes the scale as its alpha: one `baddbmm`, which the backward
/// needs no pass of its own for.
inline at::Tensor causal_attention(
    const at::Tensor& q,
    const at::Tensor& k,
    const at::Tensor& v,
    double dropout_p) {
#if HOTLOOP_TORCH_VERSION >= 200
  return at::scaled_dot_product_attention(
      q, k, v, /*attn_mask=*/{}, dropout_p, /*is_causal=*/true);
#else
  const int64_t t = q.size(-2);
  const int64_t d = q.size(-1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const at::Tensor future =
      at::full({t, t}, -INFINITY, q.options()).triu(/*diagonal=*/1);
  at::Tensor att = at::baddbmm(
                       future,
                       q.reshape({-1, t, d}),
                       k.reshape({-1, t, d}).transpose(1, 2),
                       /*beta=*/1,
                       /*alpha=*/scale)
                       .softmax(-1);
  if (dropout_p > 0) {
    att = at::dropout(att, dropout_p, /*train=*/true);
  }
  std::vector<int64_t> sizes = q.sizes().vec();
  sizes.back() = v.size(-1);
  return att.bmm(v.reshape({-1, t, v.size(-1)})).view(sizes);
#endif
}

/// `Function::apply(args...)` of a `torch::autograd::Function`. GCC 14 at
/// -O2 takes the `vector<bool>::reserve` that LibTorch 2.x's `apply` makes
/// of its input flags for a write past an 8-byte buffer
/// (-Wstringop-overflow, -Warray-bounds; the vector is empty and reserves
/// one flag per argument): a false positive of the compiler's on
/// `vector<bool>`, silenced here for this call alone. GCC judges inlined
/// code by the pragmas of the function it ends up in, so `apply` is
/// inlined into this one (flatten) and this one into no other (noinline).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 14
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Warray-bounds"
#endif
template <typename Function, typename... Args>
[[gnu::noinline, gnu::flatten]] auto apply_function(Args&&... args) {
  return Function::apply(std::forward<Args>(args)...);
}
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 14
#pragma GCC diagnostic pop
#endif

namespace detail {
template <typename StoreOptions, typename = void>
struct HasUseLibUV : std::false_type {};
template <typename StoreOptions>
struct HasUseLibUV<
    StoreOptions,
    std::void_t<decltype(std::declval<StoreOptions&>().useLibUV)>>
    : std::true_type {};

template <typename Event, typename = void>
struct HasStartNs : std::false_type {};
template <typename Event>
struct HasStartNs<
    Event,
    std::void_t<decltype(std::declval<const Event&>().startNs())>>
    : std::true_type {};
} // namespace detail

/// The start and duration of one of LibTorch's profiler events
/// (`torch::autograd::profiler::KinetoEvent`) in microseconds, the unit of
/// Chrome traces: LibTorch 2.x gives nanoseconds (`startNs`,
/// `durationNs`), 1.13 microseconds (`startUs`, `durationUs`); looked up by
/// member, not by version.
template <typename Event>
double profiler_event_start_us(const Event& event) {
  if constexpr (detail::HasStartNs<Event>::value) {
    return static_cast<double>(event.startNs()) / 1000.0;
  } else {
    return static_cast<double>(event.startUs());
  }
}
template <typename Event>
double profiler_event_duration_us(const Event& event) {
  if constexpr (detail::HasStartNs<Event>::value) {
    return static_cast<double>(event.durationNs()) / 1000.0;
  } else {
    return static_cast<double>(event.durationUs());
  }
}

/// Chooses the server of c10d's TCPStore: libuv's (`use` true) or the
/// classic one. LibTorch 2.4 and later serve on libuv unless told otherwise
/// (`TCPStoreOptions::useLibUV`), and one built without libuv, such as
/// Debian 13's 2.6, then cannot make a store at all. Returns whether this
/// LibTorch has the choice (the member is looked for, not the version);
/// 1.13's store has only the classic server. Both speak the same protocol
/// to the store's clients.
template <typename StoreOptions>
bool use_libuv_store(StoreOptions& options, bool use) {
  if constexpr (detail::HasUseLibUV<StoreOptions>::value) {
    options.useLibUV = use;
    return true;
  } else {
    return false;
  }
}

} // namespace hotloop::compat
