#include "hotloop/dist/sync_batch_norm.h"

#include "hotloop/core/compat.h"
#include "hotloop/core/error.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/functional/batchnorm.h>

#include <vector>

namespace hotloop::dist {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct GroupHolder : torch::CustomClassHolder {
  explicit GroupHolder(std::shared_ptr<ProcessGroup> group)
      : group(std::move(group)) {}
  std::shared_ptr<ProcessGroup> group;
};

// The sum over every process of each one's `values`; its backward is the
// same sum of the output gradients, since every process's output depends
// on every process's input.
struct AllReduceSum : torch::autograd::Function<AllReduceSum> {
  static at::Tensor forward(
      AutogradContext* ctx,
      const at::Tensor& values,
      const std::shared_ptr<ProcessGroup>& group) {
    ctx->saved_data["group"] =
        c10::IValue::make_capsule(c10::make_intrusive<GroupHolder>(group));
    at::Tensor sum = values.contiguous().clone();
    group->all_reduce(sum);
    return sum;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto holder = ctx->saved_data["group"].toCapsule();
    at::Tensor sum = grads[0].contiguous().clone();
    static_cast<GroupHolder*>(holder.get())->group->all_reduce(sum);
    return {sum, at::Tensor()};
  }
};

} // namespace

SyncBatchNormImpl::SyncBatchNormImpl(const torch::nn::BatchNormOptions& options)
    : NormImplBase(options) {}

void SyncBatchNormImpl::_check_input_dim(const at::Tensor& input) {
  HOTLOOP_CHECK(
      input.dim() >= 2 && input.size(1) == options.num_features(),
      "SyncBatchNorm(",
      options.num_features(),
      "): expected an input [N, ",
      options.num_features(),
      ", ...], got ",
      input.sizes());
}

at::Tensor SyncBatchNormImpl::forward(const at::Tensor& input) {
  _check_input_dim(input);
  // Running averages as torch::nn::BatchNorm keeps them: a momentum, or
  // without one the mean over all batches so far.
  double factor = options.momentum().value_or(0.0);
  if (is_training() && options.track_running_stats() &&
      num_batches_tracked.defined()) {
    num_batches_tracked += 1;
    if (!options.momentum().has_value()) {
      factor = 1.0 / num_batches_tracked.item<double>();
    }
  }
  if (group_ == nullptr || group_->world_size() == 1 || !is_training()) {
    return torch::nn::functional::detail::batch_norm(
        input,
        running_mean,
        running_var,
        weight,
        bias,
        is_training() || !options.track_running_stats(),
        factor,
        options.eps());
  }

  // Statistics of the processes' batches together: the per-channel sums
  // and counts first, then the squared deviations from that mean (two
  // passes, as exact as one process's variance).
  const int64_t channels = input.size(1);
  std::vector<int64_t> dims{0};
  std::vector<int64_t> shape(input.dim(), 1);
  shape[1] = channels;
  for (int64_t d = 2; d < input.dim(); ++d) {
    dims.push_back(d);
  }
  const bool low_precision = input.scalar_type() == at::kHalf ||
                             input.scalar_type() == at::kBFloat16;
  const at::Tensor x = low_precision ? input.to(at::kFloat) : input;
  const double local = static_cast<double>(input.numel() / channels);
  const at::Tensor sums = compat::apply_function<AllReduceSum>(
      at::cat({x.sum(dims), at::full({1}, local, x.options())}), group_);
  const double count = sums[channels].item<double>();
  HOTLOOP_CHECK(
      count > 1,
      "SyncBatchNorm(",
      channels,
      "): expected more than 1 value per channel in training over all ",
      group_->world_size(),
      " processes, got ",
      count);
  const at::Tensor mean = sums.narrow(0, 0, channels) / count;
  const at::Tensor centered = x - mean.view(shape);
  const at::Tensor square_sums = compat::apply_function<AllReduceSum>(
      centered.square().sum(dims), group_);
  const at::Tensor var = square_sums / count;
  at::Tensor out = centered * (var + options.eps()).rsqrt().view(shape);
  if (weight.defined()) {
    out = at::addcmul(bias.view(shape), out, weight.view(shape));
  }
  if (options.track_running_stats() && running_mean.defined()) {
    at::NoGradGuard no_grad;
    running_mean.mul_(1 - factor).add_(mean.detach(), factor);
    running_var.mul_(1 - factor).add_(
        var.detach() * (count / (count - 1)), factor);
  }
  return low_precision ? out.to(input.scalar_type()) : out;
}

void SyncBatchNormImpl::pretty_print(std::ostream& stream) const {
  stream << std::boolalpha << "hotloop::dist::SyncBatchNorm("
         << options.num_features() << ", eps=" << options.eps()
         << ", momentum=";
  if (options.momentum().has_value()) {
    stream << *options.momentum();
  } else {
    stream << "None";
  }
  stream << ", affine=" << options.affine()
         << ", track_running_stats=" << options.track_running_stats() << ")";
}

void attach_sync_batchnorm(
    torch::nn::Module& module, const std::shared_ptr<ProcessGroup>& group) {
  namespace nn = torch::nn;
  for (const auto& item : module.named_modules()) {
    if (auto* sync = item.value()->as<SyncBatchNormImpl>()) {
      sync->set_group(group);
      continue;
    }
    const char* type = item.value()->as<nn::BatchNorm1dImpl>() ? "BatchNorm1d"
        : item.value()->as<nn::BatchNorm2dImpl>()              ? "BatchNorm2d"
        : item.value()->as<nn::BatchNorm3dImpl>()              ? "BatchNorm3d"
                                                               : nullptr;
    HOTLOOP_CHECK_AS(
        ConfigError,
        type == nullptr,
        "sync_batchnorm: the model's '",
        item.key(),
        "' is a torch::nn::",
        type,
        ", whose statistics would stay per process (a LibTorch module's "
        "children cannot be swapped once built); build the model with "
        "hotloop::dist::SyncBatchNorm there: the same parameters and "
        "buffers, and in one process the same results");
  }
}

} // namespace hotloop::dist
