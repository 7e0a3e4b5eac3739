#pragma once

#include "hotloop/compress/prune.h"
#include "hotloop/compress/pruning_amount.h"
#include "hotloop/train/callback.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hotloop::compress {

/// ModelPruning's settings: Lightning's arguments, with the same names and
/// defaults. Where Lightning takes a number or a function of the epoch,
/// there are both setters.
class ModelPruningOptions {
 public:
  /// `pruning_fn`: l1_unstructured, random_unstructured, ln_structured or
  /// random_structured.
  explicit ModelPruningOptions(std::string pruning_fn)
      : pruning_fn_(std::move(pruning_fn)) {}

  ModelPruningOptions& pruning_fn(std::string name) {
    pruning_fn_ = std::move(name);
    return *this;
  }
  const std::string& pruning_fn() const {
    return pruning_fn_;
  }
  /// The parameters to prune by name ("network.features.0.weight"); empty
  /// (the default): every `parameter_names` tensor of every module whose
  /// forward tensor is known (forward_tensor.h), in Lightning's order (by
  /// parameter name, then module).
  ModelPruningOptions& parameters_to_prune(std::vector<std::string> names) {
    parameters_to_prune_ = std::move(names);
    return *this;
  }
  const std::vector<std::string>& parameters_to_prune() const {
    return parameters_to_prune_;
  }
  /// "weight" and/or "bias": which tensors the default selection takes.
  ModelPruningOptions& parameter_names(std::vector<std::string> names) {
    parameter_names_ = std::move(names);
    return *this;
  }
  const std::vector<std::string>& parameter_names() const {
    return parameter_names_;
  }
  /// Prune all the parameters together (global_unstructured), so the
  /// amount counts across them; needs an unstructured pruning_fn.
  ModelPruningOptions& use_global_unstructured(bool on) {
    use_global_unstructured_ = on;
    return *this;
  }
  bool use_global_unstructured() const {
    return use_global_unstructured_;
  }
  /// How much each pruning removes: the same every epoch (default 0.5) ...
  ModelPruningOptions& amount(PruningAmount amount) {
    amount_ = [amount](int64_t) { return amount; };
    return *this;
  }
  /// ... or a function of the epoch (from 0); an amount of zero skips the
  /// epoch.
  ModelPruningOptions& amount(std::function<PruningAmount(int64_t)> schedule) {
    amount_ = std::move(schedule);
    return *this;
  }
  PruningAmount amount_at(int64_t epoch) const {
    return amount_(epoch);
  }
  /// Whether to prune at all: always (default), never, or per epoch.
  ModelPruningOptions& apply_pruning(bool on) {
    apply_pruning_ = [on](int64_t) { return on; };
    return *this;
  }
  ModelPruningOptions& apply_pruning(std::function<bool(int64_t)> when) {
    apply_pruning_ = std::move(when);
    return *this;
  }
  bool apply_pruning_at(int64_t epoch) const {
    return apply_pruning_(epoch);
  }
  /// Make the pruning permanent (remove) when the fit ends.
  ModelPruningOptions& make_pruning_permanent(bool on) {
    make_pruning_permanent_ = on;
    return *this;
  }
  bool make_pruning_permanent() const {
    return make_pruning_permanent_;
  }
  /// After each pruning, reset the surviving weights to their values when
  /// the fit started (the lottery ticket hypothesis): always (Lightning's
  /// default), never, or per epoch.
  ModelPruningOptions& use_lottery_ticket_hypothesis(bool on) {
    lottery_ticket_ = [on](int64_t) { return on; };
    lottery_ticket_off_ = !on;
    return *this;
  }
  ModelPruningOptions& use_lottery_ticket_hypothesis(
      std::function<bool(int64_t)> when) {
    lottery_ticket_ = std::move(when);
    lottery_ticket_off_ = false;
    return *this;
  }
  /// False only when the lottery ticket is off for good (then setup keeps
  /// no copy of the starting values).
  bool lottery_ticket_possible() const {
    return !lottery_ticket_off_;
  }
  bool use_lottery_ticket_hypothesis_at(int64_t epoch) const {
    return lottery_ticket_(epoch);
  }
  /// With the lottery ticket: draw new values with the layer's own
  /// initialisation (reset_parameters) instead of the starting ones.
  ModelPruningOptions& resample_parameters(bool on) {
    resample_parameters_ = on;
    return *this;
  }
  bool resample_parameters() const {
    return resample_parameters_;
  }
  /// The channel dimension of a structured pruning_fn (required there).
  ModelPruningOptions& pruning_dim(std::optional<int64_t> dim) {
    pruning_dim_ = dim;
    return *this;
  }
  std::optional<int64_t> pruning_dim() const {
    return pruning_dim_;
  }
  /// ln_structured's norm (required there): torch.norm's p.
  ModelPruningOptions& pruning_norm(std::optional<double> n) {
    pruning_norm_ = n;
    return *this;
  }
  std::optional<double> pruning_norm() const {
    return pruning_norm_;
  }
  /// 0: quiet; 1: one line per pruning with the overall sparsity; 2: also
  /// a line per parameter.
  ModelPruningOptions& verbose(int64_t level) {
    verbose_ = level;
    return *this;
  }
  int64_t verbose() const {
    return verbose_;
  }
  /// Prune at the end of each training epoch (default), or after each
  /// validation of the fit.
  ModelPruningOptions& prune_on_train_epoch_end(bool on) {
    prune_on_train_epoch_end_ = on;
    return *this;
  }
  bool prune_on_train_epoch_end() const {
    return prune_on_train_epoch_end_;
  }

 private:
  std::string pruning_fn_;
  std::vector<std::string> parameters_to_prune_;
  std::vector<std::string> parameter_names_ = {"weight", "bias"};
  bool use_global_unstructured_ = true;
  std::function<PruningAmount(int64_t)> amount_ = [](int64_t) {
    return PruningAmount::fraction(0.5);
  };
  std::function<bool(int64_t)> apply_pruning_ = [](int64_t) { return true; };
  bool make_pruning_permanent_ = true;
  std::function<bool(int64_t)> lottery_ticket_ = [](int64_t) { return true; };
  bool lottery_ticket_off_ = false;
  bool resample_parameters_ = false;
  std::optional<int64_t> pruning_dim_;
  std::optional<double> pruning_norm_;
  int64_t verbose_ = 0;
  bool prune_on_train_epoch_end_ = true;
};

/// Prunes the model while it trains (Lightning's ModelPruning): at the end
/// of every training epoch (or after every validation), as the schedule
/// says, with torch.nn.utils.prune's methods (prune.h), locally per
/// parameter or globally across them; then optionally resets the surviving
/// weights (lottery ticket). The Trainer recomputes the masked weights
/// before every step and evaluation, so gradients flow through the masks.
///
/// verbose >= 1 prints Lightning's line after each pruning,
///   Applied `L1Unstructured`. Pruned: 0/1122 (0.00%) -> 561/1122 (50.00%)
/// and 2 one per parameter, naming it by its path where Lightning prints
/// the module's repr:
///   Applied `l1_unstructured` to `network.head.1.weight` with amount=0.5.
///   Pruned: 0 (0.00%) -> 64 (50.00%)
///
/// Differences from Lightning, on purpose: checkpoints keep the masks
/// (`*_orig` and `*_mask`, which load_checkpoint restores, so a resumed
/// fit prunes on from where it stopped; Lightning saves the masked weights
/// only); the lottery ticket copies the starting values into the weights
/// (Lightning makes the weights share the copy's storage, so training also
/// moves the copy and only the first reset restores the start). The fit's
/// summary.json gets `pruning`: each parameter's sparsity (its mask's
/// zeros) and the total.
class ModelPruning : public train::Callback {
 public:
  /// Throws ConfigError as Lightning raises MisconfigurationException: a
  /// pruning_fn it does not know, a parameter name other than weight or
  /// bias, a structured method without pruning_dim (or ln_structured
  /// without pruning_norm), global pruning with a structured method, a
  /// verbose level other than 0, 1 or 2.
  explicit ModelPruning(ModelPruningOptions options);

  std::string state_key() const override {
    return "ModelPruning";
  }
  /// Resolves the parameters (ConfigError naming one that does not exist,
  /// with the model's names) and keeps the starting values for the lottery
  /// ticket.
  void setup(train::Trainer& trainer, train::Module& module) override;
  /// A fit resumed from a checkpoint written at the end of validation,
  /// before the same epoch's pruning at its end (checkpoints that validation
  /// writes come first), prunes for that epoch now, with the generator
  /// state the uninterrupted run had then: the resumed run matches it.
  void on_fit_start(train::Trainer& trainer, train::Module& module) override;
  void on_train_epoch_end(
      train::Trainer& trainer, train::Module& module) override;
  void on_validation_end(
      train::Trainer& trainer, train::Module& module) override;
  /// Writes last.ckpt again when the last pruning came after the last
  /// checkpoints (at the end of the last epoch), then makes the pruning
  /// permanent when make_pruning_permanent.
  void on_fit_end(train::Trainer& trainer, train::Module& module) override;
  nlohmann::json summary() const override;
  /// The last epoch whose end ran the pruning schedule.
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;

  /// Prunes the resolved parameters by `amount` now (one application of
  /// the method), printing as `verbose` says to `out` when not null.
  void apply_pruning(PruningAmount amount, std::ostream* out = nullptr);
  /// Resets the pruned parameters' surviving values (the lottery ticket).
  void apply_lottery_ticket_hypothesis();

  /// The parameters setup resolved, in order.
  const std::vector<ParameterRef>& parameters() const {
    return parameters_;
  }
  /// Each parameter's sparsity now: the share of its mask's zeros (0 for
  /// one not pruned, or a made-permanent one's share of zero entries).
  std::map<std::string, double> sparsity() const;

  const ModelPruningOptions& options() const {
    return options_;
  }

 private:
  // Prunes as the schedule says for `epoch`; whether it pruned.
  bool run_pruning(train::Trainer& trainer, int64_t epoch);
  std::unique_ptr<PruningMethod> method(PruningAmount amount) const;

  ModelPruningOptions options_;
  // Lightning's _pruning_method_name: the class name with global pruning,
  // the function's name without.
  std::string method_name_;
  std::vector<ParameterRef> parameters_;
  // The starting values, for the lottery ticket.
  std::vector<at::Tensor> originals_;
  // sparsity() when the fit ended, before the masks were made permanent.
  std::map<std::string, double> final_sparsity_;
  int64_t prunings_ = 0;
  int64_t last_epoch_ = -1;
  // A pruning since the last checkpoints were written.
  bool unsaved_ = false;
};

} // namespace hotloop::compress
