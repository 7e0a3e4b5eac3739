#pragma once

// The commands of hotloop's command line that live outside app.cpp, and
// what they share with it.

#include "hotloop/cli/config.h"
#include "hotloop/cli/fit_config.h"

#include <ostream>
#include <string>
#include <vector>

namespace hotloop::cli {

/// `--ckpt_path`: `last` is the newest run's last.ckpt under
/// default_root_dir/name; `auto` the same when there is one, else "" (a
/// fresh start); anything else is the path itself. Throws Error for `last`
/// when there is none.
std::string resolve_ckpt_path(const std::string& path, const FitConfig& config);

/// `hotloop generate`: text (or token ids) from a GPT checkpoint, nanoGPT's
/// sample.py. The flags it reads besides the config's keys.
extern const char* const kGenerateFlags[];
int run_generate(const ParsedArgs& args, std::ostream& out, std::ostream& err);

/// `hotloop tune`: the config's run measured in short windows with one
/// setting varied at a time, then the winners together; prints a table and
/// a verdict per strategy and writes tuned.yaml. The flags it reads besides
/// the config's keys.
extern const char* const kTuneFlags[];
int run_tune(const ParsedArgs& args, std::ostream& out);

/// `hotloop checkpoint PATH`: what a checkpoint holds and whether its
/// checksum verifies (exit status 1 when it does not).
int run_checkpoint(const std::vector<std::string>& args, std::ostream& out);

} // namespace hotloop::cli
