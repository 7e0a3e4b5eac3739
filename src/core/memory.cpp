#include "hotloop/core/memory.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cstdint>
#include <fstream>
#include <string>

namespace hotloop {
namespace {

// The "<key>: <n> kB" line of a /proc file, in bytes; 0 when absent.
int64_t proc_kilobytes(const char* path, const std::string& key) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.compare(0, key.size(), key) == 0 && line.size() > key.size() &&
        line[key.size()] == ':') {
      return std::stoll(line.substr(key.size() + 1)) * 1024;
    }
  }
  return 0;
}

} // namespace

bool retain_freed_host_memory() {
#if defined(__GLIBC__)
  // 32 MiB is glibc's largest mmap threshold on 64-bit (larger values are
  // rejected); allocations below it come from the heap and are reused.
  constexpr int kMmapThreshold = 32 << 20;
  // Never trim the top of the heap back to the kernel during training.
  constexpr int kTrimThreshold = INT32_MAX;
  return mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1 &&
         mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1;
#else
  return false;
#endif
}

void release_freed_host_memory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

int64_t resident_bytes() {
  return proc_kilobytes("/proc/self/status", "VmRSS");
}

int64_t peak_resident_bytes() {
  return proc_kilobytes("/proc/self/status", "VmHWM");
}

bool reset_peak_resident_bytes() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

int64_t available_host_bytes() {
  return proc_kilobytes("/proc/meminfo", "MemAvailable");
}

} // namespace hotloop
