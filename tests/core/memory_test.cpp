#include "hotloop/core/memory.h"

#include <gtest/gtest.h>

#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace hotloop {
namespace {

#if defined(__GLIBC__)
TEST(RetainFreedHostMemory, AppliesOnGlibcAndIsIdempotent) {
  EXPECT_TRUE(retain_freed_host_memory());
  EXPECT_TRUE(retain_freed_host_memory());
}

TEST(RetainFreedHostMemory, LargeBlocksComeFromTheHeapAndStayMappedAfterFree) {
  ASSERT_TRUE(retain_freed_host_memory());
  // 16 MiB: above glibc's default mmap threshold, so without the setting it
  // would be a fresh mapping, unmapped again on free.
  constexpr size_t kSize = 16 << 20;
  const struct mallinfo2 before = mallinfo2();
  void* block = std::malloc(kSize);
  ASSERT_NE(block, nullptr);
  const struct mallinfo2 held = mallinfo2();
  EXPECT_EQ(held.hblkhd, before.hblkhd); // no new mmapped block
  EXPECT_GE(held.arena, before.arena);
  std::free(block);
  const struct mallinfo2 after = mallinfo2();
  EXPECT_EQ(after.arena, held.arena); // the heap was not trimmed
  EXPECT_GE(after.fordblks, kSize);   // and the block is free for reuse
}
#endif

} // namespace
} // namespace hotloop
