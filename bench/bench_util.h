#pragma once

// What every benchmark prints about the machine it ran on.

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hotloop::bench {

struct Machine {
  std::string cpu;
  unsigned cores = 0;
  std::string libtorch;
  int intra_op_threads = 0;
  std::string date;
  std::string load_before;
  std::string load_after;
};

/// The 1, 5 and 15 minute load averages, as /proc/loadavg gives them.
std::string load_average();

/// CPU model, core count, LibTorch version, intra-op threads, date and the
/// load average now (load_after is left for the caller to fill at the end).
Machine describe_machine();

/// Prints the `machine:` line, then each (label, text) of `extra` as
/// `label: text` aligned the same way, then the `date:` line with the load
/// averages before and after.
void print_machine(
    const Machine& machine,
    const std::vector<std::pair<std::string, std::string>>& extra = {});

/// `s` in single quotes for /bin/sh, inner quotes escaped.
std::string shell_quote(const std::string& s);

/// Runs `command` through the shell; stdout comes back in `output` (stderr
/// passes through to ours). Returns the exit status, or -1 when it could not
/// start or was killed.
int run_command(const std::string& command, std::string& output);

/// The string value of "key" in a flat JSON text, unescaping \" and \\
/// only; nullopt when absent.
std::optional<std::string> json_string(
    const std::string& text, const std::string& key);

/// The number value of "key" in a flat JSON text; nullopt when absent.
std::optional<double> json_number(
    const std::string& text, const std::string& key);

/// `s` escaped for a JSON string (quotes, backslashes, control bytes).
std::string json_escape(const std::string& s);

/// `s` as a JSON string literal.
std::string quoted(const std::string& s);

} // namespace hotloop::bench
