#include "hotloop/core/blas.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>

namespace hotloop {
namespace {

// The instruction set each of OpenBLAS's x86 kernel sets (DYNAMIC_ARCH's
// core names) is written for: 0 SSE, 1 AVX, 2 AVX2 with FMA, 3 AVX-512.
struct CoreLevel {
  const char* name;
  int level;
};
constexpr CoreLevel kCoreLevels[] = {
    {"katmai", 0},       {"coppermine", 0},
    {"northwood", 0},    {"prescott", 0},
    {"banias", 0},       {"atom", 0},
    {"core2", 0},        {"penryn", 0},
    {"dunnington", 0},   {"nehalem", 0},
    {"athlon", 0},       {"opteron", 0},
    {"opteron_sse3", 0}, {"barcelona", 0},
    {"nano", 0},         {"bobcat", 0},
    {"sandybridge", 1},  {"bulldozer", 1},
    {"piledriver", 1},   {"steamroller", 1},
    {"haswell", 2},      {"excavator", 2},
    {"zen", 2},          {"skylakex", 3},
    {"cooperlake", 3},   {"sapphirerapids", 3},
};

// -1 for a name not in the table.
int core_level(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  });
  for (const CoreLevel& core : kCoreLevels) {
    if (lower == core.name) {
      return core.level;
    }
  }
  return -1;
}

// A C string from an OpenBLAS call found at run time; "" without it.
std::string openblas_string(const char* symbol) {
  // Looked up, not linked: LibTorch may sit on another BLAS (or MKL).
  using Get = char* (*)();
  const auto get = reinterpret_cast<Get>(::dlsym(RTLD_DEFAULT, symbol));
  const char* text = get == nullptr ? nullptr : get();
  return text == nullptr ? "" : text;
}

} // namespace

CpuVectorUnits cpu_vector_units() {
  CpuVectorUnits units;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  units.avx = __builtin_cpu_supports("avx");
  units.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  units.avx512 =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
      __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#endif
  return units;
}

std::string faster_openblas_core(std::string_view picked, CpuVectorUnits cpu) {
  const int level = core_level(picked);
  if (level < 0) {
    return "";
  }
  if (cpu.avx512 && level < 3) {
    return "SkylakeX";
  }
  if (cpu.avx2 && level < 2) {
    return "Haswell";
  }
  if (cpu.avx && level < 1) {
    return "Sandybridge";
  }
  return "";
}

std::string BlasKernels::describe() const {
  return library.empty() ? "" : library + ", " + core + " kernels";
}

BlasKernels blas_kernels() {
  BlasKernels kernels;
  const char* requested = std::getenv("OPENBLAS_CORETYPE");
  kernels.requested = requested == nullptr ? "" : requested;
  const std::string core = openblas_string("openblas_get_corename");
  if (core.empty()) {
    return kernels;
  }
  // "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Prescott MAX_THREADS=64":
  // the name and the version.
  std::istringstream config(openblas_string("openblas_get_config"));
  std::string name, version;
  config >> name >> version;
  kernels.library = name.empty() ? "OpenBLAS" : name + " " + version;
  kernels.core = core;
  kernels.faster_core = faster_openblas_core(core, cpu_vector_units());
  return kernels;
}

void use_fastest_blas_kernels(char** argv) {
  const BlasKernels kernels = blas_kernels();
  if (!kernels.would_restart()) {
    return;
  }
  // Set even should the restart fail: the program's child processes (a
  // data-parallel run's workers) still load OpenBLAS with it.
  ::setenv("OPENBLAS_CORETYPE", kernels.faster_core.c_str(), /*overwrite=*/1);
  ::execv("/proc/self/exe", argv);
  std::cerr << "hotloop: OpenBLAS runs its " << kernels.core
            << " kernels on a CPU that runs its " << kernels.faster_core
            << " ones, and restarting with OPENBLAS_CORETYPE="
            << kernels.faster_core << " failed (" << std::strerror(errno)
            << "): set it before the program starts\n";
}

} // namespace hotloop
