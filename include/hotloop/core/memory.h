#pragma once

#include <cstdint>

namespace hotloop {

/// Tells the C allocator to keep freed memory for reuse instead of handing
/// it back to the kernel. A training step allocates and frees the same large
/// activation buffers every iteration; by default glibc serves each one with
/// a fresh mmap and returns it with munmap, so every step pays page faults
/// to zero the pages again (on a 2-core machine: a third of the step time
/// in the kernel). Raising the mmap and trim thresholds to their maximum
/// keeps those pages mapped and reused.
///
/// Process-wide and idempotent; a no-op where the C library is not glibc.
/// Returns whether the setting was applied.
bool retain_freed_host_memory();

/// Hands the freed memory the C allocator keeps back to the kernel
/// (glibc's malloc_trim), so that the resident set is what is in use.
void release_freed_host_memory();

/// This process's resident set now, and its peak since it started or
/// since the last reset_peak_resident_bytes (Linux's VmRSS and VmHWM), in
/// bytes; 0 where /proc/self/status cannot be read.
int64_t resident_bytes();
int64_t peak_resident_bytes();
/// Starts a new peak at the current resident set (Linux's clear_refs 5).
/// Returns false where the kernel does not allow it.
bool reset_peak_resident_bytes();

/// Memory the kernel could give without swapping (MemAvailable), in
/// bytes; 0 where /proc/meminfo cannot be read.
int64_t available_host_bytes();

} // namespace hotloop
