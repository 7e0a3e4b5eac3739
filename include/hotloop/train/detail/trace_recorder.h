#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>

namespace at {
struct RecordFunction;
} // namespace at

namespace hotloop::train::detail {

/// trainer.profiler=pytorch: LibTorch's profiler over a run of training
/// steps, written as a Chrome trace in the layout torch.profiler's
/// export_chrome_trace writes, so that bench/trace_summary.py reads both
/// sides of a benchmark alike. It runs LibTorch's Kineto profiler (what
/// torch.profiler runs): where LibTorch has Kineto (the CUDA wheels) the
/// trace is Kineto's own, with the CPU operators and, on a CUDA device, the
/// kernels, copies, memsets and CUDA runtime and driver calls; where it has
/// none (Debian's LibTorch) the CPU operators are written by hotloop in the
/// same layout ({"traceEvents": [...]}, cat cpu_op and user_annotation).
/// Each step is marked by a user annotation "ProfilerStep#N", as
/// torch.profiler marks steps. Not thread-safe: one thread starts, marks
/// and finishes (LibTorch's profiler records that thread's operators and
/// the device's work).
class TraceRecorder {
 public:
  /// Starts the profiler; the trace goes to `path` at finish. On a CUDA
  /// `device` CUDA's activity is recorded too.
  TraceRecorder(std::string path, c10::Device device);
  /// Stops the profiler if finish did not (writes nothing).
  ~TraceRecorder();
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  /// Ends the open step's annotation, if any, and opens step `step`'s
  /// ("ProfilerStep#<step>").
  void begin_step(int64_t step);
  /// Ends the open step's annotation, if any.
  void end_step();
  /// Waits for the device's queued work, stops the profiler and writes the
  /// trace (atomically); returns how it was written: "Kineto" or "CPU
  /// operators (this LibTorch has no Kineto)".
  std::string finish();

 private:
  std::string path_;
  c10::Device device_;
  std::unique_ptr<at::RecordFunction> step_;
  bool running_ = false;
};

} // namespace hotloop::train::detail
