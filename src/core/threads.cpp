#include "hotloop/core/threads.h"

#include "hotloop/core/blas.h"

#include <ATen/Parallel.h>

#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <thread>

namespace hotloop {
namespace {

// The CPUs in this thread's affinity mask, or 0 where it cannot be read.
int affinity_cpus() {
  for (int size = 1024; size <= (1 << 20); size *= 2) {
    cpu_set_t* set = CPU_ALLOC(size);
    if (set == nullptr) {
      return 0;
    }
    const size_t bytes = CPU_ALLOC_SIZE(size);
    CPU_ZERO_S(bytes, set);
    const int rc = ::sched_getaffinity(0, bytes, set);
    const int count = rc == 0 ? CPU_COUNT_S(bytes, set) : 0;
    const bool too_small = rc != 0 && errno == EINVAL;
    CPU_FREE(set);
    if (!too_small) {
      return count;
    }
  }
  return 0;
}

// OMP_NUM_THREADS's first number when it is a positive integer, else 0.
int omp_num_threads() {
  const char* value = std::getenv("OMP_NUM_THREADS");
  if (value == nullptr) {
    return 0;
  }
  char* end = nullptr;
  errno = 0;
  const long threads = std::strtol(value, &end, 10);
  const bool whole = end != value && (*end == '\0' || *end == ',');
  if (!whole || errno != 0 || threads < 1 || threads > 1 << 16) {
    return 0;
  }
  return static_cast<int>(threads);
}

} // namespace

int hardware_threads() {
  const int allowed = affinity_cpus();
  if (allowed > 0) {
    return allowed;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

int resolve_intra_op_threads(int requested, int loader_workers, int processes) {
  if (requested > 0) {
    return requested;
  }
  if (const int omp = omp_num_threads(); omp > 0) {
    return omp;
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
  // OpenBLAS built with OpenMP (Debian's libopenblas0-openmp) has no pool
  // of its own: its calls run on the OpenMP threads LibTorch runs on, and
  // its set_num_threads is omp_set_num_threads, which would set LibTorch's
  // intra-op threads too.
  if (set == nullptr || blas_kernels().threading == "OpenMP") {
    return false;
  }
  set(threads);
  return true;
}

} // namespace hotloop
