#pragma once

#include "hotloop/cli/config.h"
#include "hotloop/compress/model_pruning.h"

#include <optional>

namespace hotloop::cli {

/// Adds the `pruning` section to `schema`: `pruning.enabled` and Lightning's
/// ModelPruning arguments under their names (pruning.pruning_fn,
/// pruning.amount, pruning.use_global_unstructured, ...), each with its
/// default and help line.
void add_pruning_options(ConfigSchema& schema);

/// The ModelPruning the config asks for; nullopt unless pruning.enabled.
/// Throws ConfigError naming the key whose value does not fit (an amount
/// out of range, a structured pruning_fn without pruning.pruning_dim,
/// global pruning with a structured method, ...).
std::optional<compress::ModelPruningOptions> pruning_options(
    const Config& config);

} // namespace hotloop::cli
