#include "hotloop/core/blas.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <initializer_list>

namespace hotloop {
namespace {

constexpr CpuVectorUnits kNone{};
constexpr CpuVectorUnits kAvx{/*avx=*/true, /*avx2=*/false, /*avx512=*/false};
constexpr CpuVectorUnits kAvx2{true, true, false};
constexpr CpuVectorUnits kAvx512{true, true, true};

// {OpenBLAS's pick, the CPU, the kernels to ask for ("" for none)}.
struct Case {
  const char* picked;
  CpuVectorUnits cpu;
  const char* expected;
};

void expect_faster_cores(std::initializer_list<Case> cases) {
  for (const Case& c : cases) {
    EXPECT_EQ(faster_openblas_core(c.picked, c.cpu), c.expected) << c.picked;
  }
}

TEST(FasterOpenblasCore, AnAvx512CpuOnOlderKernelsGetsSkylakeX) {
  expect_faster_cores({
      // Debian 12's OpenBLAS on a Xeon whose model it does not know.
      {"Prescott", kAvx512, "SkylakeX"},
      {"Sandybridge", kAvx512, "SkylakeX"},
      {"Haswell", kAvx512, "SkylakeX"},
      // An AVX-512 Zen (OpenBLAS 0.3.21 runs Zen 4 on its Zen kernels).
      {"Zen", kAvx512, "SkylakeX"},
      // The names as OpenBLAS spells them, or in any case.
      {"PRESCOTT", kAvx512, "SkylakeX"},
  });
}

TEST(FasterOpenblasCore, KernelsOfTheCpusNewestInstructionSetStand) {
  expect_faster_cores({
      {"SkylakeX", kAvx512, ""},
      {"Cooperlake", kAvx512, ""},
      {"SapphireRapids", kAvx512, ""},
      {"Haswell", kAvx2, ""},
      {"Zen", kAvx2, ""},
      {"Sandybridge", kAvx, ""},
      {"Prescott", kNone, ""},
      // Newer kernels than the CPU reports are OpenBLAS's business.
      {"SkylakeX", kAvx2, ""},
  });
}

TEST(FasterOpenblasCore, EachInstructionSetGetsItsOwnKernels) {
  expect_faster_cores({
      {"Nehalem", kAvx2, "Haswell"},
      {"Bulldozer", kAvx2, "Haswell"},
      {"Core2", kAvx, "Sandybridge"},
  });
}

TEST(FasterOpenblasCore, ANameItDoesNotKnowLeavesOpenBlasChoice) {
  expect_faster_cores({
      {"", kAvx512, ""},
      {"Unknown", kAvx512, ""},
      {"Zen5", kAvx512, ""},
      {"armv8", kAvx512, ""},
  });
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
  const char* requested = std::getenv("OPENBLAS_CORETYPE");
  EXPECT_EQ(blas.requested, requested == nullptr ? "" : requested);
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
  EXPECT_EQ(blas_kernels().requested, "Prescott");
  EXPECT_FALSE(blas_kernels().would_restart());
  if (before == nullptr) {
    ::unsetenv("OPENBLAS_CORETYPE");
  } else {
    ::setenv("OPENBLAS_CORETYPE", kept.c_str(), 1);
  }
}

} // namespace
} // namespace hotloop
