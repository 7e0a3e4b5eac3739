// Command-line arguments (one per line): --key=value overrides and flags.
#include "fuzz_input.h"

#include "hotloop/cli/config.h"
#include "hotloop/cli/fit_config.h"

#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args;
  std::string arg;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') {
      args.push_back(arg);
      arg.clear();
    } else {
      arg.push_back(static_cast<char>(data[i]));
    }
  }
  args.push_back(arg);
  hotloop::fuzz::expect_clean([&] {
    const hotloop::cli::ParsedArgs parsed = hotloop::cli::parse_args(
        hotloop::cli::fit_schema(), args, {"ckpt_path", "output", "help"});
    hotloop::cli::to_fit_config(parsed.config);
  });
  return 0;
}
