// Running the hotloop command line from a test: in this process (run_cli)
// or as the built program in a process of its own (run_process), for the
// CLI tests of every area; and the small GPT run they share.
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
/// its exit code (-1 when it did not exit). `environment`: `env`'s
/// arguments before the program's ("-u NAME", "NAME=VALUE"), if any.
inline int run_process(
    const std::vector<std::string>& args,
    const std::string& log,
    const std::string& environment = "") {
  std::string command =
      (environment.empty() ? "" : "env " + environment + " ") +
      HOTLOOP_CLI_PATH;
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

/// A one-layer GPT on a 6,900-byte text file that this writes into
/// `folder` (text.txt), its runs under folder/runs: the options (no
/// command), then `extra`.
inline std::vector<std::string> small_gpt_on_text(
    const std::string& folder, const std::vector<std::string>& extra = {}) {
  std::ofstream text(folder + "/text.txt");
  for (int i = 0; i < 300; ++i) {
    text << "hotloop trains models. ";
  }
  std::vector<std::string> args = {
      "--trainer.accelerator=cpu",
      "--data.dataset=text",
      "--data.path=" + folder + "/text.txt",
      "--data.block_size=16",
      "--data.batch_size=16",
      "--model.name=gpt",
      "--model.n_layer=1",
      "--model.n_embd=32",
      "--model.n_head=2",
      "--trainer.default_root_dir=" + folder + "/runs"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

} // namespace hotloop::cli::testing
