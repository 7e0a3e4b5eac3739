#!/usr/bin/env bash
# Runs a command (valgrind --log-file=LOG ... hotloop_tests ...) for the
# cuda_kernels_memcheck test, LOG its first argument.
#
# Valgrind runs only the instructions the CPU's cpuid reports. A virtual
# machine may hide one the hardware still runs, such as rdtscp, which a
# library LibTorch loads (libhwy, under OpenCV) calls before main; valgrind
# then stops there with SIGILL. That says nothing of the kernels, so the
# test is skipped (exit 77) with valgrind's words; any other end is the
# test's result.
set -u
log=$1
shift
"$@"
code=$?
cat "$log" >&2
if ((code == 128 + 4)) && grep -q "Illegal opcode at address" "$log" &&
  grep -A1 "Illegal opcode at address" "$log" | grep -q "(in /.*lib/"; then
  echo "memcheck: skipped - valgrind cannot run an instruction of a system" \
    "library on this CPU (its cpuid does not list it):" >&2
  grep -A1 "Illegal opcode at address" "$log" | tail -1 >&2
  exit 77
fi
exit "$code"
