#include "hotloop/core/blas.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace hotloop {
namespace {

constexpr CpuVectorUnits kNone{};
constexpr CpuVectorUnits kAvx{/*avx=*/true, /*avx2=*/false, /*avx512=*/false};
constexpr CpuVectorUnits kAvx2{true, true, false};
constexpr CpuVectorUnits kAvx512{true, true, true};

TEST(FasterOpenblasCore, AnAvx512CpuOnOlderKernelsGetsSkylakeX) {
  // Debian 12's OpenBLAS on a Xeon whose model it does not know.
  EXPECT_EQ(faster_openblas_core("Prescott", kAvx512), "SkylakeX");
  EXPECT_EQ(faster_openblas_core("Sandybridge", kAvx512), "SkylakeX");
  EXPECT_EQ(faster_openblas_core("Haswell", kAvx512), "SkylakeX");
  // An AVX-512 Zen (OpenBLAS 0.3.21 runs Zen 4 on its Zen kernels).
  EXPECT_EQ(faster_openblas_core("Zen", kAvx512), "SkylakeX");
  // The names as OpenBLAS spells them, or in any case.
  EXPECT_EQ(faster_openblas_core("PRESCOTT", kAvx512), "SkylakeX");
}

TEST(FasterOpenblasCore, KernelsOfTheCpusNewestInstructionSetStand) {
  EXPECT_EQ(faster_openblas_core("SkylakeX", kAvx512), "");
  EXPECT_EQ(faster_openblas_core("Cooperlake", kAvx512), "");
  EXPECT_EQ(faster_openblas_core("SapphireRapids", kAvx512), "");
  EXPECT_EQ(faster_openblas_core("Haswell", kAvx2), "");
  EXPECT_EQ(faster_openblas_core("Zen", kAvx2), "");
  EXPECT_EQ(faster_openblas_core("Sandybridge", kAvx), "");
  EXPECT_EQ(faster_openblas_core("Prescott", kNone), "");
  // Newer kernels than the CPU reports are OpenBLAS's business.
  EXPECT_EQ(faster_openblas_core("SkylakeX", kAvx2), "");
}

TEST(FasterOpenblasCore, EachInstructionSetGetsItsOwnKernels) {
  EXPECT_EQ(faster_openblas_core("Nehalem", kAvx2), "Haswell");
  EXPECT_EQ(faster_openblas_core("Bulldozer", kAvx2), "Haswell");
  EXPECT_EQ(faster_openblas_core("Core2", kAvx), "Sandybridge");
}

TEST(FasterOpenblasCore, ANameItDoesNotKnowLeavesOpenBlasChoice) {
  EXPECT_EQ(faster_openblas_core("", kAvx512), "");
  EXPECT_EQ(faster_openblas_core("Unknown", kAvx512), "");
  EXPECT_EQ(faster_openblas_core("Zen5", kAvx512), "");
  EXPECT_EQ(faster_openblas_core("armv8", kAvx512), "");
}

TEST(BlasKernels, NameTheLoadedOpenBlasItsKernelsAndWhatIsFaster) {
  const BlasKernels blas = blas_kernels();
  if (blas.library.empty()) {
    EXPECT_EQ(blas.core, "");
    EXPECT_EQ(blas.faster_core, "");
    EXPECT_EQ(blas.describe(), "");
    GTEST_SKIP() << "LibTorch's BLAS here is not OpenBLAS";
  }
  // Debian's libopenblas0-pthread, as setup.sh installs it.
  EXPECT_EQ(blas.library.rfind("OpenBLAS 0.", 0), 0u) << blas.library;
  EXPECT_FALSE(blas.core.empty());
  EXPECT_EQ(blas.describe(), blas.library + ", " + blas.core + " kernels");
  EXPECT_EQ(
      blas.faster_core, faster_openblas_core(blas.core, cpu_vector_units()));
}

TEST(UseFastestBlasKernels, ReturnsWhereOpenBlasCoreTypeIsAlreadySet) {
  const char* before = std::getenv("OPENBLAS_CORETYPE");
  const std::string kept = before == nullptr ? "" : before;
  ::setenv("OPENBLAS_CORETYPE", "Prescott", 1);
  char program[] = "hotloop_tests";
  char* argv[] = {program, nullptr};
  // Returning at all is the check: a restart would replace this process.
  use_fastest_blas_kernels(argv);
  EXPECT_STREQ(std::getenv("OPENBLAS_CORETYPE"), "Prescott");
  if (before == nullptr) {
    ::unsetenv("OPENBLAS_CORETYPE");
  } else {
    ::setenv("OPENBLAS_CORETYPE", kept.c_str(), 1);
  }
}

} // namespace
} // namespace hotloop
