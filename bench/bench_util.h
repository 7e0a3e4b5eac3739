#pragma once

// What every benchmark prints about the machine it ran on.

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

} // namespace hotloop::bench
