#include "hotloop/train/detail/graphed_step.h"

#include "hotloop/core/compat.h"
#include "hotloop/core/error.h"
#include "hotloop/train/precision.h"

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/util/Exception.h>

// CMakeLists.txt sets HOTLOOP_HAS_CUDA_GRAPHS to 1 where LibTorch has CUDA
// and its CUDAGraph header compiles.
#ifndef HOTLOOP_HAS_CUDA_GRAPHS
#define HOTLOOP_HAS_CUDA_GRAPHS 0
#endif
#if HOTLOOP_HAS_CUDA_GRAPHS
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hotloop::train::detail {

#if HOTLOOP_HAS_CUDA_GRAPHS
namespace {
// What a captured step's buffers fix: a batch of another shape, layout,
// dtype or device runs eagerly.
struct Layout {
  struct Of {
    explicit Of(const at::Tensor& t)
        : defined(t.defined()),
          sizes(defined ? t.sizes().vec() : std::vector<int64_t>()),
          strides(defined ? t.strides().vec() : std::vector<int64_t>()),
          dtype(defined ? t.scalar_type() : at::ScalarType::Undefined),
          device(defined ? t.device() : c10::Device(c10::kCPU)) {}
    bool operator==(const Of& other) const {
      return defined == other.defined && sizes == other.sizes &&
             strides == other.strides && dtype == other.dtype &&
             device == other.device;
    }
    bool defined;
    std::vector<int64_t> sizes;
    std::vector<int64_t> strides;
    at::ScalarType dtype;
    c10::Device device;
  };
  explicit Layout(const data::Batch& batch)
      : input(batch.input), target(batch.target) {
    for (const auto& [name, tensor] : batch.fields) {
      fields.emplace_back(name, Of(tensor));
    }
  }
  bool operator==(const Layout& other) const {
    return input == other.input && target == other.target &&
           fields == other.fields;
  }
  Of input;
  Of target;
  std::vector<std::pair<std::string, Of>> fields;
};

// Where an optimizer's scalars live (none: it steps no parameter).
const void* scalars_storage(const optim::GraphStep& optimizer) {
  const at::Tensor& scalars = optimizer.graph_scalars();
  return scalars.defined() ? scalars.data_ptr() : nullptr;
}

// After an error inside a capture: ends it, so that the stream can be used
// again (the graph is discarded).
void end_failed_capture(at::cuda::CUDAGraph& graph) {
  try {
    graph.capture_end();
  } catch (const c10::Error&) {
  }
}

} // namespace

struct GraphedStep::Graph {
  explicit Graph(c10::DeviceIndex device)
      : stream(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device)) {
  }

  // Where the warm-up, the capture and the replays run (a capture cannot
  // use the default stream); the caller's stream and it wait for each
  // other at every step's start and end.
  c10::cuda::CUDAStream stream;
  at::cuda::CUDAGraph graph;
  bool captured = false;
  // The layout of the warm-up's first batch: the one captured.
  std::optional<Layout> layout;
};
#else
struct GraphedStep::Graph {};
#endif

GraphedStep::GraphedStep(
    Module& module,
    const OptimizerSetup& setup,
    const Precision& precision,
    std::function<void()> clip)
    : module_(module), precision_(precision), clip_(std::move(clip)) {
  for (size_t i = 0; i < setup.optimizers.size(); ++i) {
    torch::optim::Optimizer& optimizer = *setup.optimizers[i];
    auto* graph_step = dynamic_cast<optim::GraphStep*>(&optimizer);
    HOTLOOP_CHECK_AS(
        ConfigError,
        graph_step != nullptr,
        "trainer.cuda_graphs=true: optimizer ",
        i + 1,
        " of ",
        setup.optimizers.size(),
        " (",
        c10::demangle(typeid(optimizer).name()),
        ") has no step a CUDA graph can replay; hotloop's SGD, Adam and "
        "AdamW (optimizer.name sgd, adam, adamw) have one");
    optimizers_.push_back(graph_step);
    for (const auto& group : optimizer.param_groups()) {
      parameters_.insert(
          parameters_.end(), group.params().begin(), group.params().end());
    }
  }
#if HOTLOOP_HAS_CUDA_GRAPHS
  const c10::Device device = precision.device();
  if (device.is_cuda()) {
    graph_ = std::make_unique<Graph>(
        device.has_index() ? device.index() : c10::cuda::current_device());
  }
#endif
}

GraphedStep::~GraphedStep() = default;

bool GraphedStep::available() {
  return HOTLOOP_HAS_CUDA_GRAPHS != 0;
}

bool GraphedStep::captured() const {
#if HOTLOOP_HAS_CUDA_GRAPHS
  return graph_ != nullptr && graph_->captured;
#else
  return false;
#endif
}

at::Tensor GraphedStep::run(
    const data::Batch& batch, int64_t batch_idx, MetricCollection& metrics) {
  if (graph_ == nullptr) {
    return eager(batch, batch_idx, metrics);
  }
#if HOTLOOP_HAS_CUDA_GRAPHS
  Graph& graph = *graph_;
  const c10::cuda::CUDAStream caller =
      c10::cuda::getCurrentCUDAStream(graph.stream.device_index());
  auto wait_for = [](const c10::Stream& waiter, const c10::Stream& waited) {
    c10::Event event(waited.device_type());
    event.record(waited);
    event.block(waiter);
  };
  wait_for(graph.stream, caller);
  // The batch came for the caller's stream; it is read on this one too.
  data::for_each_tensor(batch, [&](const at::Tensor& tensor) {
    at::Tensor(tensor).record_stream(graph.stream);
  });
  at::Tensor loss;
  {
    const c10::cuda::CUDAStreamGuard on_graph_stream(graph.stream);
    const Layout layout(batch);
    if (!graph.layout.has_value()) {
      graph.layout = layout;
    }
    if (layout == *graph.layout && graph.captured) {
      loss = replay(batch, metrics);
    } else if (layout == *graph.layout && eager_steps_ >= kWarmupSteps) {
      loss = capture(batch, batch_idx);
      metrics.log_last(static_metrics_);
    } else {
      loss = eager(batch, batch_idx, metrics);
    }
  }
  wait_for(caller, graph.stream);
  return loss;
#else
  return at::Tensor();
#endif
}

at::Tensor GraphedStep::forward_backward(
    const data::Batch& batch, int64_t batch_idx, MetricCollection& metrics) {
  // In place: after a capture, the gradients' memory is what its replays
  // write (before it, the warm-up's own).
  for (const at::Tensor& parameter : parameters_) {
    if (parameter.grad().defined()) {
      at::Tensor(parameter.grad()).zero_();
    }
  }
  at::Tensor loss;
  {
    const AutocastGuard autocast = precision_.autocast();
    loss = module_.training_step(batch, batch_idx, metrics);
  }
  loss.backward();
  clip_();
  return loss.detach();
}

at::Tensor GraphedStep::eager(
    const data::Batch& batch, int64_t batch_idx, MetricCollection& metrics) {
  at::Tensor loss = forward_backward(batch, batch_idx, metrics);
  prepare_optimizers();
  if (captured()) {
    check_not_stale();
  }
  step_optimizers();
  ++eager_steps_;
  return loss;
}

void GraphedStep::prepare_optimizers() {
  for (optim::GraphStep* optimizer : optimizers_) {
    optimizer->prepare_graph_step();
  }
}

void GraphedStep::step_optimizers() {
  for (optim::GraphStep* optimizer : optimizers_) {
    optimizer->graph_step();
  }
}

void GraphedStep::check_not_stale() const {
  for (size_t i = 0; i < optimizers_.size(); ++i) {
    const std::string stale = optimizers_[i]->graph_step_stale();
    HOTLOOP_CHECK(
        stale.empty(),
        "trainer.cuda_graphs=true: optimizer ",
        i + 1,
        ": ",
        stale);
  }
}

at::Tensor GraphedStep::capture(const data::Batch& batch, int64_t batch_idx) {
#if HOTLOOP_HAS_CUDA_GRAPHS
  Graph& graph = *graph_;
  static_batch_ = data::transformed(
      batch, [](const at::Tensor& tensor) { return tensor.clone(); });
  static_metrics_.reset();
  // The scalars of this step: a capture records the work, it runs none.
  prepare_optimizers();
  scalars_.clear();
  for (optim::GraphStep* optimizer : optimizers_) {
    scalars_.push_back(scalars_storage(*optimizer));
  }
  // The gradients are made inside the capture, in the graph's memory, by
  // the backward's own kernels, so each replay writes them afresh: no
  // zeroing kernel per parameter in the graph (PyTorch's whole-network
  // capture sets them to None before it the same way). An eager step after
  // it (a batch of another shape) zeroes these in place. Which ones had a
  // gradient is kept: the scalars above were prepared for those.
  std::vector<bool> had_grad;
  had_grad.reserve(parameters_.size());
  for (const at::Tensor& parameter : parameters_) {
    had_grad.push_back(parameter.grad().defined());
    at::Tensor(parameter).mutable_grad() = at::Tensor();
  }
  // Free what the allocator caches, as torch.cuda.graph does before its
  // capture: a capture allocates from the graph's own pool and cannot take
  // back cached blocks, such as the gradients just dropped.
  c10::cuda::device_synchronize();
  c10::cuda::CUDACachingAllocator::emptyCache();
  try {
    // Thread-local: the loader's threads may pin memory meanwhile (the
    // mode argument came with LibTorch 2.1).
#if HOTLOOP_TORCH_VERSION >= 201
    graph.graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
#else
    graph.graph.capture_begin();
#endif
    static_loss_ = forward_backward(static_batch_, batch_idx, static_metrics_);
    step_optimizers();
    graph.graph.capture_end();
  } catch (const c10::OutOfMemoryError&) {
    end_failed_capture(graph.graph);
    throw; // the batch size finder's signal
  } catch (const c10::Error& error) {
    end_failed_capture(graph.graph);
    throw Error(hotloop::detail::str_cat(
        "trainer.cuda_graphs=true: the training step could not be captured "
        "as a CUDA graph: ",
        error.what_without_backtrace(),
        " - a captured step may not read values back to the host (item(), "
        "printing a tensor), synchronise, or choose its work by the data; "
        "set trainer.cuda_graphs=false to train eagerly (in a new process: "
        "CUDA's allocator may still count this capture as running)"));
  }
  // A parameter whose gradient the warm-up made and the captured backward
  // did not (or the other way round) would be stepped with scalars meant
  // for another: the replay below would already be wrong.
  for (size_t i = 0; i < parameters_.size(); ++i) {
    HOTLOOP_CHECK(
        parameters_[i].grad().defined() == had_grad[i],
        "trainer.cuda_graphs=true: the captured backward ",
        had_grad[i] ? "made no gradient for" : "made a gradient for",
        " parameter ",
        i + 1,
        " of ",
        parameters_.size(),
        ", which the steps before it ",
        had_grad[i] ? "did" : "did not",
        " (a gradient appeared or went away): the graph cannot hold that");
  }
  graph.captured = true;
  graph.graph.replay();
  return static_loss_.clone();
#else
  return at::Tensor();
#endif
}

at::Tensor GraphedStep::replay(
    const data::Batch& batch, MetricCollection& metrics) {
#if HOTLOOP_HAS_CUDA_GRAPHS
  auto copy_in = [](const at::Tensor& from, const at::Tensor& to) {
    if (from.defined()) {
      to.copy_(from, /*non_blocking=*/true);
    }
  };
  copy_in(batch.input, static_batch_.input);
  copy_in(batch.target, static_batch_.target);
  // The layout matched the captured one: the same fields.
  for (const auto& [name, to] : static_batch_.fields) {
    copy_in(batch.fields.at(name), to);
  }
  prepare_optimizers();
  for (size_t i = 0; i < optimizers_.size(); ++i) {
    HOTLOOP_CHECK(
        scalars_storage(*optimizers_[i]) == scalars_[i],
        "trainer.cuda_graphs=true: optimizer ",
        i + 1,
        " steps other parameters than when the step was captured (a "
        "gradient appeared or went away): the graph cannot hold that");
  }
  check_not_stale();
  graph_->graph.replay();
  metrics.log_last(static_metrics_);
  return static_loss_.clone();
#else
  return at::Tensor();
#endif
}

} // namespace hotloop::train::detail
