#include "hotloop/core/threads.h"

#include <ATen/Parallel.h>

#include <dlfcn.h>

#include <algorithm>
#include <thread>

namespace hotloop {

int hardware_threads() {
  return std::max(1u, std::thread::hardware_concurrency());
}

int resolve_intra_op_threads(int requested, int loader_workers, int processes) {
  if (requested > 0) {
    return requested;
  }
  const int cores = std::max(1, hardware_threads() / std::max(1, processes));
  const int loader_share = std::max(0, loader_workers - cores / 2);
  return std::max(1, cores - loader_share);
}

int configure_intra_op_threads(
    int requested, int loader_workers, int processes) {
  const int threads =
      resolve_intra_op_threads(requested, loader_workers, processes);
  at::set_num_threads(threads);
  return threads;
}

bool set_blas_threads(int threads) {
  // Looked up, not linked: LibTorch may sit on another BLAS (or MKL).
  using SetThreads = void (*)(int);
  const auto set = reinterpret_cast<SetThreads>(
      ::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (set == nullptr) {
    return false;
  }
  set(threads);
  return true;
}

} // namespace hotloop
