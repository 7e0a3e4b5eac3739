#pragma once

#include "hotloop/optim/lr_scheduler.h"

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hotloop::optim {

/// The `optimizer.*` config section. Fields a given optimizer does not use
/// are ignored, but every field is validated.
struct OptimizerOptions {
  /// One of sgd, adam, adamw, rmsprop, adagrad.
  std::string name = "adamw";
  /// Learning rate (> 0); the base rate of every param group.
  double lr = 1e-3;
  /// Weight decay (>= 0): L2 added to the gradient for sgd, adam, rmsprop
  /// and adagrad, decoupled for adamw.
  double weight_decay = 0.0;
  /// sgd and rmsprop, in [0, 1). 0.9 is hotloop's default for sgd
  /// (PyTorch's is 0, as is its RMSprop's: set it for rmsprop; the CLI
  /// gives rmsprop 0 when optimizer.momentum is not set).
  double momentum = 0.9;
  /// rmsprop: the squared gradients' smoothing constant (>= 0), and
  /// whether the gradient's running mean is subtracted (centered RMSprop).
  double alpha = 0.99;
  bool centered = false;
  /// sgd only; needs momentum > 0.
  bool nesterov = false;
  /// adam and adamw, each in [0, 1).
  double beta1 = 0.9;
  double beta2 = 0.999;
  /// Added to denominators (>= 0): adam, adamw, rmsprop, adagrad. 1e-8 is
  /// PyTorch's for the first three; its Adagrad's is 1e-10, which the CLI
  /// gives adagrad when optimizer.eps is not set.
  double eps = 1e-8;
  /// Puts normalization-layer parameters and every parameter named `bias`
  /// in a second param group without weight decay.
  bool no_decay_norm_and_bias = true;
  /// sgd, adam and adamw: "auto" steps with ATen's multi-tensor ops where
  /// every parameter is on a CUDA device (PyTorch's default), "true" and
  /// "false" always or never (optim/foreach.h).
  std::string foreach = "auto";
  /// adam and adamw: "auto" steps with ATen's fused kernel where every
  /// parameter is on a CUDA device and LibTorch has it (2.1 and later),
  /// unless foreach is "false"; "true" wherever LibTorch has it (also the
  /// CPU from 2.4), an error elsewhere; "false" never (optim/foreach.h).
  std::string fused = "auto";
};

/// Builds the optimizer for all of `model`'s parameters (each tensor once,
/// in `named_parameters()` order). With `no_decay_norm_and_bias`, group 0
/// holds the decayed parameters and group 1 those of normalization layers
/// (BatchNorm, InstanceNorm, LayerNorm, GroupNorm, or any module whose type
/// name ends in "Norm") plus every parameter named `bias`, with weight decay
/// 0; an empty group is left out. Throws `hotloop::ConfigError` naming the
/// bad option, and `hotloop::Error` if the model has no parameters.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(
    torch::nn::Module& model, const OptimizerOptions& options);

/// The `lr_scheduler.*` config section. Each schedule reads only its own
/// fields; see the classes in lr_scheduler.h for their meaning.
struct SchedulerOptions {
  /// One of none, step, multistep, exponential, cosine, cosine_restarts,
  /// onecycle, polynomial, plateau, constant, linear, cyclic, swa. Fields some
  /// schedules share keep the default of the first named: constant reads
  /// `factor` and `total_iters`, cyclic `gamma`, `max_lr` and the momenta,
  /// so set those (the CLI gives each schedule PyTorch's defaults for the
  /// keys a config leaves out).
  std::string name = "onecycle";

  /// step: decay every step_size steps; step, multistep, exponential: the
  /// decay factor.
  int64_t step_size = 30;
  double gamma = 0.1;
  /// multistep: strictly increasing steps at which to decay.
  std::vector<int64_t> milestones;

  /// cosine: half-period in steps; 0 means the run's steps after warmup.
  int64_t t_max = 0;
  /// cosine, cosine_restarts: the lowest rate.
  double eta_min = 0.0;
  /// cosine_restarts: first period and its growth factor.
  int64_t t_0 = 10;
  int64_t t_mult = 1;

  /// onecycle: peak rate; 0 means each group's optimizer lr.
  double max_lr = 0.0;
  double pct_start = 0.3;
  /// onecycle: cos or linear.
  std::string anneal_strategy = "cos";
  double div_factor = 25.0;
  double final_div_factor = 1e4;
  bool three_phase = false;
  bool cycle_momentum = true;
  double base_momentum = 0.85;
  double max_momentum = 0.95;

  /// polynomial: steps to reach 0; linear: steps to reach end_factor;
  /// constant: steps at `factor` times the rate (all three: 0 means the
  /// run's steps after warmup).
  int64_t total_iters = 0;
  double power = 1.0;

  /// linear: the rate's factor at step 0 and from total_iters on.
  double start_factor = 1.0 / 3;
  double end_factor = 1.0;

  /// cyclic: the lowest rate (0 means each group's optimizer lr; max_lr,
  /// the peak, must be given), steps up and down (down 0: as many as up),
  /// and triangular, triangular2 or exp_range (with `gamma`).
  double base_lr = 0.0;
  int64_t step_size_up = 2000;
  int64_t step_size_down = 0;
  std::string cyclic_mode = "triangular";

  /// swa (SWALR): the rate to anneal to (> 0) over anneal_epochs steps,
  /// with anneal_strategy (cos or linear).
  double swa_lr = 0.0;
  int64_t anneal_epochs = 10;
  /// Steps (intervals) after which SWALR takes over from the schedule
  /// named (and its warmup), annealing from the rate it left to swa_lr as
  /// above: PyTorch's `SequentialLR([schedule, SWALR], [swa_start])`, the
  /// switch of its SWA recipe. 0: never. The named schedule keeps the
  /// run's length (cut at swa_start).
  int64_t swa_start = 0;

  /// plateau: min or max.
  std::string mode = "min";
  /// plateau: the rate's multiplier on a plateau; constant: the rate's
  /// factor for the first total_iters steps.
  double factor = 0.1;
  int64_t patience = 10;
  double threshold = 1e-4;
  /// plateau: rel or abs.
  std::string threshold_mode = "rel";
  int64_t cooldown = 0;
  double min_lr = 0.0;
  double eps = 1e-8;
  /// plateau: the logged metric passed to `step(metric)`.
  std::string monitor = "val_loss";

  /// Steps of linear warmup in front of the schedule (0: none), starting
  /// at warmup_start_factor times the schedule's first rate (in (0, 1]).
  int64_t warmup_steps = 0;
  double warmup_start_factor = 1.0 / 3;

  /// When the schedule steps: "step" (after each optimizer step) or
  /// "epoch".
  std::string interval = "step";
  /// Step every `frequency` intervals (> 0).
  int64_t frequency = 1;
};

/// Builds the schedule named by `options` on `optimizer`, or returns null
/// for "none" without warmup or swa_start (a constant rate). `total_steps`
/// is the number of schedule steps the run takes (optimizer steps, or
/// epochs when interval is "epoch"; -1: unbounded); onecycle, and
/// cosine/polynomial/linear/constant left at 0, cover
/// `total_steps - warmup_steps`.
/// Throws `hotloop::ConfigError` naming the bad option.
std::unique_ptr<LRScheduler> make_scheduler(
    torch::optim::Optimizer& optimizer,
    const SchedulerOptions& options,
    int64_t total_steps);

} // namespace hotloop::optim
