#!/usr/bin/env bash
# Builds hotloop and its tests with sanitizers (HOTLOOP_SANITIZE) in a
# build folder of their own and runs the tests under them.
#
#   scripts/sanitize.sh address   # AddressSanitizer + UndefinedBehaviorSanitizer, the whole suite
#   scripts/sanitize.sh thread    # ThreadSanitizer: the loader, trainer and signal tests
#   scripts/sanitize.sh address -R DataLoader   # extra arguments go to ctest
#   scripts/sanitize.sh kernels   # hotloop's CUDA kernels on the CPU emulator
#                                 # under valgrind's memcheck
#
# kernels: the emulator runs threads as ucontext fibers, which the
# sanitizers do not follow, so its tests are not built with them; valgrind
# (Debian's valgrind) checks them in the ordinary build instead: a kernel's
# read or write past a tensor's bytes, or a branch on memory never written,
# is an error, as CUDA's compute-sanitizer would find on a GPU. It is the
# suite's cuda_kernels_memcheck test (tests/cuda_emulation/tests.cmake).
#
# A report stops the program that made it (-fno-sanitize-recover, and the
# options below), so a test that triggers one fails. What LibTorch itself
# does is suppressed (tests/sanitizers/*.supp, each entry with its reason):
# it is not built with the sanitizers, so its own code is not judged.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
shift || true
if [[ $mode == kernels ]]; then
  command -v valgrind >/dev/null ||
    { echo "sanitize.sh: kernels needs valgrind (apt-get install valgrind)" >&2; exit 2; }
  [[ -f build/CMakeCache.txt ]] ||
    { echo "sanitize.sh: kernels runs in build/: ./setup.sh --tests first" >&2; exit 2; }
  cmake build >/dev/null # finds valgrind if it came after the configure
  cmake --build build --target hotloop_tests
  exec ctest --test-dir build --output-on-failure -R '^cuda_kernels_memcheck$' "$@"
fi
case $mode in
  address)
    sanitize=address,undefined
    tests=()
    ;;
  thread)
    sanitize=thread
    # The code that runs threads: the loader's workers, the trainer's
    # loops and callbacks, the signal flag.
    tests=(-R 'DataLoader|TrainerTest|CallbackTest|StopSignal|Sigint|Sigterm|Signal|StepClock|ImageFolder|TokenDataset')
    ;;
  *)
    echo "usage: scripts/sanitize.sh address|thread [ctest arguments] | kernels" >&2
    exit 2
    ;;
esac
build=build-$mode
supp=$PWD/tests/sanitizers
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp"
# One intra-op thread for LibTorch: its OpenMP pool is not built with the
# sanitizers, and TSan cannot see its barriers.
if [[ $mode == thread ]]; then
  export OMP_NUM_THREADS=1
fi

configure=(-S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
  -DHOTLOOP_SANITIZE=$sanitize -DHOTLOOP_BUILD_BENCH=OFF)
if command -v ccache >/dev/null; then
  configure+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake "${configure[@]}"
cmake --build "$build"
# The examples test builds programs against the installed package without
# the sanitizers' flags; it runs in the ordinary build.
ctest --test-dir "$build" --output-on-failure -j2 -E '^install_examples$' \
  "${tests[@]}" "$@"
