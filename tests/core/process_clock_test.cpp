#include "hotloop/core/process_clock.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace hotloop {
namespace {

// When the test program was loaded: after its process started.
const auto kTestLoaded = std::chrono::steady_clock::now();

TEST(ProcessClock, CountsFromTheProcessStartAndAdvancesWithTime) {
  const double first = seconds_since_process_start();
  const double loaded = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - kTestLoaded)
                            .count();
  // The kernel records the start to the clock tick (10 ms).
  EXPECT_GE(first, loaded - 0.011);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const double second = seconds_since_process_start();
  EXPECT_GE(second - first, 0.049);
  EXPECT_LT(second - first, 5.0);
}

} // namespace
} // namespace hotloop
