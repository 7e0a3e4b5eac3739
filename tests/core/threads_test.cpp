#include "hotloop/core/threads.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <sched.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

namespace hotloop {
namespace {

// Sets (or, with nullopt, unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      old_ = old;
    }
    set(value);
  }
  ~ScopedEnv() {
    set(old_);
  }

 private:
  void set(const std::optional<std::string>& value) {
    if (value) {
      ::setenv(name_, value->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  const char* name_;
  std::optional<std::string> old_;
};

TEST(IntraOpThreads, AnExplicitCountIsKept) {
  const ScopedEnv omp("OMP_NUM_THREADS", "5");
  EXPECT_EQ(resolve_intra_op_threads(3, 0), 3);
  EXPECT_EQ(resolve_intra_op_threads(1, 8), 1);
}

TEST(IntraOpThreads, TheCoresAreThoseTheProcessMayRunOn) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(::sched_getaffinity(0, sizeof allowed, &allowed), 0);
  EXPECT_EQ(hardware_threads(), CPU_COUNT(&allowed));
  // A thread bound to one CPU (taskset -c N) counts one.
  int first = 0;
  while (!CPU_ISSET(first, &allowed)) {
    ++first;
  }
  int counted = 0;
  std::thread([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
    counted = hardware_threads();
  }).join();
  EXPECT_EQ(counted, 1);
}

TEST(IntraOpThreads, AutoTakesOmpNumThreadsWhenItHoldsACount) {
  {
    const ScopedEnv omp("OMP_NUM_THREADS", "3");
    EXPECT_EQ(resolve_intra_op_threads(0, 0), 3);
    EXPECT_EQ(resolve_intra_op_threads(0, 64, 4), 3);
  }
  {
    const ScopedEnv omp("OMP_NUM_THREADS", "2,1"); // OpenMP's nested list
    EXPECT_EQ(resolve_intra_op_threads(0, 0), 2);
  }
  for (const char* ignored : {"", "0", "-2", "four", "3x"}) {
    const ScopedEnv omp("OMP_NUM_THREADS", ignored);
    EXPECT_EQ(resolve_intra_op_threads(0, 0), hardware_threads()) << ignored;
  }
}

TEST(IntraOpThreads, AutoUsesEveryCoreUnlessLoaderThreadsOutnumberHalfOfThem) {
  const ScopedEnv omp("OMP_NUM_THREADS", std::nullopt);
  const int cores = hardware_threads();
  EXPECT_EQ(resolve_intra_op_threads(0, 0), cores);
  EXPECT_EQ(resolve_intra_op_threads(0, cores / 2), cores);
  EXPECT_EQ(resolve_intra_op_threads(0, cores / 2 + 1), std::max(1, cores - 1));
  EXPECT_EQ(resolve_intra_op_threads(0, 1000), 1);
}

TEST(IntraOpThreads, ConfigureSetsLibTorchsThreadCount) {
  const int before = at::get_num_threads();
  EXPECT_EQ(configure_intra_op_threads(1, 0), 1);
  EXPECT_EQ(at::get_num_threads(), 1);
  at::set_num_threads(before);
}

TEST(BlasThreads, SetsOpenBlassOwnThreadCountWhereItIsTheBlas) {
  using GetThreads = int (*)();
  const auto get = reinterpret_cast<GetThreads>(
      ::dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  if (get == nullptr) {
    EXPECT_FALSE(set_blas_threads(1)); // nothing to set: no error either
    GTEST_SKIP() << "LibTorch's BLAS here is not OpenBLAS";
  }
  const auto parallel = reinterpret_cast<GetThreads>(
      ::dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
  if (parallel != nullptr && parallel() == 2) {
    EXPECT_FALSE(set_blas_threads(1)); // OpenMP: no pool of its own
    GTEST_SKIP() << "this OpenBLAS runs on LibTorch's OpenMP threads";
  }
  const int before = get();
  ASSERT_TRUE(set_blas_threads(1));
  EXPECT_EQ(get(), 1);
  ASSERT_TRUE(set_blas_threads(2));
  EXPECT_EQ(get(), 2);
  set_blas_threads(before);
}

TEST(BlasThreads, LeaveLibTorchsIntraOpThreadsAsTheyAre) {
  // An OpenMP OpenBLAS's set_num_threads is omp_set_num_threads; the
  // Cli test AnOpenMpOpenBlasKeepsTheIntraOpThreads loads one.
  const int before = at::get_num_threads();
  at::set_num_threads(2);
  set_blas_threads(1);
  EXPECT_EQ(at::get_num_threads(), 2);
  at::set_num_threads(before);
}

} // namespace
} // namespace hotloop
