#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace hotloop::cli {

/// Runs the `hotloop` command line: `fit`, `validate`, `test`, `--help`,
/// `--version`. `args` excludes the program name. Results go to `out`,
/// errors to `err` as one line plus a hint; never throws.
///
/// Returns 0 on success, 2 for a usage or config error, 1 for any other
/// failure (missing data, unreadable checkpoint, ...).
int run(
    const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

} // namespace hotloop::cli
