#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <ostream>
#include <string>

namespace hotloop::train {

/// What a bottleneck verdict needs to know about the run's settings.
struct ProfileContext {
  int64_t num_workers = 0;
  bool pin_memory = false;
  bool cuda = false;
  int64_t log_every_n_steps = 0;
  /// trainer.precision and trainer.channels_last, so that advice names
  /// what is not on yet.
  std::string precision = "32-true";
  bool channels_last = false;
  /// The model has 4-D weights (convolutions), the layers channels_last
  /// changes: no advice to turn it on otherwise.
  bool convolutional = false;
  /// trainer.cuda_graphs: a launch-bound step is advised to capture.
  bool cuda_graphs = false;
  /// False when one batch already holds the whole training set, or when
  /// the loader's batch_size does not set the batch (a batch_sampler of
  /// its own, batch_size=None): no advice to raise data.batch_size then.
  bool batch_can_grow = true;
};

/// On an asynchronous device the Trainer times every
/// kSyncedStepInterval-th optimizer step (from the middle of the first
/// interval) with the device synchronised at each phase boundary.
constexpr int64_t kSyncedStepInterval = 100;

/// A fit's first optimizer steps (first-call allocations, algorithm
/// searches, compilation) that steady_samples_per_s leaves out.
constexpr int64_t kWarmupSteps = 10;

/// Where the training steps' time went over a fit, by phase, in seconds.
/// The fields are host times over every step; on an asynchronous device
/// (CUDA) they say when work was queued, not when it ran, so the phase
/// shares printed and judged come from the steps timed with the device
/// synchronised (`synced`) when there are any. Validation is kept apart
/// from the step time.
struct StepProfile {
  /// Waiting for the loader's next batch.
  double data = 0;
  /// Host-to-device copy and input conversion (dtype, memory format).
  double h2d = 0;
  /// training_step under autocast.
  double forward = 0;
  double backward = 0;
  /// Waiting, after this process's backward, for the all-reduce of the
  /// gradients of every process (data parallelism; what the backward did
  /// not hide).
  double comm = 0;
  /// Unscale, clipping, optimizer and schedule steps.
  double optimizer = 0;
  /// Callbacks (those inside the step too: on_train_batch_start,
  /// on_before_optimizer_step), logging and checkpoints.
  double logging = 0;
  double validation = 0;
  /// Seconds from the model on its device with its optimizers made (where
  /// metrics.csv's elapsed_s starts) to the first training step:
  /// callbacks, a restored checkpoint, the sanity check and the model
  /// summary (on a GPU also their first kernels and cuDNN's first
  /// algorithm choices).
  double setup = 0;
  /// `setup` by part, each timed to the end of its device work (they add
  /// up to it): "callbacks" (the loggers' files, callbacks' setup and
  /// on_fit_start), "checkpoint" (a resumed fit's), "strategy" (the
  /// step's state; data parallelism's first broadcast), "sanity_check",
  /// "model_summary" (and printing it).
  std::map<std::string, double> setup_parts;
  int64_t samples = 0;
  int64_t steps = 0;
  /// Seconds from this process's start (the kernel's record of it) to the
  /// start of the fit's first training step, and to the end of its
  /// kWarmupSteps-th step with the device's queued work done; negative
  /// when not reached. bench/run prints both beside the Python loop's.
  double process_to_first_step = -1;
  double process_to_warmup_end = -1;
  /// Training FLOPs per sample (forward + backward: 3 times the model's
  /// forward FLOPs; for the GPT nanoGPT's 6N + 12 L H Q T per token, the
  /// count bench/run's MFU column uses), 0 when unknown.
  double flops_per_sample = 0;
  /// Tokens per sample of a sequence model (0: not one); the rates are
  /// then also given in tokens/s.
  int64_t tokens_per_sample = 0;
  /// The device's peak FLOP/s that utilization() divides by, 0 when not
  /// known: trainer.peak_tflops where given (bench/run passes its table's
  /// dense bf16 peak), else the matrix-multiply rate measured in the
  /// training dtype (measure_peak_flops).
  double peak_flops = 0;
  /// Where peak_flops came from: "trainer.peak_tflops" or "measured".
  std::string peak_source;
  /// Whether the device runs asynchronously to the host (not the CPU).
  bool asynchronous = false;
  /// Whether several processes trained together: comm is then a phase of
  /// its own in phases(), the printed profile and the verdict.
  bool data_parallel = false;
  /// Phase seconds (names as phases()) of the steps timed with the device
  /// synchronised at each phase boundary, and how many there were.
  std::map<std::string, double> synced;
  int64_t synced_steps = 0;
  /// Phase seconds (names as phases()) of the fit's first optimizer step,
  /// timed with the device synchronised at each phase boundary: where its
  /// first-call costs went (cuDNN's algorithm searches, library loading,
  /// a callback's first-step work). Not in `synced`.
  std::map<std::string, double> first_step;

  double step_seconds() const {
    return data + h2d + forward + backward + comm + optimizer + logging;
  }
  double samples_per_s() const;
  /// Step seconds and samples of the fit's first kWarmupSteps steps (zero
  /// when it took no more steps than that).
  double warmup_seconds = 0;
  int64_t warmup_samples = 0;
  /// Samples per second after the warm-up steps: the rate a longer run
  /// approaches. samples_per_s() when there were no more steps.
  double steady_samples_per_s() const;
  /// Achieved FLOP/s at the steady rate (steady_samples_per_s, as bench/run's
  /// MFU column counts it); 0 when FLOPs are unknown.
  double flops_per_s() const;
  /// Model FLOPs utilization: flops_per_s() / peak_flops; 0 when either is
  /// unknown. The launch-bound verdict reads it.
  double utilization() const {
    return peak_flops > 0 ? flops_per_s() / peak_flops : 0;
  }
  /// utilization() with what it was computed from, as the verdict and the
  /// printed profile say it: "28.0% MFU (6N+12LHQT-style FLOPs x the steady
  /// rate / 989.4 TFLOP/s from trainer.peak_tflops)"; empty when unknown.
  std::string utilization_text() const;
  /// The step phases by name (data, h2d, forward, backward, optimizer,
  /// logging, and comm when data_parallel), in seconds.
  std::map<std::string, double> phases() const;
  /// The phase times that shares and the verdict are read from: `synced`
  /// on an asynchronous device that has synced steps, else phases().
  std::map<std::string, double> share_basis() const;
  /// One line naming the bottleneck and the option to change, such as
  /// "input-bound: 63% of step time waiting for data - raise
  /// data.num_workers (now 1)" or, with several processes,
  /// "communication-bound: ...".
  std::string verdict(const ProfileContext& context) const;
  /// The profile as printed at the end of fit: phase shares, rates, verdict.
  void print(std::ostream& out, const ProfileContext& context) const;
};

/// The rate at which `device` multiplies large square matrices of `dtype`,
/// in FLOP/s: the practical peak a training step can approach (vendor peaks
/// are not reachable, and a CPU's depends on its clock and vector units).
/// Takes about a quarter of a second; uses no random numbers, so training
/// stays reproducible. Works on any device LibTorch supports.
double measure_peak_flops(c10::Device device, c10::ScalarType dtype);

} // namespace hotloop::train
