#pragma once

// A CPU emulator for hotloop's CUDA kernels (src/models/*.cu), so that their
// logic is tested on machines without a GPU: a kernel's source compiles as
// C++ against include/cuda_runtime.h here, and each launch runs every block
// in turn, each thread of a block as a fiber of its own. A fiber runs until
// it reaches __syncthreads() or a warp shuffle, then the next one takes its
// turn, in the order Device::order gives, so that:
// - a value read from shared memory before the barrier that orders it
//   comes out differently under another order (the tests run each kernel
//   under several and compare the results bit for bit);
// - a barrier that not every thread of the block (or lane of the warp)
//   reaches stops the launch with an error saying so, where a GPU would
//   hang or go wrong;
// - the grid, blocks and their indices are the GPU's (one_wave() sizes
//   grids from Device::multiprocessors).
// What it does not find: races between blocks (they run one at a time),
// reads of shared memory no thread of the block wrote (it keeps the last
// block's values), lanes that exchange values through shared memory with
// no __syncwarp (a shuffle orders memory here, not on a GPU), the device's
// own rounding (its expf, rsqrtf and fused multiply-adds: "the same bits"
// here means across orders, not the GPU's bits), nor anything of timing or
// memory throughput.

#include <cstdint>
#include <functional>

// CUDA's index types and built-in variables (the running thread's).
struct uint3 {
  unsigned x = 0;
  unsigned y = 0;
  unsigned z = 0;
};

struct dim3 {
  unsigned x;
  unsigned y;
  unsigned z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1)
      : x(x_), y(y_), z(z_) {}
};

extern uint3 threadIdx;
extern uint3 blockIdx;
extern dim3 blockDim;
extern dim3 gridDim;

namespace hotloop::testing::cuda_emulation {

/// The order in which the threads of a block take their turns (and the
/// blocks of a grid run).
enum class Order { forward, reverse, shuffled };

/// What the next launches run on.
struct Device {
  int multiprocessors = 2;
  /// What cudaOccupancyMaxActiveBlocksPerMultiprocessor answers (one_wave()
  /// asks once per kernel and keeps it).
  int blocks_per_multiprocessor = 2;
  Order order = Order::forward;
  /// Order::shuffled's seed: each round of turns is a new permutation.
  uint32_t seed = 1;
};

/// The emulated device (one per process).
Device& device();

/// The emulated device as it was, back at the end of a scope (a test's).
class ScopedDevice {
 public:
  ScopedDevice() : saved_(device()) {}
  ~ScopedDevice() {
    device() = saved_;
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  Device saved_;
};

/// The grid and block of the latest launch, and the launches so far.
struct Launches {
  int64_t count = 0;
  dim3 blocks;
  dim3 threads;
};
const Launches& launches();

/// Runs `kernel` as the body of every thread of a `blocks` x `threads`
/// launch, and returns when all have returned. Throws what a thread threw,
/// or a std::runtime_error naming the block and where its threads wait if
/// they can go no further.
void launch(dim3 blocks, dim3 threads, const std::function<void()>& kernel);

/// __syncthreads(): every thread of the block, then on.
void sync_threads();

/// __shfl_xor_sync over the calling thread's warp (all 32 lanes), on the
/// value's bytes.
uint64_t shuffle_xor(uint64_t bits, unsigned mask, int lane_mask, int width);

} // namespace hotloop::testing::cuda_emulation

// kernel_launch.cuh's launch_kernel() runs kernels through this.
#define HOTLOOP_CUDA_EMULATION(kernel, blocks, threads, ...) \
  ::hotloop::testing::cuda_emulation::launch(                \
      blocks, threads, [&] { kernel(__VA_ARGS__); })
