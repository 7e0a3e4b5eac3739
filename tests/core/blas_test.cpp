#include "hotloop/core/blas.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>

namespace hotloop {
namespace {

// Sets an environment variable for a scope, and puts it back.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* before = std::getenv(name)) {
      before_ = before;
    }
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (before_) {
      ::setenv(name_, before_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> before_;
};

// Debian's two builds of OpenBLAS 0.3 (libopenblas0-pthread,
// libopenblas0-openmp).
const std::string kPthreads = "/usr/lib/x86_64-linux-gnu/openblas-pthread";
const std::string kOpenMp = "/usr/lib/x86_64-linux-gnu/openblas-openmp";

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
  // Debian's libopenblas0-pthread, as setup.sh installs it (or its OpenMP
  // build, where the tests run with LD_LIBRARY_PATH naming it).
  EXPECT_EQ(blas.library.rfind("OpenBLAS 0.", 0), 0u) << blas.library;
  EXPECT_TRUE(blas.threading == "pthreads" || blas.threading == "OpenMP")
      << blas.threading;
  EXPECT_FALSE(blas.core.empty());
  EXPECT_EQ(
      blas.describe(),
      blas.library + " (" + blas.threading + "), " + blas.core + " kernels");
  EXPECT_EQ(
      blas.faster_core, faster_openblas_core(blas.core, cpu_vector_units()));
  const char* requested = std::getenv("OPENBLAS_CORETYPE");
  EXPECT_EQ(blas.requested, requested == nullptr ? "" : requested);
}

// The pthreads build loaded, the OpenMP one installed beside it: that is
// the one to restart on, unless LD_LIBRARY_PATH chose a build already.
TEST(BlasKernels, OfferTheOpenMpBuildInstalledBesideThePthreadsOne) {
  const BlasKernels blas = blas_kernels();
  if (blas.threading != "pthreads") {
    EXPECT_EQ(blas.openmp_build, "");
    GTEST_SKIP() << "the loaded BLAS is not OpenBLAS's pthreads build";
  }
  if (!std::filesystem::exists(kOpenMp + "/libblas.so.3")) {
    EXPECT_EQ(blas.openmp_build, "");
    GTEST_SKIP() << "no " << kOpenMp
                 << " (apt-get install libopenblas0-openmp)";
  }
  {
    const ScopedEnv unset("LD_LIBRARY_PATH", "");
    EXPECT_EQ(blas_kernels().openmp_build, kOpenMp);
    EXPECT_TRUE(blas_kernels().would_restart());
  }
  {
    const ScopedEnv other("LD_LIBRARY_PATH", "/opt/nothing::/usr/local/lib");
    EXPECT_EQ(blas_kernels().openmp_build, kOpenMp);
  }
  // The user's choice of the pthreads build stands, however written; and
  // a restart that named the OpenMP build and still loads this one (some
  // other path wins) does not restart again.
  for (const std::string& path :
       {kPthreads, "/opt/x:" + kPthreads + "/", kOpenMp, kOpenMp + ":/opt/x"}) {
    const ScopedEnv chosen("LD_LIBRARY_PATH", path);
    EXPECT_EQ(blas_kernels().openmp_build, "") << path;
  }
  {
    const ScopedEnv chosen("LD_LIBRARY_PATH", kPthreads);
    const ScopedEnv core("OPENBLAS_CORETYPE", "Prescott");
    EXPECT_FALSE(blas_kernels().would_restart());
  }
}

TEST(UseFastestBlasKernels, ReturnsWhereTheUserChoseKernelsAndBuild) {
  const ScopedEnv core("OPENBLAS_CORETYPE", "Prescott");
  const ScopedEnv build("LD_LIBRARY_PATH", kPthreads);
  char program[] = "hotloop_tests";
  char* argv[] = {program, nullptr};
  // Returning at all is the check: a restart would replace this process.
  use_fastest_blas_kernels(argv);
  EXPECT_STREQ(std::getenv("OPENBLAS_CORETYPE"), "Prescott");
  EXPECT_EQ(std::getenv("LD_LIBRARY_PATH"), kPthreads);
  EXPECT_EQ(blas_kernels().requested, "Prescott");
  EXPECT_FALSE(blas_kernels().would_restart());
}

} // namespace
} // namespace hotloop
