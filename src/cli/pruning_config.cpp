#include "hotloop/cli/pruning_config.h"

#include "hotloop/core/error.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace hotloop::cli {
namespace {

OptionSpec option(
    std::string key,
    OptionType type,
    std::string default_value,
    std::string help,
    std::vector<std::string> choices = {},
    std::optional<double> min = std::nullopt,
    std::optional<double> max = std::nullopt) {
  OptionSpec spec;
  spec.key = std::move(key);
  spec.type = type;
  spec.default_value = std::move(default_value);
  spec.help = std::move(help);
  spec.choices = std::move(choices);
  spec.min = min;
  spec.max = max;
  return spec;
}

// "a,b , c" -> {a, b, c}; ConfigError naming `key` for an empty name.
std::vector<std::string> names(const Config& c, const std::string& key) {
  std::vector<std::string> out;
  const std::string text = c.get_string(key);
  if (text.empty()) {
    return out;
  }
  std::stringstream in(text);
  std::string name;
  while (std::getline(in, name, ',')) {
    name.erase(0, name.find_first_not_of(" \t"));
    name.erase(name.find_last_not_of(" \t") + 1);
    HOTLOOP_CHECK_AS(
        ConfigError,
        !name.empty(),
        key,
        ": an empty name in '",
        text,
        "' (expected names separated by commas)");
    out.push_back(name);
  }
  return out;
}

} // namespace

void add_pruning_options(ConfigSchema& s) {
  using T = OptionType;
  s.add(option(
      "pruning.enabled",
      T::kBool,
      "false",
      "prune the model while it trains (Lightning's ModelPruning)"));
  s.add(option(
      "pruning.pruning_fn",
      T::kString,
      "l1_unstructured",
      "torch.nn.utils.prune's method",
      {"l1_unstructured",
       "random_unstructured",
       "ln_structured",
       "random_structured"}));
  s.add(option(
      "pruning.parameters_to_prune",
      T::kString,
      "",
      "parameters to prune, by name separated by commas "
      "(network.features.0.weight,...); \"\": every module's "
      "pruning.parameter_names"));
  s.add(option(
      "pruning.parameter_names",
      T::kString,
      "weight,bias",
      "with parameters_to_prune \"\": weight, bias or weight,bias"));
  s.add(option(
      "pruning.use_global_unstructured",
      T::kBool,
      "true",
      "prune the parameters together, the amount counted across them "
      "(unstructured methods)"));
  s.add(option(
      "pruning.amount",
      T::kString,
      "0.5",
      "each pruning's amount: a fraction of what is left (0.5; 1.0 is all) "
      "or a count (10)"));
  s.add(option(
      "pruning.amount_schedule",
      T::kFloatList,
      "[]",
      "a fraction per epoch from epoch 0, in place of pruning.amount; "
      "epochs after the list prune nothing",
      {},
      0,
      1));
  s.add(option(
      "pruning.apply_pruning",
      T::kBool,
      "true",
      "prune at all (false: the callback only reports)"));
  s.add(option(
      "pruning.prune_epochs",
      T::kIntList,
      "[]",
      "prune only after these epochs (from 0); []: after every epoch",
      {},
      0));
  s.add(option(
      "pruning.make_pruning_permanent",
      T::kBool,
      "true",
      "make the masks permanent when the fit ends"));
  s.add(option(
      "pruning.use_lottery_ticket_hypothesis",
      T::kBool,
      "true",
      "after each pruning, reset the surviving weights to their starting "
      "values"));
  s.add(option(
      "pruning.resample_parameters",
      T::kBool,
      "false",
      "lottery ticket: draw fresh starting values instead"));
  s.add(option(
      "pruning.pruning_dim",
      T::kString,
      "",
      "structured methods: the channel dimension (0: output channels); "
      "\"\": none"));
  s.add(option(
      "pruning.pruning_norm",
      T::kString,
      "",
      "ln_structured: the norm's p (1, 2, inf, -inf); \"\": none"));
  s.add(option(
      "pruning.verbose",
      T::kInt,
      "0",
      "1: a line per pruning with the sparsity; 2: also per parameter",
      {},
      0,
      2));
  s.add(option(
      "pruning.prune_on_train_epoch_end",
      T::kBool,
      "true",
      "prune at each training epoch's end (false: after each validation)"));
}

std::optional<compress::ModelPruningOptions> pruning_options(const Config& c) {
  if (!c.get_bool("pruning.enabled")) {
    return std::nullopt;
  }
  compress::ModelPruningOptions options(c.get_string("pruning.pruning_fn"));
  options.parameters_to_prune(names(c, "pruning.parameters_to_prune"))
      .parameter_names(names(c, "pruning.parameter_names"))
      .use_global_unstructured(c.get_bool("pruning.use_global_unstructured"))
      .make_pruning_permanent(c.get_bool("pruning.make_pruning_permanent"))
      .use_lottery_ticket_hypothesis(
          c.get_bool("pruning.use_lottery_ticket_hypothesis"))
      .resample_parameters(c.get_bool("pruning.resample_parameters"))
      .verbose(c.get_int("pruning.verbose"))
      .prune_on_train_epoch_end(c.get_bool("pruning.prune_on_train_epoch_end"));
  const std::vector<double> schedule =
      c.get_float_list("pruning.amount_schedule");
  if (!schedule.empty()) {
    options.amount([schedule](int64_t epoch) {
      return compress::PruningAmount::fraction(
          epoch < static_cast<int64_t>(schedule.size()) ? schedule[epoch]
                                                        : 0.0);
    });
  } else {
    options.amount(compress::PruningAmount::parse(
        c.get_string("pruning.amount"), "pruning.amount"));
  }
  const std::vector<int64_t> epochs = c.get_int_list("pruning.prune_epochs");
  const bool apply = c.get_bool("pruning.apply_pruning");
  if (!epochs.empty()) {
    options.apply_pruning([epochs, apply](int64_t epoch) {
      return apply &&
             std::find(epochs.begin(), epochs.end(), epoch) != epochs.end();
    });
  } else {
    options.apply_pruning(apply);
  }
  const std::string dim = c.get_string("pruning.pruning_dim");
  if (!dim.empty()) {
    char* end = nullptr;
    const long long value = std::strtoll(dim.c_str(), &end, 10);
    HOTLOOP_CHECK_AS(
        ConfigError,
        end == dim.c_str() + dim.size(),
        "pruning.pruning_dim: expected a whole number or \"\", got '",
        dim,
        "'");
    options.pruning_dim(value);
  }
  const std::string norm = c.get_string("pruning.pruning_norm");
  if (!norm.empty()) {
    char* end = nullptr;
    const double value = std::strtod(norm.c_str(), &end);
    HOTLOOP_CHECK_AS(
        ConfigError,
        end == norm.c_str() + norm.size() && !std::isnan(value),
        "pruning.pruning_norm: expected a number, inf or -inf, got '",
        norm,
        "'");
    options.pruning_norm(value);
  }
  try {
    compress::ModelPruning check(options);
  } catch (const ConfigError& e) {
    throw ConfigError(hotloop::detail::str_cat("pruning: ", e.what()));
  }
  return options;
}

} // namespace hotloop::cli
