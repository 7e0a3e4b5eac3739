// Running the hotloop command line from a test: in this process (run_cli)
// or as the built program in a process of its own (run_process), for the
// CLI tests of every area.
#pragma once

#include "hotloop/cli/app.h"

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace hotloop::cli::testing {

struct Result {
  int code;
  std::string out;
  std::string err;
};

/// `hotloop ARGS...` through cli::run, its output captured.
inline Result run_cli(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int code = run(args, out, err);
  return {code, out.str(), err.str()};
}

/// The hotloop program in a fresh process, stdout and stderr to `log`;
/// its exit code (-1 when it did not exit).
inline int run_process(
    const std::vector<std::string>& args, const std::string& log) {
  std::string command = HOTLOOP_CLI_PATH;
  for (const std::string& arg : args) {
    command += " '" + arg + "'";
  }
  command += " > '" + log + "' 2>&1";
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(
      (std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

} // namespace hotloop::cli::testing
