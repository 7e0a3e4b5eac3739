#include "hotloop/dist/distributed_data_parallel.h"

#include "hotloop/core/error.h"
#include "hotloop/dist/sync_batch_norm.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include <algorithm>
#include <limits>
#include <sstream>
#include <type_traits>
#include <unordered_map>

namespace hotloop::dist {
namespace {

// PyTorch's DDP broadcasts module states in buckets of this size.
constexpr size_t kBroadcastBucketBytes = 250 * 1024 * 1024;

using Params = std::vector<at::Tensor>;
using Buckets = std::vector<std::vector<size_t>>;
using Limits = std::vector<size_t>;
using Group = c10::intrusive_ptr<c10d::ProcessGroup>;
using Sparse = std::vector<bool>;
using Names = std::unordered_map<size_t, std::string>;

// c10d::Reducer's constructor has changed across LibTorch versions; the
// arguments all versions share are these, and what later ones added is
// given its default (no skipping of unused parameters' all-reduce, the C++
// reducer). The one this LibTorch has is chosen at compile time.
template <typename Reducer = c10d::Reducer>
std::shared_ptr<Reducer> make_reducer(
    Params params,
    Buckets buckets,
    Limits limits,
    const Group& group,
    int64_t bucket_bytes,
    bool find_unused,
    bool as_view,
    Names names,
    int64_t first_bucket_bytes) {
  const Sparse sparse(params.size(), false);
  if constexpr (std::is_constructible_v<
                    Reducer,
                    Params,
                    Buckets,
                    Limits,
                    Group,
                    Sparse,
                    int64_t,
                    bool,
                    bool,
                    Names,
                    int64_t>) {
    return std::make_shared<Reducer>(
        std::move(params),
        std::move(buckets),
        std::move(limits),
        group,
        sparse,
        bucket_bytes,
        find_unused,
        as_view,
        std::move(names),
        first_bucket_bytes);
  } else if constexpr (std::is_constructible_v<
                           Reducer,
                           Params,
                           Buckets,
                           Group,
                           Sparse,
                           int64_t,
                           bool,
                           bool,
                           Names,
                           int64_t>) {
    return std::make_shared<Reducer>(
        std::move(params),
        std::move(buckets),
        group,
        sparse,
        bucket_bytes,
        find_unused,
        as_view,
        std::move(names),
        first_bucket_bytes);
  } else if constexpr (std::is_constructible_v<
                           Reducer,
                           Params,
                           Buckets,
                           Group,
                           Sparse,
                           int64_t,
                           bool,
                           bool,
                           Names,
                           int64_t,
                           bool,
                           bool>) {
    return std::make_shared<Reducer>(
        std::move(params),
        std::move(buckets),
        group,
        sparse,
        bucket_bytes,
        find_unused,
        as_view,
        std::move(names),
        first_bucket_bytes,
        /*skip_all_reduce_unused_params=*/false,
        /*use_python_reducer=*/false);
  } else if constexpr (std::is_constructible_v<
                           Reducer,
                           Params,
                           Buckets,
                           Group,
                           Sparse,
                           int64_t,
                           bool,
                           bool,
                           Names,
                           int64_t,
                           bool,
                           bool,
                           std::vector<int64_t>>) {
    return std::make_shared<Reducer>(
        std::move(params),
        std::move(buckets),
        group,
        sparse,
        bucket_bytes,
        find_unused,
        as_view,
        std::move(names),
        first_bucket_bytes,
        /*skip_all_reduce_unused_params=*/false,
        /*use_python_reducer=*/false,
        std::vector<int64_t>{first_bucket_bytes, bucket_bytes});
  } else {
    throw Error(
        "DistributedDataParallel: this LibTorch's c10d::Reducer takes "
        "arguments hotloop does not know; data parallelism is not available "
        "with it");
  }
}

std::string describe(const std::string& name, const at::Tensor& parameter) {
  std::ostringstream out;
  out << name << " " << parameter.sizes() << " "
      << c10::toString(parameter.scalar_type());
  return out.str();
}

} // namespace

struct DistributedDataParallel::Impl {
  std::vector<at::Tensor> parameters;
  std::vector<std::string> names;
  std::vector<at::Tensor> buffers;
  std::shared_ptr<c10d::Reducer> reducer;
  int64_t iterations = 0;
};

DistributedDataParallel::DistributedDataParallel(
    torch::nn::Module& module,
    std::shared_ptr<ProcessGroup> group,
    DistributedDataParallelOptions options)
    : module_(module),
      group_(std::move(group)),
      options_(options),
      impl_(std::make_unique<Impl>()) {
  HOTLOOP_CHECK(group_ != nullptr, "DistributedDataParallel: no process group");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.bucket_cap_mb() > 0 && options_.first_bucket_cap_mb() > 0,
      "DistributedDataParallel: bucket_cap_mb and first_bucket_cap_mb must be "
      "positive, got ",
      options_.bucket_cap_mb(),
      " and ",
      options_.first_bucket_cap_mb());
  if (options_.sync_batchnorm()) {
    attach_sync_batchnorm(module_, group_);
  }
  for (const auto& item : module_.named_parameters(/*recurse=*/true)) {
    if (item.value().requires_grad()) {
      impl_->names.push_back(item.key());
      impl_->parameters.push_back(item.value());
    }
  }
  for (const auto& buffer : module_.buffers(/*recurse=*/true)) {
    impl_->buffers.push_back(buffer);
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      !impl_->parameters.empty(),
      "DistributedDataParallel: the module has no parameter that requires a "
      "gradient");

  // The same model everywhere: rank 0's parameter list, as text, against
  // this process's. Every process learns whether any differs, so all stop.
  std::ostringstream signature;
  for (size_t i = 0; i < impl_->parameters.size(); ++i) {
    signature << describe(impl_->names[i], impl_->parameters[i]) << "\n";
  }
  const std::string mine = signature.str();
  at::Tensor length = at::tensor({static_cast<int64_t>(mine.size())});
  group_->broadcast(length);
  at::Tensor text = at::zeros({length.item<int64_t>()}, at::kByte);
  if (group_->rank() == 0) {
    std::copy(mine.begin(), mine.end(), text.data_ptr<uint8_t>());
  }
  group_->broadcast(text);
  const std::string rank0(
      reinterpret_cast<const char*>(text.data_ptr<uint8_t>()),
      static_cast<size_t>(text.numel()));
  std::string difference;
  if (rank0 != mine) {
    std::istringstream theirs_lines(rank0);
    std::istringstream mine_lines(mine);
    std::string theirs_line;
    std::string mine_line;
    while (true) {
      const bool more_theirs =
          static_cast<bool>(std::getline(theirs_lines, theirs_line));
      const bool more_mine =
          static_cast<bool>(std::getline(mine_lines, mine_line));
      if (!more_theirs && !more_mine) {
        break;
      }
      if (!more_theirs || !more_mine || theirs_line != mine_line) {
        difference = hotloop::detail::str_cat(
            "rank ",
            group_->rank(),
            "'s model differs from rank 0's: its parameter ",
            more_mine ? mine_line : "(none)",
            ", rank 0's ",
            more_theirs ? theirs_line : "(none)",
            " - every process must build the same model");
        break;
      }
    }
    group_->report_failure(difference);
  }
  at::Tensor differing =
      at::tensor({difference.empty() ? int64_t{0} : group_->rank() + 1});
  group_->all_reduce(differing, ReduceOp::kMax);
  if (!difference.empty()) {
    throw DistError(difference);
  }
  if (differing.item<int64_t>() > 0) {
    const std::string reported = group_->reported_failure();
    throw DistError(
        reported.empty() ? hotloop::detail::str_cat(
                               "rank ",
                               differing.item<int64_t>() - 1,
                               "'s model differs from rank 0's")
                         : reported);
  }

  // Every process starts from rank 0's parameters and buffers.
  {
    const at::NoGradGuard no_grad;
    std::vector<at::Tensor> states = impl_->parameters;
    states.insert(states.end(), impl_->buffers.begin(), impl_->buffers.end());
    try {
      c10d::broadcast_coalesced(
          group_->c10d(), states, kBroadcastBucketBytes, /*rank=*/0);
    } catch (const std::exception& error) {
      group_->rethrow(error, "the broadcast of rank 0's parameters");
    }
  }

  // As PyTorch's DDP: the first iteration puts every gradient in one
  // bucket, since the order gradients become ready is not known yet; the
  // reducer then rebuilds the buckets in that order (1 MiB first, then
  // bucket_cap_mb each), so each all-reduce starts as soon as its
  // gradients are done while the backward goes on.
  const int64_t bucket_bytes =
      static_cast<int64_t>(options_.bucket_cap_mb() * 1024 * 1024);
  const int64_t first_bucket_bytes = std::max<int64_t>(
      1, static_cast<int64_t>(options_.first_bucket_cap_mb() * 1024 * 1024));
  const std::vector<size_t> first_limits =
      options_.static_graph() || !options_.find_unused_parameters()
          ? std::vector<size_t>{std::numeric_limits<size_t>::max()}
          : std::vector<size_t>{
                static_cast<size_t>(first_bucket_bytes),
                static_cast<size_t>(bucket_bytes)};
  auto [bucket_indices, limits] = c10d::compute_bucket_assignment_by_size(
      impl_->parameters, first_limits, Sparse(impl_->parameters.size(), false));
  // Reversed: the last layers' gradients are ready first.
  std::reverse(bucket_indices.begin(), bucket_indices.end());
  std::reverse(limits.begin(), limits.end());
  Names names;
  for (size_t i = 0; i < impl_->names.size(); ++i) {
    names[i] = impl_->names[i];
  }
  impl_->reducer = make_reducer(
      impl_->parameters,
      std::move(bucket_indices),
      std::move(limits),
      group_->c10d(),
      bucket_bytes,
      options_.find_unused_parameters(),
      options_.gradient_as_bucket_view(),
      std::move(names),
      first_bucket_bytes);
  if (options_.static_graph()) {
    impl_->reducer->set_static_graph();
  }
}

DistributedDataParallel::~DistributedDataParallel() = default;

void DistributedDataParallel::prepare_for_backward(const at::Tensor& loss) {
  c10d::Reducer& reducer = *impl_->reducer;
  try {
    // After the first iteration: buckets in the order gradients arrived.
    reducer.rebuild_buckets();
  } catch (const std::exception& error) {
    group_->rethrow(error, "rebuilding the gradient buckets");
  }
  reducer.prepare_for_forward();
  ++impl_->iterations;
  if (options_.static_graph() && impl_->iterations == 1) {
    // A static graph's first backward all-reduces everything at its end
    // (PyTorch's DDPSink queues the same callback).
    std::weak_ptr<c10d::Reducer> weak = impl_->reducer;
    at::Tensor root = loss;
    root.register_hook([weak](const at::Tensor& grad) {
      torch::autograd::Engine::get_default_engine().queue_callback([weak] {
        if (auto reducer = weak.lock()) {
          reducer->delay_all_reduce();
        }
      });
      return grad;
    });
  }
  if (options_.find_unused_parameters() && !options_.static_graph()) {
    reducer.prepare_for_backward({loss});
  } else {
    reducer.prepare_for_backward({});
  }
}

void DistributedDataParallel::broadcast_buffers() {
  if (impl_->buffers.empty()) {
    return;
  }
  const at::NoGradGuard no_grad;
  try {
    c10d::broadcast_coalesced(
        group_->c10d(), impl_->buffers, kBroadcastBucketBytes, /*rank=*/0);
  } catch (const std::exception& error) {
    group_->rethrow(error, "the broadcast of rank 0's buffers");
  }
}

int64_t DistributedDataParallel::bucket_count() const {
  return static_cast<int64_t>(
      impl_->reducer->get_grad_buckets(/*return_zero_tensors=*/false).size());
}

} // namespace hotloop::dist
