#include "hotloop/optim/optimizer_factory.h"

#include "hotloop/core/error.h"
#include "hotloop/optim/composed_lr.h"
#include "hotloop/optim/foreach.h"

// instancenorm.h uses torch::nn::functional without including it.
#include <torch/nn/functional/instancenorm.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/instancenorm.h>
#include <torch/nn/modules/normalization.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <tuple>
#include <type_traits>
#include <unordered_set>
#include <utility>

namespace hotloop::optim {
namespace {

const char* const kOptimizerNames = "sgd, adam, adamw, rmsprop, adagrad";
const char* const kSchedulerNames =
    "none, step, multistep, exponential, cosine, cosine_restarts, onecycle, "
    "polynomial, plateau, constant, linear, cyclic, swa";

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "torch::nn::BatchNorm2dImpl" -> "BatchNorm", "my::RMSNorm" -> "RMSNorm".
std::string bare_type_name(std::string name) {
  const auto colon = name.rfind("::");
  if (colon != std::string::npos) {
    name = name.substr(colon + 2);
  }
  if (ends_with(name, "Impl")) {
    name.resize(name.size() - 4);
  }
  for (const char* dims : {"1d", "2d", "3d"}) {
    if (ends_with(name, dims)) {
      name.resize(name.size() - 2);
    }
  }
  return name;
}

bool is_normalization(const torch::nn::Module& module) {
  namespace nn = torch::nn;
  return dynamic_cast<const nn::BatchNorm1dImpl*>(&module) ||
         dynamic_cast<const nn::BatchNorm2dImpl*>(&module) ||
         dynamic_cast<const nn::BatchNorm3dImpl*>(&module) ||
         dynamic_cast<const nn::InstanceNorm1dImpl*>(&module) ||
         dynamic_cast<const nn::InstanceNorm2dImpl*>(&module) ||
         dynamic_cast<const nn::InstanceNorm3dImpl*>(&module) ||
         dynamic_cast<const nn::LayerNormImpl*>(&module) ||
         dynamic_cast<const nn::GroupNormImpl*>(&module) ||
         ends_with(bare_type_name(module.name()), "Norm");
}

struct ParameterSplit {
  std::vector<at::Tensor> decay;
  std::vector<at::Tensor> no_decay;
};

ParameterSplit split_parameters(
    const torch::nn::Module& model, bool no_decay_norm_and_bias) {
  // Full names of the parameters owned directly by normalization layers.
  std::unordered_set<std::string> norm_parameters;
  auto add_norm = [&](const std::string& prefix, const torch::nn::Module& m) {
    if (!is_normalization(m)) {
      return;
    }
    for (const auto& item : m.named_parameters(/*recurse=*/false)) {
      norm_parameters.insert(
          prefix.empty() ? item.key() : prefix + "." + item.key());
    }
  };
  add_norm("", model);
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    add_norm(item.key(), *item.value());
  }

  ParameterSplit split;
  std::unordered_set<const c10::TensorImpl*> seen; // shared parameters once
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const at::Tensor& parameter = item.value();
    if (!seen.insert(parameter.unsafeGetTensorImpl()).second) {
      continue;
    }
    const std::string& name = item.key();
    const bool is_bias = name == "bias" || ends_with(name, ".bias");
    if (no_decay_norm_and_bias && (is_bias || norm_parameters.count(name))) {
      split.no_decay.push_back(parameter);
    } else {
      split.decay.push_back(parameter);
    }
  }
  return split;
}

// Group 0: decayed parameters; group 1: the rest with weight decay 0.
// Each group's options are set once the optimizer exists, not passed to its
// constructor: from LibTorch 2.10 on the constructor merges a group's
// options into the defaults and takes a field equal to the options class's
// own default as unset, so a weight decay of 0 (SGD's, Adam's, RMSprop's
// and Adagrad's default) would be replaced by the decay of group 0.
// SGD, Adam and AdamW also take optimizer.foreach, Adam and AdamW
// optimizer.fused ("auto" leaves either unset).
template <typename Optimizer, typename Options>
std::unique_ptr<torch::optim::Optimizer> build(
    ParameterSplit split,
    Options options,
    const std::string& foreach = "auto",
    const std::string& fused = "auto") {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  std::vector<Options> group_options;
  if (!split.decay.empty()) {
    groups.emplace_back(std::move(split.decay));
    group_options.push_back(options);
  }
  if (!split.no_decay.empty()) {
    groups.emplace_back(std::move(split.no_decay));
    group_options.push_back(options);
    group_options.back().weight_decay(0.0);
  }
  auto optimizer = std::make_unique<Optimizer>(std::move(groups), options);
  for (size_t i = 0; i < group_options.size(); ++i) {
    optimizer->param_groups()[i].set_options(
        std::make_unique<Options>(group_options[i]));
  }
  if constexpr (std::is_base_of_v<ForeachChoice, Optimizer>) {
    if (foreach != "auto") {
      optimizer->set_foreach(foreach == "true");
    }
  }
  if constexpr (std::is_base_of_v<FusedChoice, Optimizer>) {
    if (fused != "auto") {
      optimizer->set_fused(fused == "true");
    }
  }
  return optimizer;
}

void check_unit_interval(const char* option, double value) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      value >= 0 && value < 1,
      "optimizer.",
      option,
      " must be in [0, 1), got ",
      value);
}

void validate(const OptimizerOptions& o) {
  HOTLOOP_CHECK_AS(
      ConfigError, o.lr > 0, "optimizer.lr must be positive, got ", o.lr);
  HOTLOOP_CHECK_AS(
      ConfigError,
      o.weight_decay >= 0,
      "optimizer.weight_decay must be non-negative, got ",
      o.weight_decay);
  HOTLOOP_CHECK_AS(
      ConfigError,
      o.foreach == "auto" || o.foreach == "true" || o.foreach == "false",
      "optimizer.foreach must be auto, true or false, got '",
      o.foreach,
      "'");
  HOTLOOP_CHECK_AS(
      ConfigError,
      o.fused == "auto" || o.fused == "true" || o.fused == "false",
      "optimizer.fused must be auto, true or false, got '",
      o.fused,
      "'");
  check_unit_interval("momentum", o.momentum);
  HOTLOOP_CHECK_AS(
      ConfigError,
      o.alpha >= 0,
      "optimizer.alpha must be non-negative, got ",
      o.alpha);
  check_unit_interval("beta1", o.beta1);
  check_unit_interval("beta2", o.beta2);
  HOTLOOP_CHECK_AS(
      ConfigError,
      o.eps >= 0,
      "optimizer.eps must be non-negative, got ",
      o.eps);
}

} // namespace

std::unique_ptr<torch::optim::Optimizer> make_optimizer(
    torch::nn::Module& model, const OptimizerOptions& options) {
  namespace to = torch::optim;
  const OptimizerOptions& o = options;
  const std::string& name = o.name;
  HOTLOOP_CHECK_AS(
      ConfigError,
      name == "sgd" || name == "adam" || name == "adamw" || name == "rmsprop" ||
          name == "adagrad",
      "optimizer.name must be one of ",
      kOptimizerNames,
      ", got '",
      name,
      "'");
  validate(o);
  ParameterSplit split = split_parameters(model, o.no_decay_norm_and_bias);
  HOTLOOP_CHECK(
      !split.decay.empty() || !split.no_decay.empty(),
      "optimizer: the model (",
      model.name(),
      ") has no parameters");

  const std::string& foreach = o.foreach;
  HOTLOOP_CHECK_AS(
      ConfigError,
      o.fused != "true" || name == "adam" || name == "adamw",
      "optimizer.fused=true: ",
      name,
      " has no fused step in hotloop (adam and adamw have); use auto or "
      "false");
  if (name == "sgd") {
    HOTLOOP_CHECK_AS(
        ConfigError,
        !o.nesterov || o.momentum > 0,
        "optimizer.nesterov needs optimizer.momentum > 0, got ",
        o.momentum);
    return build<ForeachSGD>(
        std::move(split),
        to::SGDOptions(o.lr)
            .momentum(o.momentum)
            .nesterov(o.nesterov)
            .weight_decay(o.weight_decay),
        foreach);
  }
  if (name == "adam") {
    return build<ForeachAdam>(
        std::move(split),
        to::AdamOptions(o.lr)
            .betas(std::make_tuple(o.beta1, o.beta2))
            .eps(o.eps)
            .weight_decay(o.weight_decay),
        foreach,
        o.fused);
  }
  if (name == "adamw") {
    return build<ForeachAdamW>(
        std::move(split),
        to::AdamWOptions(o.lr)
            .betas(std::make_tuple(o.beta1, o.beta2))
            .eps(o.eps)
            .weight_decay(o.weight_decay),
        foreach,
        o.fused);
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      o.foreach != "true",
      "optimizer.foreach=true: ",
      name,
      " has no multi-tensor step (sgd, adam and adamw have); use auto or "
      "false");
  if (name == "rmsprop") {
    return build<to::RMSprop>(
        std::move(split),
        to::RMSpropOptions(o.lr)
            .alpha(o.alpha)
            .momentum(o.momentum)
            .centered(o.centered)
            .eps(o.eps)
            .weight_decay(o.weight_decay));
  }
  return build<to::Adagrad>(
      std::move(split),
      to::AdagradOptions(o.lr).eps(o.eps).weight_decay(o.weight_decay));
}

namespace {

AnnealStrategy parse_anneal_strategy(const std::string& value) {
  if (value == "cos") {
    return AnnealStrategy::kCos;
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      value == "linear",
      "lr_scheduler.anneal_strategy must be cos or linear, got '",
      value,
      "'");
  return AnnealStrategy::kLinear;
}

PlateauMode parse_mode(const std::string& value) {
  if (value == "min") {
    return PlateauMode::kMin;
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      value == "max",
      "lr_scheduler.mode must be min or max, got '",
      value,
      "'");
  return PlateauMode::kMax;
}

CyclicMode parse_cyclic_mode(const std::string& value) {
  if (value == "triangular") {
    return CyclicMode::kTriangular;
  }
  if (value == "triangular2") {
    return CyclicMode::kTriangular2;
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      value == "exp_range",
      "lr_scheduler.mode must be triangular, triangular2 or exp_range for "
      "cyclic, got '",
      value,
      "'");
  return CyclicMode::kExpRange;
}

ThresholdMode parse_threshold_mode(const std::string& value) {
  if (value == "rel") {
    return ThresholdMode::kRel;
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      value == "abs",
      "lr_scheduler.threshold_mode must be rel or abs, got '",
      value,
      "'");
  return ThresholdMode::kAbs;
}

std::unique_ptr<LRScheduler> make_main_schedule(
    torch::optim::Optimizer& optimizer,
    const SchedulerOptions& o,
    int64_t total_steps) {
  // Steps left for the schedule after warmup, for lengths set to "auto".
  auto span = [&]() {
    HOTLOOP_CHECK_AS(
        ConfigError,
        total_steps >= 0,
        "lr_scheduler: ",
        o.name,
        " needs the run's length, and trainer.max_epochs=-1 trains without "
        "one: give ",
        o.interval == "step" ? "trainer.max_steps" : "trainer.max_epochs",
        o.name == "cosine" ? " or lr_scheduler.T_max"
        : o.name == "polynomial" || o.name == "linear" || o.name == "constant"
            ? " or lr_scheduler.total_iters"
            : "");
    HOTLOOP_CHECK_AS(
        ConfigError,
        total_steps > 0,
        "lr_scheduler: ",
        o.name,
        " needs the run's number of steps, got ",
        total_steps);
    HOTLOOP_CHECK_AS(
        ConfigError,
        o.warmup_steps < total_steps,
        "lr_scheduler.warmup_steps must be less than the run's ",
        total_steps,
        " schedule steps, got ",
        o.warmup_steps);
    return total_steps - o.warmup_steps;
  };
  const std::string& name = o.name;
  if (name == "step") {
    return std::make_unique<StepLR>(optimizer, o.step_size, o.gamma);
  }
  if (name == "multistep") {
    return std::make_unique<MultiStepLR>(optimizer, o.milestones, o.gamma);
  }
  if (name == "exponential") {
    return std::make_unique<ExponentialLR>(optimizer, o.gamma);
  }
  if (name == "cosine") {
    return std::make_unique<CosineAnnealingLR>(
        optimizer, o.t_max == 0 ? span() : o.t_max, o.eta_min);
  }
  if (name == "cosine_restarts") {
    return std::make_unique<CosineAnnealingWarmRestarts>(
        optimizer, o.t_0, o.t_mult, o.eta_min);
  }
  if (name == "polynomial") {
    return std::make_unique<PolynomialLR>(
        optimizer, o.total_iters == 0 ? span() : o.total_iters, o.power);
  }
  if (name == "constant") {
    return std::make_unique<ConstantLR>(
        optimizer, o.factor, o.total_iters == 0 ? span() : o.total_iters);
  }
  if (name == "linear") {
    return std::make_unique<LinearLR>(
        optimizer,
        o.start_factor,
        o.end_factor,
        o.total_iters == 0 ? span() : o.total_iters);
  }
  if (name == "cyclic") {
    HOTLOOP_CHECK_AS(
        ConfigError,
        o.max_lr > 0,
        "lr_scheduler.max_lr: cyclic needs the peak rate, got ",
        o.max_lr);
    return std::make_unique<CyclicLR>(
        optimizer,
        CyclicLROptions(
            o.base_lr == 0 ? group_lrs(optimizer)
                           : std::vector<double>{o.base_lr},
            {o.max_lr})
            .step_size_up(o.step_size_up)
            .step_size_down(
                o.step_size_down == 0 ? std::nullopt
                                      : std::optional(o.step_size_down))
            .mode(parse_cyclic_mode(o.cyclic_mode))
            .gamma(o.gamma)
            .cycle_momentum(o.cycle_momentum)
            .base_momentum(o.base_momentum)
            .max_momentum(o.max_momentum));
  }
  if (name == "swa") {
    HOTLOOP_CHECK_AS(
        ConfigError,
        o.swa_lr > 0,
        "lr_scheduler.swa_lr: swa needs the rate to anneal to, got ",
        o.swa_lr);
    return std::make_unique<SWALR>(
        optimizer,
        SWALROptions(o.swa_lr)
            .anneal_epochs(o.anneal_epochs)
            .anneal_strategy(parse_anneal_strategy(o.anneal_strategy)));
  }
  if (name == "plateau") {
    return std::make_unique<ReduceLROnPlateau>(
        optimizer,
        ReduceLROnPlateauOptions()
            .mode(parse_mode(o.mode))
            .factor(o.factor)
            .patience(o.patience)
            .threshold(o.threshold)
            .threshold_mode(parse_threshold_mode(o.threshold_mode))
            .cooldown(o.cooldown)
            .min_lr(o.min_lr)
            .eps(o.eps));
  }
  // onecycle
  std::vector<double> max_lr =
      o.max_lr == 0 ? group_lrs(optimizer) : std::vector<double>{o.max_lr};
  return std::make_unique<OneCycleLR>(
      optimizer,
      OneCycleLROptions(std::move(max_lr), span())
          .pct_start(o.pct_start)
          .anneal_strategy(parse_anneal_strategy(o.anneal_strategy))
          .cycle_momentum(o.cycle_momentum)
          .base_momentum(o.base_momentum)
          .max_momentum(o.max_momentum)
          .div_factor(o.div_factor)
          .final_div_factor(o.final_div_factor)
          .three_phase(o.three_phase));
}

// The named schedule (null for none) behind its warmup, if any, over
// `total_steps` schedule steps.
std::unique_ptr<LRScheduler> make_warmed_up(
    torch::optim::Optimizer& optimizer,
    const SchedulerOptions& o,
    int64_t total_steps) {
  std::unique_ptr<LRScheduler> schedule;
  if (o.name != "none") {
    schedule = make_main_schedule(optimizer, o, total_steps);
  }
  if (o.warmup_steps == 0) {
    return schedule;
  }
  return std::make_unique<LinearWarmup>(
      optimizer, std::move(schedule), o.warmup_steps, o.warmup_start_factor);
}

} // namespace

std::unique_ptr<LRScheduler> make_scheduler(
    torch::optim::Optimizer& optimizer,
    const SchedulerOptions& options,
    int64_t total_steps) {
  const SchedulerOptions& o = options;
  const std::string& name = o.name;
  HOTLOOP_CHECK_AS(
      ConfigError,
      name == "none" || name == "step" || name == "multistep" ||
          name == "exponential" || name == "cosine" ||
          name == "cosine_restarts" || name == "onecycle" ||
          name == "polynomial" || name == "plateau" || name == "constant" ||
          name == "linear" || name == "cyclic" || name == "swa",
      "lr_scheduler.name must be one of ",
      kSchedulerNames,
      ", got '",
      name,
      "'");
  HOTLOOP_CHECK_AS(
      ConfigError,
      o.interval == "step" || o.interval == "epoch",
      "lr_scheduler.interval must be step or epoch, got '",
      o.interval,
      "'");
  HOTLOOP_CHECK_AS(
      ConfigError,
      o.warmup_steps >= 0,
      "lr_scheduler.warmup_steps must be non-negative, got ",
      o.warmup_steps);
  // Checked before the main schedule changes the optimizer's rates.
  HOTLOOP_CHECK_AS(
      ConfigError,
      o.warmup_steps == 0 ||
          (o.warmup_start_factor > 0 && o.warmup_start_factor <= 1),
      "lr_scheduler.warmup_start_factor must be in (0, 1], got ",
      o.warmup_start_factor);

  HOTLOOP_CHECK_AS(
      ConfigError,
      o.swa_start >= 0,
      "lr_scheduler.swa_start must be non-negative, got ",
      o.swa_start);
  if (o.swa_start == 0) {
    return make_warmed_up(optimizer, o, total_steps);
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      name != "swa" && name != "plateau",
      "lr_scheduler.swa_start hands the rate over to SWALR from another "
      "schedule, but lr_scheduler.name is ",
      name,
      name == "swa" ? " (SWALR from the start: leave swa_start at 0)"
                    : " (which watches a metric; PyTorch's SequentialLR "
                      "cannot step it)");
  HOTLOOP_CHECK_AS(
      ConfigError,
      o.swa_lr > 0,
      "lr_scheduler.swa_lr: swa_start needs the rate SWALR anneals to, got ",
      o.swa_lr);
  HOTLOOP_CHECK_AS(
      ConfigError,
      total_steps < 0 || o.swa_start < total_steps,
      "lr_scheduler.swa_start must be less than the run's ",
      total_steps,
      " schedule steps, or SWALR never starts; got ",
      o.swa_start);
  HOTLOOP_CHECK_AS(
      ConfigError,
      o.warmup_steps < o.swa_start,
      "lr_scheduler.warmup_steps must end before swa_start (",
      o.swa_start,
      "), got ",
      o.warmup_steps);
  return std::make_unique<SequentialLR>(
      optimizer,
      std::vector<ScheduleFactory>{
          [&](torch::optim::Optimizer& opt) -> std::unique_ptr<LRScheduler> {
            // Over the whole run, cut at swa_start, as in PyTorch's SWA
            // example (a cosine's T_max is the run's epochs).
            std::unique_ptr<LRScheduler> before =
                make_warmed_up(opt, o, total_steps);
            if (before == nullptr) { // "none": the optimizer's rates
              return std::make_unique<ConstantLR>(opt, 1.0, 0);
            }
            return before;
          },
          [&](torch::optim::Optimizer& opt) {
            return std::make_unique<SWALR>(
                opt,
                SWALROptions(o.swa_lr)
                    .anneal_epochs(o.anneal_epochs)
                    .anneal_strategy(parse_anneal_strategy(o.anneal_strategy)));
          }},
      std::vector<int64_t>{o.swa_start});
}

} // namespace hotloop::optim
