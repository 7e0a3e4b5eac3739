#pragma once

#include <cstdint>

namespace hotloop {

/// The CPUs this process may run on (at least 1): its affinity mask, as
/// `taskset`, a container's cpuset or a batch scheduler's CPU binding set
/// it; the machine's hardware threads where the mask cannot be read.
int hardware_threads();

/// The intra-op thread count hotloop uses when the user asks for `requested`
/// (0 = auto) while `loader_workers` threads prepare batches, in each of
/// `processes` processes that share this machine (a data-parallel run):
/// auto then counts each process's share of the cores, so that together
/// they use every core and no more.
///
/// Auto gives LibTorch every core: the built-in image pipeline costs well
/// under 1% of a training step, so loader threads sleep almost all the time
/// and taking a core away from the math would idle it. Only when loader
/// threads outnumber half the cores (heavy custom pipelines) does auto leave
/// them `loader_workers - cores / 2` cores. Debian's LibTorch otherwise
/// starts with one intra-op thread on a 2-core machine.
///
/// `OMP_NUM_THREADS`, when it holds a positive count, is auto's answer, as
/// it is LibTorch's own default (torchrun sets it to 1 for each of several
/// processes on a node unless the user set it).
int resolve_intra_op_threads(
    int requested, int loader_workers, int processes = 1);

/// Sets LibTorch's intra-op thread count (`at::set_num_threads`) to
/// `resolve_intra_op_threads(requested, loader_workers, processes)` and
/// returns it.
int configure_intra_op_threads(
    int requested, int loader_workers, int processes = 1);

/// Sets the BLAS library's own worker-thread count, where the library has
/// one (OpenBLAS built with pthreads: `openblas_set_num_threads`, found at
/// run time). Returns false, changing nothing, when the loaded BLAS has no
/// such call or no pool of its own: OpenBLAS built with OpenMP (Debian's
/// libopenblas0-openmp) runs on LibTorch's OpenMP threads, and its call
/// would set LibTorch's intra-op thread count as well.
///
/// LibTorch already runs ops on its OpenMP intra-op threads; an OpenBLAS
/// built with pthreads (Debian's libopenblas0-pthread) adds a pool of its
/// own whose threads spin on the same cores, so on a 2-core machine the
/// Fashion-MNIST CNN trains 1.7x faster with one BLAS thread (measured, see
/// docs/PERFORMANCE.md).
bool set_blas_threads(int threads);

} // namespace hotloop
