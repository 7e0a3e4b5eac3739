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

/// `run` on a program's arguments with std::cout and std::cerr: the whole
/// `main` of the hotloop program, and of a program of the user's own that
/// registers models or datasets (see registry.h) and hands over to it.
int main(int argc, char** argv);

} // namespace hotloop::cli
