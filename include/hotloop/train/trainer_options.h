#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <optional>
#include <string>

namespace hotloop::train {

/// Trainer settings, named as Lightning's Trainer flags. Validated when the
/// Trainer is built.
struct TrainerOptions {
  /// Epochs to train; > 0, or -1 for no limit (as Lightning's
  /// `max_epochs=-1`): the fit then ends by max_steps, max_time, a
  /// callback's stop (EarlyStopping) or a signal.
  TORCH_ARG(int64_t, max_epochs) = 10;
  /// Train at least this many epochs even when a callback (EarlyStopping,
  /// Timer) asks to stop earlier; 0: no minimum.
  TORCH_ARG(int64_t, min_epochs) = 0;
  /// Stop after this many optimizer steps; -1 for no limit.
  TORCH_ARG(int64_t, max_steps) = -1;
  /// The limit_* options, as in Lightning: -1 for every batch, a fraction
  /// in (0, 1) of the loader's batches (rounded down; an error when that
  /// is none), or a whole number of batches. Unlike Lightning, 1.0 means
  /// one batch: a double cannot tell Lightning's 1 from 1.0; use -1 for all.
  /// Batches per training epoch; > 0 or -1.
  TORCH_ARG(double, limit_train_batches) = -1;
  /// Batches per validation run; 0 turns validation off.
  TORCH_ARG(double, limit_val_batches) = -1;
  /// Batches per test run.
  TORCH_ARG(double, limit_test_batches) = -1;
  /// Batches per predict run.
  TORCH_ARG(double, limit_predict_batches) = -1;
  /// How often to validate within an epoch: a value in (0, 1] is a
  /// fraction of the epoch (0.25: four times per epoch), a whole number > 1
  /// a count of training batches (at most one epoch's worth). Fractions are
  /// rounded down to whole optimizer steps; counts must be a multiple of
  /// accumulate_grad_batches, so validation (and the checkpoints taken
  /// after it) always fall between optimizer steps.
  TORCH_ARG(double, val_check_interval) = 1.0;
  /// Validate in every n-th epoch (and always after the last).
  TORCH_ARG(int64_t, check_val_every_n_epoch) = 1;
  /// Train on the same first n batches every epoch (the training loader's
  /// epoch-0 order, augmentation included) to check that the model can
  /// overfit them, and validate on the first n validation batches (as
  /// Lightning 2 does); a fraction or a whole number as for limit_*; 0
  /// turns it off.
  TORCH_ARG(double, overfit_batches) = 0;
  /// Sum gradients over this many batches per optimizer step.
  TORCH_ARG(int64_t, accumulate_grad_batches) = 1;
  /// Numeric precision, as Lightning names it: 32-true, 16-mixed (autocast
  /// to float16 with dynamic loss scaling; CUDA), bf16-mixed (autocast to
  /// bfloat16), bf16-true (parameters and inputs in bfloat16), 64-true
  /// (parameters and inputs in float64).
  TORCH_ARG(std::string, precision) = "32-true";
  /// Drop gradients after each optimizer step (PyTorch's
  /// zero_grad(set_to_none=True)); false zero-fills them, as older PyTorch
  /// did. Kept switchable for the ablation benchmark.
  TORCH_ARG(bool, zero_grad_set_to_none) = true;
  /// Clip gradients at this value; 0 turns clipping off.
  TORCH_ARG(double, gradient_clip_val) = 0;
  /// "norm": scale all gradients so their global 2-norm is at most
  /// gradient_clip_val; "value": clamp each element to +-gradient_clip_val.
  TORCH_ARG(std::string, gradient_clip_algorithm) = "norm";
  /// Stop after this many seconds of fitting, counted across resumes (a
  /// Timer callback checked after each optimizer step); 0 for no limit.
  TORCH_ARG(double, max_time) = 0;
  /// Run this many training and validation batches once, as a smoke test:
  /// one epoch, no run folder, no checkpoint, no loggers, no
  /// checkpoint/early-stopping/lr-monitor callbacks; 0 turns it off.
  TORCH_ARG(int64_t, fast_dev_run) = 0;
  /// Validation batches run before training starts, to catch a broken
  /// validation_step early; 0 turns it off, -1 runs them all.
  TORCH_ARG(int64_t, num_sanity_val_steps) = 2;
  /// Make LibTorch use deterministic algorithms (errors where none exists).
  TORCH_ARG(bool, deterministic) = false;
  /// Let cuDNN benchmark convolution algorithms for each input shape and
  /// keep the fastest (the shapes of a training loop rarely change).
  TORCH_ARG(bool, benchmark) = true;
  /// With benchmark, the most algorithms cuDNN times for a convolution's
  /// shape: the first of its heuristics' list (PyTorch's
  /// torch.backends.cudnn.benchmark_limit, 10 by default); 0 times them
  /// all. It bounds the timing runs only: LibTorch 2.x builds a plan for
  /// every algorithm cuDNN offers for the shape before it times any, and
  /// that building is most of a search (ResNet-18's first step on an
  /// H200: 1.9 s of searches while the device was busy 33 ms); fewer
  /// spare two runs and a synchronisation each. >= 0.
  TORCH_ARG(int64_t, benchmark_limit) = 10;
  /// The kernel of scaled-dot-product attention (the GPT's): "auto" leaves
  /// LibTorch's choice; "flash", "efficient" (memory-efficient), "cudnn" or
  /// "math" allows that one alone (LibTorch 2.x), for the ablation that
  /// measures them. LibTorch 1.13 has math only (compat::causal_attention).
  TORCH_ARG(std::string, sdpa_backend) = "auto";
  /// Autograd anomaly detection: slow, for debugging NaNs only.
  TORCH_ARG(bool, detect_anomaly) = false;
  /// Evaluate under c10::InferenceMode (no graph, no version counters);
  /// false: under NoGradGuard, for models that keep evaluation outputs
  /// for later autograd use.
  TORCH_ARG(bool, inference_mode) = true;
  /// "auto", "cpu", "cuda", "gpu" or "cuda:N"; see resolve_device.
  TORCH_ARG(std::string, accelerator) = "auto";
  /// "auto", "1", or one device index as "[N]"; see resolve_device.
  TORCH_ARG(std::string, devices) = "auto";
  /// Keep 4-D parameters and inputs in channels-last memory format, which
  /// convolution kernels on tensor cores (and oneDNN) prefer.
  TORCH_ARG(bool, channels_last) = false;
  /// Capture the whole training step (forward, backward, clipping, the
  /// optimizer's update) as a CUDA graph after 3 eager warm-up steps and
  /// replay it for every batch of the same shape: one launch per step
  /// instead of one per kernel, for models too small to keep a GPU busy
  /// from the host (see detail::GraphedStep). Needs a CUDA device, one
  /// process, accumulate_grad_batches=1, a precision without loss scaling
  /// (32-true, bf16-mixed, bf16-true, 64-true), on_nonfinite_loss stop or
  /// ignore, and SGD, Adam or AdamW; each is checked at fit start with an error
  /// naming it. The step must not read values back to the host. Callbacks'
  /// on_before_optimizer_step runs after the replayed update (the gradients
  /// are the step's, clipped).
  TORCH_ARG(bool, cuda_graphs) = false;
  /// When >= 0, fit/validate/test/predict first seed LibTorch's generators
  /// with it (Lightning's seed_everything); -1 leaves them as they are.
  TORCH_ARG(int64_t, seed) = -1;
  /// The step-time profile (printed at the end of fit, in summary.json) is
  /// always kept; "pytorch" also records LibTorch's profiler over
  /// profiler_steps optimizer steps after the first profiler_skip_steps, as
  /// a Chrome trace `<run folder>/trace.json` (open in chrome://tracing or
  /// Perfetto; summarise with bench/trace_summary.py). Where LibTorch has
  /// Kineto (the CUDA wheels) the trace holds the CPU operators and, on
  /// CUDA, the kernels, copies and runtime calls and the caching
  /// allocator's allocations and frees (torch.profiler's profile_memory);
  /// elsewhere the CPU operators. Each traced step is marked by a user
  /// annotation "ProfilerStep#N" (N the global step from 1) from its start
  /// to the next step's, as torch.profiler marks steps.
  TORCH_ARG(std::string, profiler) = "";
  TORCH_ARG(int64_t, profiler_steps) = 5;
  /// Steps of the fit before the traced ones (>= 0): 2 leaves out the first
  /// calls' allocations and algorithm searches; 0 traces the warm-up.
  TORCH_ARG(int64_t, profiler_skip_steps) = 2;
  /// The device's peak rate in TFLOP/s that the step profile's MFU and
  /// verdict divide by (bench/run passes the GPU's dense bf16 peak from its
  /// table, so that the two report one figure); 0 measures the device's
  /// matrix-multiply rate in the training dtype at the end of fit instead.
  TORCH_ARG(double, peak_tflops) = 0;
  /// Runs go to `<default_root_dir>/<name>/version_N`; empty: no files.
  TORCH_ARG(std::string, default_root_dir) = "runs";
  TORCH_ARG(std::string, name) = "default";
  /// Lightning's logger=True: a run with a run folder and no logger of the
  /// caller's own gets `metrics.csv` (CsvLogger) and a TensorBoard event
  /// file (TensorBoardLogger) there, so `hotloop report` can draw it.
  /// false: no default loggers.
  TORCH_ARG(bool, logger) = true;
  /// A fit resumed from a checkpoint that lies in a run folder's
  /// `checkpoints/` goes on in that folder (its metrics.csv and TensorBoard
  /// log continue from the checkpoint's step: one history). true: a new
  /// version folder instead.
  TORCH_ARG(bool, new_folder_on_resume) = false;
  /// What a loss that is NaN or infinite does (under 16-mixed the loss
  /// scaler handles overflows instead): "stop" ends the fit with an Error
  /// naming the step, the last finite loss and what to change; "skip_step"
  /// drops that optimizer step (its gradients, metrics and schedule step);
  /// "ignore" trains on. On the CPU (and for skip_step anywhere) the loss is
  /// read every step; on a GPU, stop reads a flag gathered on the device
  /// every log_every_n_steps steps, so as not to wait for it every step,
  /// and names the steps in between.
  TORCH_ARG(std::string, on_nonfinite_loss) = "stop";
  /// Intra-op threads for LibTorch; 0 = auto (see resolve_intra_op_threads).
  TORCH_ARG(int64_t, num_threads) = 0;
  /// Worker threads of the BLAS library itself (OpenBLAS), set at fit
  /// start; 0 leaves the library's default. 1 lets LibTorch's intra-op
  /// threads own the cores instead of competing with a second spinning pool
  /// (see set_blas_threads).
  TORCH_ARG(int64_t, blas_threads) = 1;
  /// Keep freed host memory for reuse (retain_freed_host_memory): saves a
  /// page fault per touched page of every activation, every step.
  TORCH_ARG(bool, retain_host_memory) = true;
  /// Checkpoint through a ModelCheckpoint callback: when none was added, a
  /// default one writes `checkpoints/last.ckpt` and the latest
  /// `epoch=E-step=S.ckpt` after every epoch.
  TORCH_ARG(bool, enable_checkpointing) = true;
  /// On SIGINT/SIGTERM finish the current optimizer step, write
  /// `last.ckpt` and return from fit with `interrupted` set.
  TORCH_ARG(bool, handle_signals) = true;
  /// Show progress: a live bar on a terminal, otherwise a line every
  /// log_every_n_steps batches; and one line per epoch.
  TORCH_ARG(bool, enable_progress_bar) = true;
  /// Optimizer steps between metric records sent to the loggers (and
  /// between progress lines when output is not a terminal); 0: none.
  TORCH_ARG(int64_t, log_every_n_steps) = 50;
  /// Optimizer steps between writes of the loggers' buffered records to
  /// disk (Lightning's CSVLogger flush_logs_every_n_steps), besides every
  /// epoch end, stop signal and the end of fit; 0: only then.
  TORCH_ARG(int64_t, flush_logs_every_n_steps) = 100;
};

/// Checks every option, throwing ConfigError that names the one out of
/// range, and applies what fast_dev_run implies (Lightning's: n batches of
/// each, once, no files). Returns the options a Trainer runs with.
TrainerOptions resolve_trainer_options(TrainerOptions options);

/// What of `options` a captured CUDA-graph step (trainer.cuda_graphs)
/// cannot hold - gradient accumulation, on_nonfinite_loss=skip_step,
/// 16-mixed's loss scaling - as the error text that names it; empty when
/// nothing. The fit also refuses several processes and optimizers without
/// a graph-safe step.
std::string cuda_graphs_conflict(const TrainerOptions& options);

namespace detail {

/// `available` limited to `limit` batches; -1: all of them.
inline int64_t limited(int64_t available, int64_t limit) {
  return limit < 0 ? available : (available < limit ? available : limit);
}

/// The batches a limit_* value (see TrainerOptions::limit_train_batches)
/// leaves of a loader's `available` ones; ConfigError naming
/// `trainer.<name>` when a fraction leaves none.
int64_t resolve_limit(double limit, int64_t available, const char* name);

/// Stands for "every batch the streams give" of a loader of unknown length.
inline constexpr int64_t kUntilStreamsEnd = INT64_MAX;

/// `resolve_limit` for a loader whose length may be unknown (nullopt: an
/// IterableDataset without a size): then -1 gives kUntilStreamsEnd, a whole
/// number is taken as is, and a fraction is a ConfigError naming
/// `trainer.<name>`.
int64_t resolve_limit(
    double limit, std::optional<int64_t> available, const char* name);

/// Training batches between validations within an epoch, from
/// val_check_interval; ConfigError when a count does not fit the epoch or
/// would validate between the micro-batches of one optimizer step.
int64_t val_check_batches(
    double interval, int64_t batches_per_epoch, int64_t accumulate);

} // namespace detail
} // namespace hotloop::train
