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
  /// How it spreads a product over cores (`openblas_get_parallel`):
  /// "pthreads" (a thread pool of its own), "OpenMP" (LibTorch's OpenMP
  /// threads), "serial"; empty with `library`.
  std::string threading;
  /// The kernels OpenBLAS runs on this CPU: "Prescott", "Haswell",
  /// "SkylakeX"; empty with `library`.
  std::string core;
  /// `faster_openblas_core(core, cpu_vector_units())`: the kernels to ask for
  /// with OPENBLAS_CORETYPE, empty when none are faster.
  std::string faster_core;
  /// OPENBLAS_CORETYPE as the environment sets it, empty where unset: the
  /// user's choice, which stands.
  std::string requested;
  /// The folder of Debian's OpenMP build of OpenBLAS
  /// ("/usr/lib/x86_64-linux-gnu/openblas-openmp", libopenblas0-openmp),
  /// where the loaded OpenBLAS is the pthreads build (Debian's default),
  /// LibTorch's intra-op threads are OpenMP's and that build is installed
  /// beside it; empty otherwise, and where LD_LIBRARY_PATH names the loaded
  /// build's folder (the user's choice, which stands) or this one already.
  ///
  /// The pthreads build runs a pool of threads beside LibTorch's, so a
  /// Trainer gives it one thread (trainer.blas_threads) and each matrix
  /// product runs on one core; the OpenMP build runs them on LibTorch's
  /// threads. Measured on a 2-core machine, 2026-11-28 (docs/PERFORMANCE.md):
  /// the MLP of configs/bench/mlp.yaml trained at 1.37-1.56x, the tiny GPT at
  /// 1.32x, the main job's CNN at about 1.0x.
  std::string openmp_build;

  /// Faster kernels exist and nobody chose these.
  bool wants_faster_core() const {
    return !faster_core.empty() && requested.empty();
  }
  /// What use_fastest_blas_kernels restarts for, and what a Trainer warns
  /// of: faster kernels, or the OpenMP build.
  bool would_restart() const {
    return wants_faster_core() || !openmp_build.empty();
  }

  /// "OpenBLAS 0.3.21 (pthreads), SkylakeX kernels", or "" without a
  /// library.
  std::string describe() const;
};

/// What the loaded BLAS says of itself now (cheap: a few calls found by
/// name).
BlasKernels blas_kernels();

/// For a program's `main`, before anything else: where OpenBLAS runs older
/// kernels than the CPU has and the environment does not set
/// OPENBLAS_CORETYPE (`wants_faster_core()`), sets it; where Debian's
/// OpenMP build of OpenBLAS is installed beside the loaded pthreads one
/// (`openmp_build`), puts its folder first in LD_LIBRARY_PATH; and then
/// starts this program again in this process (`execv` of /proc/self/exe
/// with `argv`, the same process id), since OpenBLAS is loaded, and reads
/// OPENBLAS_CORETYPE, before main. Returns, changing nothing, where there is
/// nothing to gain or the user chose (a set OPENBLAS_CORETYPE stands:
/// `OPENBLAS_CORETYPE=Prescott` keeps the old kernels;
/// `LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread` keeps the
/// pthreads build); returns with a line on stderr where the restart fails.
/// It restarts once: the restarted program (HOTLOOP_BLAS_RESTARTED set)
/// goes on as it is. Child processes inherit the settings. The `hotloop`
/// program calls it for the commands that compute; it costs one more start of
/// the program (about 0.4 s on a 2-core machine), on such machines only.
///
/// `argv`: main's, null-terminated.
void use_fastest_blas_kernels(char** argv);

} // namespace hotloop
