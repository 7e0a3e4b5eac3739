#pragma once

#include <string>

namespace hotloop::train {

/// Creates and returns `<root>/<name>/version_N` with N one above the
/// highest existing version (0 for the first run), as Lightning's loggers
/// number runs. Safe against concurrent runs: a version another process
/// created first is skipped. Throws Error naming the folder it cannot create.
std::string create_version_dir(
    const std::string& root, const std::string& name);

} // namespace hotloop::train
