#include "hotloop/train/detail/trace_recorder.h"

#include "hotloop/core/compat.h"
#include "hotloop/train/checkpoint.h"
#include "hotloop/train/device.h"

#include <ATen/record_function.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <set>
#include <utility>

#include <unistd.h>

namespace hotloop::train::detail {
namespace {

namespace prof = torch::profiler::impl;

// On CUDA the trace also records each allocation and free of the caching
// allocator (torch.profiler's profile_memory): a cuDNN search allocates
// the largest workspace among the algorithms it times, so its allocations
// say which it could time.
prof::ProfilerConfig kineto_config(bool memory) {
  return prof::ProfilerConfig(
      prof::ProfilerState::KINETO,
      /*report_input_shapes=*/false,
      /*profile_memory=*/memory);
}

// The Chrome trace of `result`'s CPU events in torch.profiler's layout,
// for a LibTorch whose ProfilerResult cannot save itself (no Kineto).
nlohmann::json cpu_trace(
    const torch::autograd::profiler::ProfilerResult& result) {
  nlohmann::json events = nlohmann::json::array();
  const auto pid = static_cast<int64_t>(getpid());
  for (const auto& event : result.events()) {
    if (event.deviceType() != c10::DeviceType::CPU) {
      continue;
    }
    const bool annotation =
        event.scope() == static_cast<uint8_t>(at::RecordScope::USER_SCOPE);
    events.push_back({
        {"ph", "X"},
        {"cat", annotation ? "user_annotation" : "cpu_op"},
        {"name", event.name()},
        {"pid", pid},
        {"tid", event.startThreadId()},
        {"ts", compat::profiler_event_start_us(event)},
        {"dur", compat::profiler_event_duration_us(event)},
    });
  }
  return {
      {"schemaVersion", 1},
      {"traceEvents", std::move(events)},
      {"displayTimeUnit", "ms"},
      {"hotloop_writer",
       "CPU operators written by hotloop (this LibTorch has no Kineto)"},
  };
}

} // namespace

TraceRecorder::TraceRecorder(std::string path, c10::Device device)
    : path_(std::move(path)), device_(device) {
  std::set<prof::ActivityType> activities{prof::ActivityType::CPU};
  if (device_.is_cuda()) {
    activities.insert(prof::ActivityType::CUDA);
  }
  const prof::ProfilerConfig config = kineto_config(device_.is_cuda());
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
  running_ = true;
}

TraceRecorder::~TraceRecorder() {
  step_.reset();
  if (running_) {
    try {
      torch::autograd::profiler::disableProfiler();
    } catch (const std::exception&) {
    }
  }
}

void TraceRecorder::begin_step(int64_t step) {
  end_step();
  step_ = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
  if (step_->isActive()) {
    step_->before("ProfilerStep#" + std::to_string(step));
  }
}

void TraceRecorder::end_step() {
  step_.reset(); // its destructor ends the annotation
}

std::string TraceRecorder::finish() {
  end_step();
  // The kernels still queued belong to the traced steps.
  synchronize_device(device_);
  running_ = false;
  const std::unique_ptr<torch::autograd::profiler::ProfilerResult> result =
      torch::autograd::profiler::disableProfiler();
  const std::string partial = path_ + ".tmp";
  try {
    result->save(partial);
    std::filesystem::rename(partial, path_);
    return "Kineto";
  } catch (const c10::Error&) {
    // Saving needs Kineto; without it LibTorch's events are all there is.
    std::remove(partial.c_str());
  }
  const nlohmann::json trace = cpu_trace(*result);
  write_file_atomically(
      path_, [&](std::ostream& out) { out << trace.dump() << "\n"; });
  return "CPU operators (this LibTorch has no Kineto)";
}

} // namespace hotloop::train::detail
