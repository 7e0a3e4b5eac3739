#pragma once

#include <string>
#include <string_view>

namespace hotloop {

/// The instruction sets that decide which of OpenBLAS's kernels a CPU runs.
struct CpuVectorUnits {
  bool avx = false;
  /// AVX2 and FMA3.
  bool avx2 = false;
  /// AVX-512 F, CD, BW, DQ and VL: what OpenBLAS's SkylakeX kernels use.
  bool avx512 = false;
};

/// This CPU's, as the compiler's runtime check reads them (all false off
/// x86-64).
CpuVectorUnits cpu_vector_units();

/// The `OPENBLAS_CORETYPE` whose kernels are the newest `cpu` runs ("SkylakeX"
/// for AVX-512, "Haswell" for AVX2, "Sandybridge" for AVX), where OpenBLAS
/// picked older ones (`picked`, as `openblas_get_corename` names them);
/// empty when `picked` already uses the newest instruction set `cpu` has,
/// or is a name this does not know (then OpenBLAS's choice stands).
///
/// OpenBLAS chooses its kernels by the CPU's family and model numbers; one it
/// does not know, as a cloud VM's CPU often is, gets the oldest (Debian 12's
/// 0.3.21 takes model 207's AVX-512 Xeon for a Prescott, SSE3): torch.mm
/// then ran at a quarter of the SkylakeX kernels' speed there (64 against
/// 274 GFLOP/s, bench/blas_kernels, docs/PERFORMANCE.md).
std::string faster_openblas_core(std::string_view picked, CpuVectorUnits cpu);

/// The BLAS under LibTorch's CPU matrix products, where it tells: OpenBLAS,
/// found at run time.
struct BlasKernels {
  /// "OpenBLAS 0.3.21"; empty where the loaded BLAS is not OpenBLAS (MKL,
  /// the reference BLAS, LibTorch built with none).
  std::string library;
  /// The kernels OpenBLAS runs on this CPU: "Prescott", "Haswell",
  /// "SkylakeX"; empty with `library`.
  std::string core;
  /// `faster_openblas_core(core, cpu_vector_units())`: the kernels to ask for
  /// with OPENBLAS_CORETYPE, empty when none are faster.
  std::string faster_core;
  /// OPENBLAS_CORETYPE as the environment sets it, empty where unset: the
  /// user's choice, which stands.
  std::string requested;

  /// Faster kernels exist and nobody chose these: what
  /// use_fastest_blas_kernels restarts for, and what a Trainer warns of.
  bool would_restart() const {
    return !faster_core.empty() && requested.empty();
  }

  /// "OpenBLAS 0.3.21, SkylakeX kernels", or "" without a library.
  std::string describe() const;
};

/// What the loaded BLAS says of itself now (cheap: two calls found by
/// name).
BlasKernels blas_kernels();

/// For a program's `main`, before anything else: where OpenBLAS runs older
/// kernels than the CPU has (`blas_kernels().faster_core`) and the
/// environment does not set OPENBLAS_CORETYPE, sets it and starts this
/// program again in this process (`execv` of /proc/self/exe with `argv`,
/// the same process id), since OpenBLAS reads it only when it loads.
/// Returns, changing nothing, where nothing is faster or OPENBLAS_CORETYPE
/// is set (the user's choice stands: `OPENBLAS_CORETYPE=Prescott` keeps the
/// old kernels); returns with a line on stderr where the restart fails.
/// Child processes inherit the setting. The `hotloop` program calls it for
/// the commands that compute; it costs one more start of the program
/// (about 0.4 s on a 2-core machine), on such machines only.
///
/// `argv`: main's, null-terminated.
void use_fastest_blas_kernels(char** argv);

} // namespace hotloop
