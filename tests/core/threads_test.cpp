#include "hotloop/core/threads.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <dlfcn.h>

namespace hotloop {
namespace {

TEST(IntraOpThreads, AnExplicitCountIsKept) {
  EXPECT_EQ(resolve_intra_op_threads(3, 0), 3);
  EXPECT_EQ(resolve_intra_op_threads(1, 8), 1);
}

TEST(IntraOpThreads, AutoUsesEveryCoreUnlessLoaderThreadsOutnumberHalfOfThem) {
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
  const int before = get();
  ASSERT_TRUE(set_blas_threads(1));
  EXPECT_EQ(get(), 1);
  ASSERT_TRUE(set_blas_threads(2));
  EXPECT_EQ(get(), 2);
  set_blas_threads(before);
}

} // namespace
} // namespace hotloop
