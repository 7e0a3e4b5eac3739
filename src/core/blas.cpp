#include "hotloop/core/blas.h"

#include <ATen/Config.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

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

// openblas_get_parallel's answer by name; "" without the call.
std::string openblas_threading() {
  using GetParallel = int (*)();
  const auto parallel = reinterpret_cast<GetParallel>(
      ::dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
  if (parallel == nullptr) {
    return "";
  }
  switch (parallel()) {
    case 0:
      return "serial";
    case 1:
      return "pthreads";
    case 2:
      return "OpenMP";
    default:
      return "";
  }
}

// LD_LIBRARY_PATH's folders, each as the file system resolves it ("" left
// out).
std::vector<std::filesystem::path> library_path() {
  std::vector<std::filesystem::path> folders;
  const char* value = std::getenv("LD_LIBRARY_PATH");
  std::istringstream list(value == nullptr ? "" : value);
  std::string folder;
  while (std::getline(list, folder, ':')) {
    if (!folder.empty()) {
      std::error_code error;
      auto resolved = std::filesystem::weakly_canonical(folder, error);
      if (error) {
        resolved = folder;
      }
      // "dir/" as "dir".
      folders.push_back(
          resolved.has_filename() ? resolved : resolved.parent_path());
    }
  }
  return folders;
}

// The folder of Debian's OpenMP build beside the loaded pthreads one
// (BlasKernels::openmp_build), or "".
std::string openmp_build_beside_loaded() {
#if AT_PARALLEL_OPENMP
  Dl_info info{};
  void* symbol = ::dlsym(RTLD_DEFAULT, "openblas_get_parallel");
  if (symbol == nullptr || ::dladdr(symbol, &info) == 0 ||
      info.dli_fname == nullptr) {
    return "";
  }
  // /usr/lib/x86_64-linux-gnu/libopenblas.so.0, through Debian's
  // alternatives, is .../openblas-pthread/libopenblasp-r0.3.21.so.
  std::error_code error;
  const auto loaded = std::filesystem::canonical(info.dli_fname, error);
  if (error || loaded.parent_path().filename() != "openblas-pthread") {
    return "";
  }
  const auto openmp = loaded.parent_path().parent_path() / "openblas-openmp";
  for (const char* file : {"libblas.so.3", "libopenblas.so.0"}) {
    if (!std::filesystem::exists(openmp / file, error)) {
      return "";
    }
  }
  for (const auto& folder : library_path()) {
    if (folder == loaded.parent_path() || folder == openmp) {
      return "";
    }
  }
  return openmp.string();
#else
  return ""; // the OpenMP build would not share LibTorch's threads
#endif
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
  if (library.empty()) {
    return "";
  }
  return library + (threading.empty() ? "" : " (" + threading + ")") + ", " +
         core + " kernels";
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
  kernels.threading = openblas_threading();
  kernels.core = core;
  kernels.faster_core = faster_openblas_core(core, cpu_vector_units());
  if (kernels.threading == "pthreads") {
    kernels.openmp_build = openmp_build_beside_loaded();
  }
  return kernels;
}

void use_fastest_blas_kernels(char** argv) {
  // Once: a restart whose settings did not take (another path to the
  // library wins) must not loop.
  constexpr const char* kRestarted = "HOTLOOP_BLAS_RESTARTED";
  const BlasKernels kernels = blas_kernels();
  if (!kernels.would_restart() || std::getenv(kRestarted) != nullptr) {
    return;
  }
  ::setenv(kRestarted, "1", 1);
  // Set even should the restart fail: the program's child processes (a
  // data-parallel run's workers) still load OpenBLAS with them.
  std::string changes;
  if (kernels.wants_faster_core()) {
    ::setenv("OPENBLAS_CORETYPE", kernels.faster_core.c_str(), 1);
    changes = "OPENBLAS_CORETYPE=" + kernels.faster_core;
  }
  if (!kernels.openmp_build.empty()) {
    const char* path = std::getenv("LD_LIBRARY_PATH");
    const std::string value =
        kernels.openmp_build +
        (path == nullptr || *path == '\0' ? "" : ":" + std::string(path));
    ::setenv("LD_LIBRARY_PATH", value.c_str(), 1);
    changes += (changes.empty() ? "" : " and ") +
               std::string("LD_LIBRARY_PATH=") + kernels.openmp_build;
  }
  ::execv("/proc/self/exe", argv);
  std::cerr << "hotloop: restarting with " << changes
            << " for faster CPU matrix products failed ("
            << std::strerror(errno) << "): set it before the program starts\n";
}

} // namespace hotloop
