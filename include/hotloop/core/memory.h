#pragma once

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

} // namespace hotloop
