#include "hotloop/core/memory.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cstdint>

namespace hotloop {

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

} // namespace hotloop
