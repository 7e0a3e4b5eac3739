#include "emulator.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <exception>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

uint3 threadIdx;
uint3 blockIdx;
dim3 blockDim;
dim3 gridDim;

namespace hotloop::testing::cuda_emulation {
namespace {

constexpr int kWarpSize = 32;
constexpr int kMaxThreads = 1024;
constexpr size_t kStackBytes = 256 << 10;

enum class Wait { none, block, warp };

struct Barrier {
  int arrived = 0;
  uint64_t generation = 0;
};

struct Thread {
  ucontext_t context;
  char* stack = nullptr; // below it, a page that faults on overflow
  uint3 index;
  int linear = 0;
  bool returned = false;
  Wait waiting = Wait::none;
};

struct Warp {
  Barrier barrier;
  int lanes = 0;
  uint64_t slots[kWarpSize] = {};
};

// The block being run: one at a time, its threads taking turns with the
// scheduler (launch()) on one system thread.
struct Block {
  std::vector<Thread> threads;
  std::vector<Warp> warps;
  Barrier barrier;
  int returned = 0;
  // Arrivals at barriers and returns: a round of turns without any is a
  // block that can go no further.
  uint64_t progress = 0;
  std::exception_ptr error;
  ucontext_t scheduler;
  Thread* current = nullptr;
  const std::function<void()>* kernel = nullptr;
};

Block* running = nullptr;

Launches launched;

Block& block_of_caller(const char* what) {
  if (running == nullptr || running->current == nullptr) {
    throw std::logic_error(
        std::string("cuda emulation: ") + what + " outside a kernel");
  }
  return *running;
}

// Where a thread's body starts (makecontext passes no pointer portably).
void thread_main() {
  Block& b = *running;
  try {
    (*b.kernel)();
  } catch (...) {
    if (!b.error) {
      b.error = std::current_exception();
    }
  }
  b.current->returned = true;
  ++b.returned;
  ++b.progress;
  // Returning resumes uc_link: the scheduler.
}

// Makes `t` start the kernel at its next turn. Apart from launch():
// getcontext returns twice, as setjmp.
__attribute__((noinline)) void start(Thread& t, Block& b) {
  t.returned = false;
  t.waiting = Wait::none;
  getcontext(&t.context);
  t.context.uc_stack.ss_sp = t.stack;
  t.context.uc_stack.ss_size = kStackBytes;
  t.context.uc_link = &b.scheduler;
  makecontext(&t.context, thread_main, 0);
}

void wait(Block& b, Barrier& barrier, int expected, Wait kind) {
  Thread* self = b.current;
  ++b.progress;
  const uint64_t generation = barrier.generation;
  if (++barrier.arrived == expected) {
    barrier.arrived = 0;
    ++barrier.generation;
    return;
  }
  self->waiting = kind;
  while (barrier.generation == generation) {
    swapcontext(&self->context, &b.scheduler);
  }
  self->waiting = Wait::none;
}

std::string text(const dim3& d) {
  return "[" + std::to_string(d.x) + ", " + std::to_string(d.y) + ", " +
      std::to_string(d.z) + "]";
}

std::string stuck(const Block& b) {
  int at_block = 0;
  int at_warp = 0;
  for (const Thread& t : b.threads) {
    at_block += t.waiting == Wait::block ? 1 : 0;
    at_warp += t.waiting == Wait::warp ? 1 : 0;
  }
  return "cuda emulation: block (" + std::to_string(blockIdx.x) + ", " +
      std::to_string(blockIdx.y) + ", " + std::to_string(blockIdx.z) +
      ") of a " + text(gridDim) + " x " + text(blockDim) +
      " launch can go no further: " + std::to_string(at_block) +
      " threads wait at __syncthreads, " + std::to_string(at_warp) +
      " at a warp shuffle, " + std::to_string(b.returned) +
      " have returned (a barrier that not every thread of the block, or "
      "lane of the warp, reaches)";
}

// Thread stacks for one launch, each above a page that faults.
class Stacks {
 public:
  explicit Stacks(int count) : page_(sysconf(_SC_PAGESIZE)) {
    bytes_ = (kStackBytes + page_) * count;
    void* base = mmap(
        nullptr,
        bytes_,
        PROT_READ | PROT_WRITE,
        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
        -1,
        0);
    if (base == MAP_FAILED) {
      throw std::runtime_error("cuda emulation: no memory for thread stacks");
    }
    base_ = static_cast<char*>(base);
    for (int i = 0; i < count; ++i) {
      mprotect(base_ + i * (kStackBytes + page_), page_, PROT_NONE);
    }
  }
  ~Stacks() {
    munmap(base_, bytes_);
  }
  Stacks(const Stacks&) = delete;
  Stacks& operator=(const Stacks&) = delete;

  char* stack(int i) const {
    return base_ + i * (kStackBytes + page_) + page_;
  }

 private:
  size_t page_;
  size_t bytes_ = 0;
  char* base_ = nullptr;
};

// Clears `running` however launch() leaves.
struct Running {
  explicit Running(Block& b) {
    running = &b;
  }
  ~Running() {
    running = nullptr;
  }
};

std::vector<uint3> block_indices(dim3 blocks) {
  std::vector<uint3> indices;
  for (unsigned z = 0; z < blocks.z; ++z) {
    for (unsigned y = 0; y < blocks.y; ++y) {
      for (unsigned x = 0; x < blocks.x; ++x) {
        indices.push_back(uint3{x, y, z});
      }
    }
  }
  return indices;
}

} // namespace

Device& device() {
  static Device emulated;
  return emulated;
}

const Launches& launches() {
  return launched;
}

void launch(dim3 blocks, dim3 threads, const std::function<void()>& kernel) {
  if (running != nullptr) {
    throw std::logic_error("cuda emulation: a launch inside a kernel");
  }
  const int64_t count = static_cast<int64_t>(threads.x) * threads.y * threads.z;
  if (count < 1 || count > kMaxThreads || blocks.x < 1 || blocks.y < 1 ||
      blocks.z < 1 || blocks.y > 65535 || blocks.z > 65535) {
    throw std::invalid_argument(
        "cuda emulation: a launch of " + text(blocks) + " blocks of " +
        text(threads) + " threads, which CUDA refuses");
  }
  ++launched.count;
  launched.blocks = blocks;
  launched.threads = threads;
  const Device& dev = device();
  std::mt19937 random(dev.seed);
  gridDim = blocks;
  blockDim = threads;

  const int n = static_cast<int>(count);
  Stacks stacks(n);
  Block b;
  b.kernel = &kernel;
  b.threads.resize(n);
  b.warps.resize((n + kWarpSize - 1) / kWarpSize);
  for (int i = 0; i < n; ++i) {
    Thread& t = b.threads[i];
    t.linear = i;
    t.stack = stacks.stack(i);
    t.index = uint3{
        static_cast<unsigned>(i % threads.x),
        static_cast<unsigned>(i / threads.x % threads.y),
        static_cast<unsigned>(i / (threads.x * threads.y))};
    ++b.warps[i / kWarpSize].lanes;
  }
  std::vector<uint3> order_of_blocks = block_indices(blocks);
  std::vector<int> turns(n);
  std::iota(turns.begin(), turns.end(), 0);
  if (dev.order == Order::reverse) {
    std::reverse(order_of_blocks.begin(), order_of_blocks.end());
    std::reverse(turns.begin(), turns.end());
  } else if (dev.order == Order::shuffled) {
    std::shuffle(order_of_blocks.begin(), order_of_blocks.end(), random);
  }

  const Running guard(b);
  for (const uint3& index : order_of_blocks) {
    blockIdx = index;
    b.barrier = Barrier{};
    b.returned = 0;
    for (Warp& w : b.warps) {
      w.barrier = Barrier{};
    }
    for (Thread& t : b.threads) {
      start(t, b);
    }
    while (b.returned < n) {
      if (dev.order == Order::shuffled) {
        std::shuffle(turns.begin(), turns.end(), random);
      }
      const uint64_t before = b.progress;
      for (const int i : turns) {
        Thread& t = b.threads[i];
        if (t.returned) {
          continue;
        }
        b.current = &t;
        threadIdx = t.index;
        swapcontext(&b.scheduler, &t.context);
        b.current = nullptr;
        if (b.error) {
          std::rethrow_exception(b.error);
        }
      }
      if (b.returned < n && b.progress == before) {
        throw std::runtime_error(stuck(b));
      }
    }
  }
}

void sync_threads() {
  Block& b = block_of_caller("__syncthreads");
  wait(b, b.barrier, static_cast<int>(b.threads.size()), Wait::block);
}

uint64_t shuffle_xor(uint64_t bits, unsigned mask, int lane_mask, int width) {
  Block& b = block_of_caller("a warp shuffle");
  const int lane = b.current->linear % kWarpSize;
  Warp& warp = b.warps[b.current->linear / kWarpSize];
  if (mask != 0xffffffffu || width != kWarpSize || warp.lanes != kWarpSize) {
    throw std::logic_error(
        "cuda emulation: shuffles over a whole warp of 32 lanes only");
  }
  warp.slots[lane] = bits;
  wait(b, warp.barrier, kWarpSize, Wait::warp);
  // The mask's low five bits, as PTX's shfl.bfly takes it.
  const uint64_t value = warp.slots[lane ^ (lane_mask & (kWarpSize - 1))];
  // Every lane has read before any writes its next value.
  wait(b, warp.barrier, kWarpSize, Wait::warp);
  return value;
}

} // namespace hotloop::testing::cuda_emulation
