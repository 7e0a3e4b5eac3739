#include "hotloop/compress/model_pruning.h"

#include "hotloop/compress/forward_tensor.h"

#include "hotloop/core/error.h"
#include "hotloop/train/model_checkpoint.h"
#include "hotloop/train/module.h"
#include "hotloop/train/trainer.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <iomanip>
#include <set>
#include <sstream>

namespace hotloop::compress {
namespace {

const std::vector<std::string> kFunctions = {
    "ln_structured",
    "l1_unstructured",
    "random_structured",
    "random_unstructured"};

// Lightning's class names for global pruning.
std::string class_name(const std::string& function) {
  if (function == "ln_structured") {
    return "LnStructured";
  }
  if (function == "l1_unstructured") {
    return "L1Unstructured";
  }
  if (function == "random_structured") {
    return "RandomStructured";
  }
  return "RandomUnstructured";
}

// "(12.34%)" as Python's :.2% writes it.
std::string percent(double part, double whole) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(2) << 100.0 * part / whole << "%";
  return out.str();
}

// Lightning's _get_pruned_stats: (zeros, size) of the mask; (0, 1) for a
// tensor not pruned.
std::pair<int64_t, int64_t> pruned_stats(const ParameterRef& ref) {
  if (!is_pruned(*ref.module, ref.name)) {
    return {0, 1};
  }
  const at::Tensor mask = mask_of(*ref.module, ref.name);
  return {(mask == 0).sum().item<int64_t>(), mask.numel()};
}

// The tensor the optimizer steps: `<name>_orig` of a pruned one.
at::Tensor trainable(const ParameterRef& ref) {
  return is_pruned(*ref.module, ref.name)
             ? ref.module->named_parameters(false)[ref.name + "_orig"]
             : ref.module->named_parameters(false)[ref.name];
}

// What the layer's reset_parameters would draw for `name` (Lightning's
// resample_parameters), for the layers whose rule hotloop knows.
at::Tensor resampled(
    torch::nn::Module& module,
    const std::string& name,
    const at::Tensor& like) {
  namespace nn = torch::nn;
  const at::NoGradGuard no_grad;
  at::Tensor fresh = at::empty_like(like, at::MemoryFormat::Contiguous);
  const bool linear_or_conv = module.as<nn::Linear>() != nullptr ||
                              module.as<nn::Conv1d>() != nullptr ||
                              module.as<nn::Conv2d>() != nullptr ||
                              module.as<nn::Conv3d>() != nullptr;
  if (linear_or_conv && name == "weight") {
    return nn::init::kaiming_uniform_(fresh, std::sqrt(5.0));
  }
  if (linear_or_conv && name == "bias") {
    const at::Tensor weight =
        module.named_parameters(false).contains("weight")
            ? module.named_parameters(false)["weight"]
            : module.named_parameters(false)["weight_orig"];
    const int64_t fan_in = weight.numel() / weight.size(0);
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(fan_in) : 0.0;
    return fresh.uniform_(-bound, bound);
  }
  if (module.as<nn::Embedding>() != nullptr) {
    return fresh.normal_();
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      module.as<nn::BatchNorm1d>() != nullptr ||
          module.as<nn::BatchNorm2d>() != nullptr ||
          module.as<nn::BatchNorm3d>() != nullptr,
      "ModelPruning: resample_parameters does not know how ",
      module.name(),
      " initialises '",
      name,
      "'");
  return name == "weight" ? fresh.fill_(1) : fresh.zero_();
}

} // namespace

ModelPruning::ModelPruning(ModelPruningOptions options)
    : options_(std::move(options)) {
  const std::string& fn = options_.pruning_fn();
  std::string known;
  for (const std::string& name : kFunctions) {
    known += (known.empty() ? "" : ", ") + name;
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      std::find(kFunctions.begin(), kFunctions.end(), fn) != kFunctions.end(),
      "The provided `pruning_fn` ",
      fn,
      " isn't available in PyTorch's built-in functions: ",
      known);
  for (const std::string& name : options_.parameter_names()) {
    HOTLOOP_CHECK_AS(
        ConfigError,
        name == "weight" || name == "bias",
        "The provided `parameter_names` name: ",
        name,
        " isn't in (weight, bias)");
  }
  const bool structured =
      fn.size() > 11 && fn.compare(fn.size() - 11, 11, "_structured") == 0;
  HOTLOOP_CHECK_AS(
      ConfigError,
      !structured || options_.pruning_dim().has_value(),
      "When requesting `structured` pruning, the `pruning_dim` should be "
      "provided.");
  HOTLOOP_CHECK_AS(
      ConfigError,
      fn != "ln_structured" || options_.pruning_norm().has_value(),
      "When requesting `ln_structured` pruning, the `pruning_norm` should be "
      "provided.");
  HOTLOOP_CHECK_AS(
      ConfigError,
      !options_.use_global_unstructured() || !structured,
      "Only the \"unstructured\" PRUNING_TYPE is supported with "
      "`use_global_unstructured=True`. Found method ",
      class_name(fn),
      " of type structured.");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.verbose() >= 0 && options_.verbose() <= 2,
      "`verbose` must be any of (0, 1, 2)");
  method_name_ = options_.use_global_unstructured() ? class_name(fn) : fn;
}

std::unique_ptr<PruningMethod> ModelPruning::method(
    PruningAmount amount) const {
  const std::string& fn = options_.pruning_fn();
  if (fn == "l1_unstructured") {
    return std::make_unique<L1Unstructured>(amount);
  }
  if (fn == "random_unstructured") {
    return std::make_unique<RandomUnstructured>(amount);
  }
  if (fn == "ln_structured") {
    return std::make_unique<LnStructured>(
        amount, *options_.pruning_norm(), *options_.pruning_dim());
  }
  return std::make_unique<RandomStructured>(amount, *options_.pruning_dim());
}

void ModelPruning::setup(train::Trainer& trainer, train::Module& module) {
  parameters_.clear();
  originals_.clear();
  final_sparsity_.clear();
  prunings_ = 0;
  last_epoch_ = -1;
  unsaved_ = false;
  if (options_.parameters_to_prune().empty()) {
    // Lightning: for each parameter name, every module that has it.
    std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>>
        modules;
    for (const auto& item : module.named_modules("", false)) {
      modules.emplace_back(item.key(), item.value());
    }
    for (const std::string& name : options_.parameter_names()) {
      for (const auto& [path, child] : modules) {
        const bool has =
            is_pruned(*child, name) ||
            (child->named_parameters(false).find(name) != nullptr &&
             child->named_parameters(false)[name].defined());
        if (has && forward_tensor(*child, name) != nullptr) {
          parameters_.push_back({child.get(), name, path + "." + name});
        }
      }
    }
    HOTLOOP_CHECK_AS(
        ConfigError,
        !parameters_.empty(),
        "ModelPruning: the model has no prunable ",
        options_.parameter_names().size() == 1 ? options_.parameter_names()[0]
                                               : std::string("weight or bias"),
        " (its parameters: ",
        [&] {
          std::string names;
          for (const std::string& n : compress::parameter_names(module)) {
            names += (names.empty() ? "" : ", ") + n;
          }
          return names;
        }(),
        ")");
  } else {
    std::set<std::string> seen;
    for (const std::string& path : options_.parameters_to_prune()) {
      try {
        ParameterRef ref = find_parameter(module, path);
        HOTLOOP_CHECK_AS(
            ConfigError,
            forward_tensor(*ref.module, ref.name) != nullptr,
            "cannot prune '",
            path,
            "' of ",
            ref.module->name(),
            ": hotloop does not know which member its forward reads "
            "(register it with compress::register_forward_tensor)");
        HOTLOOP_CHECK_AS(
            ConfigError,
            seen.insert(path).second,
            "'",
            path,
            "' is named twice");
        parameters_.push_back(std::move(ref));
      } catch (const ConfigError& e) {
        throw ConfigError(hotloop::detail::str_cat(
            "ModelPruning parameters_to_prune: ", e.what()));
      }
    }
  }
  if (options_.lottery_ticket_possible()) {
    for (const ParameterRef& ref : parameters_) {
      originals_.push_back(trainable(ref).detach().clone());
    }
  }
}

void ModelPruning::apply_pruning(PruningAmount amount, std::ostream* out) {
  const bool verbose = options_.verbose() > 0 && out != nullptr;
  std::vector<std::pair<int64_t, int64_t>> before;
  if (verbose) {
    for (const ParameterRef& ref : parameters_) {
      before.push_back(pruned_stats(ref));
    }
  }
  const std::unique_ptr<PruningMethod> pruning = method(amount);
  if (options_.use_global_unstructured()) {
    global_unstructured(parameters_, *pruning);
  } else {
    for (const ParameterRef& ref : parameters_) {
      prune(ref, *pruning);
    }
  }
  ++prunings_;
  if (!verbose) {
    return;
  }
  std::vector<std::pair<int64_t, int64_t>> after;
  int64_t total = 0, zeros_before = 0, zeros_after = 0;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    after.push_back(pruned_stats(parameters_[i]));
    total += after.back().second;
    zeros_before += before[i].first;
    zeros_after += after.back().first;
  }
  *out << "Applied `" << method_name_ << "`. Pruned: " << zeros_before << "/"
       << total << " (" << percent(zeros_before, total) << ") -> "
       << zeros_after << "/" << total << " (" << percent(zeros_after, total)
       << ")\n";
  if (options_.verbose() == 2) {
    for (size_t i = 0; i < parameters_.size(); ++i) {
      *out << "Applied `" << method_name_ << "` to `" << parameters_[i].path
           << "` with amount=" << amount.str()
           << ". Pruned: " << before[i].first << " ("
           << percent(before[i].first, before[i].second) << ") -> "
           << after[i].first << " (" << percent(after[i].first, after[i].second)
           << ")\n";
    }
  }
}

void ModelPruning::apply_lottery_ticket_hypothesis() {
  HOTLOOP_CHECK(
      originals_.size() == parameters_.size(),
      "ModelPruning: the lottery ticket needs the starting values, which "
      "setup keeps when use_lottery_ticket_hypothesis is on");
  const at::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const ParameterRef& ref = parameters_[i];
    at::Tensor target = trainable(ref);
    const at::Tensor source = options_.resample_parameters()
                                  ? resampled(*ref.module, ref.name, target)
                                  : originals_[i];
    target.copy_(source);
  }
}

bool ModelPruning::run_pruning(train::Trainer& trainer, int64_t epoch) {
  const bool prune_now = options_.apply_pruning_at(epoch);
  const PruningAmount amount = options_.amount_at(epoch);
  if (!prune_now || amount.is_zero()) {
    return false;
  }
  apply_pruning(amount, &trainer.out());
  if (options_.use_lottery_ticket_hypothesis_at(epoch)) {
    apply_lottery_ticket_hypothesis();
  }
  return true;
}

void ModelPruning::on_fit_start(
    train::Trainer& trainer, train::Module& module) {
  const train::TrainingProgress& progress = trainer.progress();
  if (options_.prune_on_train_epoch_end() && progress.epoch_batches == 0 &&
      progress.epoch > 0 && last_epoch_ < progress.epoch - 1) {
    last_epoch_ = progress.epoch - 1;
    run_pruning(trainer, last_epoch_);
  }
}

void ModelPruning::on_train_epoch_end(
    train::Trainer& trainer, train::Module& module) {
  if (options_.prune_on_train_epoch_end()) {
    last_epoch_ = trainer.current_epoch();
    // After the checkpoints of this epoch's validation.
    unsaved_ = run_pruning(trainer, last_epoch_) || unsaved_;
  }
}

nlohmann::json ModelPruning::state_dict() const {
  return {{"last_epoch", last_epoch_}};
}

void ModelPruning::load_state_dict(const nlohmann::json& state) {
  last_epoch_ = state.value("last_epoch", int64_t{-1});
}

void ModelPruning::on_validation_end(
    train::Trainer& trainer, train::Module& module) {
  if (trainer.fitting() && !trainer.sanity_checking()) {
    if (!options_.prune_on_train_epoch_end()) {
      run_pruning(trainer, trainer.current_epoch());
    }
    // The checkpoints, which run after the other callbacks, save what the
    // pruning did so far.
    unsaved_ = false;
  }
}

void ModelPruning::on_fit_end(train::Trainer& trainer, train::Module& module) {
  final_sparsity_ = sparsity();
  if (unsaved_) {
    // The last epoch's pruning came after its checkpoints: last.ckpt gets
    // it (masks included) before they are made permanent.
    for (const auto& callback : trainer.callbacks()) {
      auto* checkpoint = dynamic_cast<train::ModelCheckpoint*>(callback.get());
      if (checkpoint != nullptr && checkpoint->options().save_last() &&
          !trainer.log_dir().empty()) {
        checkpoint->save_last(trainer);
      }
    }
    unsaved_ = false;
  }
  if (options_.make_pruning_permanent()) {
    make_pruning_permanent(module);
  }
}

std::map<std::string, double> ModelPruning::sparsity() const {
  std::map<std::string, double> result;
  for (const ParameterRef& ref : parameters_) {
    if (is_pruned(*ref.module, ref.name)) {
      const at::Tensor mask = mask_of(*ref.module, ref.name);
      result[ref.path] =
          (mask == 0).sum().item<double>() /
          static_cast<double>(std::max<int64_t>(mask.numel(), 1));
    } else {
      const at::Tensor values = trainable(ref);
      result[ref.path] =
          (values == 0).sum().item<double>() /
          static_cast<double>(std::max<int64_t>(values.numel(), 1));
    }
  }
  return result;
}

nlohmann::json ModelPruning::summary() const {
  if (parameters_.empty()) {
    return nullptr;
  }
  nlohmann::json sparsity = nlohmann::json::object();
  double zeros = 0, entries = 0;
  for (const ParameterRef& ref : parameters_) {
    const double share = final_sparsity_.count(ref.path) > 0
                             ? final_sparsity_.at(ref.path)
                             : 0.0;
    const auto numel = static_cast<double>(trainable(ref).numel());
    sparsity[ref.path] = share;
    zeros += share * numel;
    entries += numel;
  }
  nlohmann::json pruning;
  pruning["method"] = method_name_;
  pruning["prunings"] = prunings_;
  pruning["sparsity"] = sparsity;
  pruning["total_sparsity"] = entries > 0 ? zeros / entries : 0.0;
  pruning["permanent"] = options_.make_pruning_permanent();
  return {{"pruning", pruning}};
}

} // namespace hotloop::compress
