// The emulator that runs hotloop's CUDA kernels on the CPU: threads see
// CUDA's indices, shuffles exchange a warp's values, a missing
// __syncthreads shows as results that depend on the threads' order, and a
// barrier not every thread reaches is an error, not a hang.

#include "cuda_emulation/emulator.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace hotloop::testing::cuda_emulation {
namespace {

constexpr Order kOrders[] = {Order::forward, Order::reverse, Order::shuffled};

// Sets the device's order for a scope.
struct InOrder : ScopedDevice {
  explicit InOrder(Order order) {
    device().order = order;
  }
};

int linear_thread() {
  return static_cast<int>(
      threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
}

TEST(CudaEmulation, EveryThreadSeesItsIndicesAndTheLaunchsShape) {
  const dim3 blocks(3, 2);
  const dim3 threads(40, 2, 2); // 160 threads: five warps
  for (const Order order : kOrders) {
    const InOrder in(order);
    std::vector<int> seen(6 * 160, 0);
    bool shapes = true;
    launch(blocks, threads, [&] {
      shapes = shapes && gridDim.x == 3 && gridDim.y == 2 && gridDim.z == 1 &&
          blockDim.x == 40 && blockDim.y == 2 && blockDim.z == 2 &&
          threadIdx.x < 40 && threadIdx.y < 2 && threadIdx.z < 2;
      const int block = static_cast<int>(blockIdx.x + 3 * blockIdx.y);
      ++seen[block * 160 + linear_thread()];
    });
    EXPECT_TRUE(shapes);
    EXPECT_EQ(seen, std::vector<int>(6 * 160, 1));
    EXPECT_EQ(launches().blocks.x, 3u);
    EXPECT_EQ(launches().threads.z, 2u);
  }
}

TEST(CudaEmulation, AShuffleReadsTheLaneItsMaskNames) {
  for (const Order order : kOrders) {
    const InOrder in(order);
    std::vector<int> got(64 * 4);
    std::vector<double> sums(64);
    launch(dim3(1), dim3(64), [&] {
      const int t = static_cast<int>(threadIdx.x);
      got[t * 4 + 0] = __shfl_xor_sync(0xffffffffu, t, 1);
      got[t * 4 + 1] = __shfl_xor_sync(0xffffffffu, t, 18);
      // The mask's low five bits count, as PTX's.
      got[t * 4 + 2] = __shfl_xor_sync(0xffffffffu, t, 32);
      got[t * 4 + 3] = __shfl_xor_sync(0xffffffffu, t, 33);
      double v = t; // 8 bytes
      for (int offset = 16; offset > 0; offset /= 2) {
        v += __shfl_xor_sync(0xffffffffu, v, offset);
      }
      sums[t] = v;
    });
    for (int t = 0; t < 64; ++t) {
      EXPECT_EQ(got[t * 4 + 0], t ^ 1) << t;
      EXPECT_EQ(got[t * 4 + 1], t ^ 18) << t;
      EXPECT_EQ(got[t * 4 + 2], t) << t;
      EXPECT_EQ(got[t * 4 + 3], t ^ 1) << t;
      // Each warp's lanes: 0 + ... + 31, or 32 + ... + 63.
      EXPECT_EQ(sums[t], t < 32 ? 496 : 1520) << t;
    }
  }
}

// Each thread writes its slot of shared memory, then reads its
// neighbour's: only __syncthreads between the two makes that the
// neighbour's new value under every order.
std::vector<int> neighbours(bool barrier) {
  std::vector<int> out(64);
  launch(dim3(1), dim3(64), [&] {
    static int slots[64];
    const int t = static_cast<int>(threadIdx.x);
    slots[t] = -1;
    __syncthreads();
    slots[t] = t;
    if (barrier) {
      __syncthreads();
    }
    out[t] = slots[(t + 1) % 64];
  });
  return out;
}

TEST(CudaEmulation, AMissingSyncthreadsGivesResultsThatDependOnTheOrder) {
  std::vector<int> expected(64);
  for (int t = 0; t < 64; ++t) {
    expected[t] = (t + 1) % 64;
  }
  int wrong = 0;
  for (const Order order : kOrders) {
    const InOrder in(order);
    EXPECT_EQ(neighbours(true), expected);
    wrong += neighbours(false) != expected ? 1 : 0;
  }
  EXPECT_GE(wrong, 2); // forward and reverse each read a stale slot
}

// The error `body` throws: its message.
std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

void expect_error(
    const std::function<void()>& body,
    const std::string& part,
    const std::string& other) {
  const std::string what = error_of(body);
  EXPECT_NE(what.find(part), std::string::npos) << what;
  EXPECT_NE(what.find(other), std::string::npos) << what;
}

TEST(CudaEmulation, ABarrierThatSomeThreadsNeverReachIsAnError) {
  expect_error(
      [] {
        launch(dim3(2), dim3(64), [] {
          if (threadIdx.x >= 40) {
            return;
          }
          __syncthreads();
        });
      },
      "block (0, 0, 0) of a [2, 1, 1] x [64, 1, 1] launch can go no "
      "further: 40 threads wait at __syncthreads, 0 at a warp shuffle, 24 "
      "have returned",
      "a barrier that not every thread");
  expect_error(
      [] {
        launch(dim3(1), dim3(64), [] {
          if (threadIdx.x == 5) {
            return;
          }
          __shfl_xor_sync(0xffffffffu, 1.f, 1);
        });
      },
      "0 threads wait at __syncthreads, 31 at a warp shuffle, 33 have "
      "returned",
      "lane of the warp");
  // The next launch runs as if nothing had happened.
  std::vector<int> out(64);
  launch(dim3(1), dim3(64), [&] {
    __syncthreads();
    out[threadIdx.x] = 1;
  });
  EXPECT_EQ(out, std::vector<int>(64, 1));
}

TEST(CudaEmulation, WhatAThreadThrowsComesOutOfTheLaunch) {
  // The thread's own error, as it threw it.
  EXPECT_EQ(
      error_of([] {
        launch(dim3(4), dim3(32), [] {
          __syncthreads();
          if (blockIdx.x == 2 && threadIdx.x == 7) {
            throw std::runtime_error("thread 7 of block 2");
          }
        });
      }),
      "thread 7 of block 2");
  // A device-side assertion, likewise.
  EXPECT_EQ(
      error_of([] {
        launch(dim3(1), dim3(32), [] { CUDA_KERNEL_ASSERT(threadIdx.x < 31); });
      }),
      "CUDA_KERNEL_ASSERT(threadIdx.x < 31) failed");
  expect_error(
      [] { launch(dim3(1), dim3(2048), [] {}); },
      "a launch of [1, 1, 1] blocks of [2048, 1, 1] threads",
      "CUDA refuses");
  expect_error(
      [] { __syncthreads(); }, "__syncthreads outside a kernel", "kernel");
}

} // namespace
} // namespace hotloop::testing::cuda_emulation
