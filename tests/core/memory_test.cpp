#include "hotloop/core/memory.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace hotloop {
namespace {

#if defined(__GLIBC__)
// A sanitizer's allocator serves malloc instead of glibc's, whose settings
// and statistics these tests are about.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HOTLOOP_SKIP_UNLESS_GLIBC_MALLOC() \
  GTEST_SKIP() << "malloc is the sanitizer's, not glibc's"
#else
#define HOTLOOP_SKIP_UNLESS_GLIBC_MALLOC() static_cast<void>(0)
#endif

TEST(RetainFreedHostMemory, AppliesOnGlibcAndIsIdempotent) {
  HOTLOOP_SKIP_UNLESS_GLIBC_MALLOC();
  EXPECT_TRUE(retain_freed_host_memory());
  EXPECT_TRUE(retain_freed_host_memory());
}

TEST(RetainFreedHostMemory, LargeBlocksComeFromTheHeapAndStayMappedAfterFree) {
  HOTLOOP_SKIP_UNLESS_GLIBC_MALLOC();
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

TEST(HostMemory, ThePeakFollowsWhatWasTouchedAndStartsAgainOnReset) {
  HOTLOOP_SKIP_UNLESS_GLIBC_MALLOC();
  ASSERT_TRUE(retain_freed_host_memory());
  release_freed_host_memory();
  ASSERT_TRUE(reset_peak_resident_bytes());
  const int64_t start = resident_bytes();
  EXPECT_GT(start, 0);
  EXPECT_LE(peak_resident_bytes(), start + (4 << 20));
  constexpr size_t kSize = 64 << 20;
  char* block = static_cast<char*>(std::malloc(kSize));
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kSize); // resident once touched
  EXPECT_GE(resident_bytes(), start + static_cast<int64_t>(kSize) / 2);
  std::free(block);
  const int64_t peak = peak_resident_bytes();
  EXPECT_GE(peak, start + static_cast<int64_t>(kSize) * 9 / 10);
  // Kept by the allocator until released; then the peak starts again.
  release_freed_host_memory();
  EXPECT_LT(resident_bytes(), start + static_cast<int64_t>(kSize) / 2);
  ASSERT_TRUE(reset_peak_resident_bytes());
  EXPECT_LT(peak_resident_bytes(), peak);
  EXPECT_GT(available_host_bytes(), 0);
}
#endif

} // namespace
} // namespace hotloop
