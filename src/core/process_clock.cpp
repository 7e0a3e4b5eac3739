#include "hotloop/core/process_clock.h"

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>

#include <time.h>
#include <unistd.h>

namespace hotloop {
namespace {

// When this library was loaded: the fallback's zero.
const auto kLoaded = std::chrono::steady_clock::now();

// The process's start in seconds since boot (field 22 of /proc/self/stat,
// in clock ticks), or a negative number where it cannot be read.
double start_since_boot() {
  std::ifstream in("/proc/self/stat");
  std::string stat;
  if (!std::getline(in, stat)) {
    return -1;
  }
  // The command name (field 2) is in parentheses and may hold spaces.
  const auto close = stat.rfind(')');
  if (close == std::string::npos) {
    return -1;
  }
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  // Fields 3 (state) .. 21 precede the start time.
  for (int i = 3; i < 22; ++i) {
    if (!(fields >> field)) {
      return -1;
    }
  }
  unsigned long long ticks = 0;
  const long per_second = sysconf(_SC_CLK_TCK);
  if (!(fields >> ticks) || per_second <= 0) {
    return -1;
  }
  return static_cast<double>(ticks) / static_cast<double>(per_second);
}

} // namespace

double seconds_since_process_start() {
  static const double start = start_since_boot();
  timespec now{};
  if (start >= 0 && clock_gettime(CLOCK_BOOTTIME, &now) == 0) {
    return static_cast<double>(now.tv_sec) +
           static_cast<double>(now.tv_nsec) * 1e-9 - start;
  }
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now() - kLoaded)
      .count();
}

} // namespace hotloop
