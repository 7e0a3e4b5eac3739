#!/usr/bin/env bash
# Builds hotloop against the LibTorch of Python's torch (a CUDA wheel) and
# the carried Debian prefix (scripts/gpu_deps.sh), runs the whole CTest
# suite, then the CUDA benchmark suite of bench/run and the CUDA ablation, in
# stages that fit commands of 10 minutes: a stage that no longer fits is
# left for the next call, which goes on where this one stopped while the
# build folder is still there. docs/GPU.md says how to run it on a GPU
# machine and what each stage checks.
#
#   scripts/gpu_run.sh --plan measure       # one call on a bare machine:
#                                           # configure, build the hotloop
#                                           # program, time and trace the
#                                           # three workloads
#   scripts/gpu_run.sh --plan test          # one call: configure, build
#                                           # everything, the test suite
#   scripts/gpu_run.sh                      # the stages not done yet
#   scripts/gpu_run.sh --stages test,bench-gpt2
#   scripts/gpu_run.sh --cpu                # the same on a machine without
#                                           # a GPU: Debian's LibTorch, the
#                                           # benchmarks as dry runs
#   scripts/gpu_run.sh --list               # the stages and what is done
#
# Stages, in order: configure build test bench-gpt2 bench-resnet18_cifar
# bench-cnn ablation levers (a stage brings the ones it needs). The checks of what
# the machine has always come first; anything missing stops the run with
# one line.
#
# Plans: the two calls a GPU session of 15 minutes of device time makes,
# each on a fresh machine (docs/GPU.md); each runs its stages whatever an
# earlier call on the same folder did, measure with a deadline of 560 s
# (the stages in order of priority; what does not fit is left, named on
# the summary's next: line), test with 570 s.
#   measure   configure, build (the hotloop program only), bench-gpt2,
#             bench-resnet18_cifar, bench-cnn: hotloop and python-tuned on
#             each workload (HOTLOOP_GPU_BENCH_IMPLS), the CNN on
#             configs/bench/fast with trainer.cuda_graphs=true, every run
#             followed by a traced run whose tables go to traces.txt
#   test      configure, build (everything), test
# The levers stage (not in a plan) runs GPT-2's hotloop row with its
# defaults and then with each lever of issue 29 on its own (by default
# what is not measured yet: cuBLASLt's workspace, the bias-gradient
# kernel off alone, CUDA graphs with the kernels, and the three kernels
# off together; HOTLOOP_GPU_LEVERS another list, e.g. the sdpa_backend,
# cuda_graphs, loss_chunk_size and optimizer.fused levers measured on
# 2026-11-27), in one call on the warm machine an earlier call left;
# levers.txt is the table.
# HOTLOOP_GPU_LEVERS_WORKLOAD=resnet18_cifar does the same for ResNet-18
# (trainer.cuda_graphs=true, trainer.benchmark=false, both), =cnn for the
# CNN (trainer.benchmark=false).
#
# Options:
#   --plan NAME       measure or test (above); the environment's settings
#                     win over the plan's, and --stages picks some of its
#                     stages (what a call cut at its deadline left)
#   --stages A,B      run these (again, if done), with what they need
#   --redo            forget which stages are done
#   --deadline S      seconds this call may take in all (default 540 with a
#                     GPU, none with --cpu); 0: no limit
#   --cpu             no GPU: LibTorch from the Python's torch or /usr,
#                     CUDA-only tests expected skipped, benchmarks and
#                     ablation as --dry-run; as root, the system's copies of
#                     the carried packages are hidden from this run (a
#                     mount namespace) so that only the carried prefix can
#                     satisfy the build
#   --bench-quick     bench/run --quick and a short ablation: a smoke test
#   --traces          bench/run --traces: each benchmark run followed by a
#                     traced run (the measure plan's default)
#   --list            print the stages and their state, then exit
#
# Environment: HOTLOOP_GPU_RESULTS (where summary.txt, ctest-junit.xml,
# bench.txt, bench.json, logs.tar.gz and hotloop-cli.tar.gz are copied at
# the end of every call; default BUILD/gpu-results), HOTLOOP_GPU_BUILD
# (default build-gpu), HOTLOOP_GPU_DEPS (default .gpu-deps),
# HOTLOOP_GPU_CLI (an earlier call's hotloop-cli.tar.gz; default
# .gpu-cli/hotloop-cli.tar.gz), HOTLOOP_PYTHON (the Python with torch;
# default python3, with --cpu /usr/bin/python3 first), HOTLOOP_GPU_JOBS
# (build and test jobs; default every core), HOTLOOP_GPU_DEADLINE (as
# --deadline), HOTLOOP_GPU_BENCH_IMPLS (bench/run --impls for the benchmark
# stages) and HOTLOOP_GPU_BENCH_IMPLS_CNN, _RESNET18_CIFAR, _GPT2 (for one
# of them), HOTLOOP_GPU_BENCH_HOTLOOP_OPTIONS (space-separated KEY=VALUE
# options for every hotloop run of the benchmark stages, bench/run
# --hotloop-option; e.g. trainer.cuda_graphs=true) and
# HOTLOOP_GPU_BENCH_HOTLOOP_OPTIONS_CNN, _RESNET18_CIFAR, _GPT2 (for one
# of them, after those), HOTLOOP_GPU_BENCH_CONFIGS_CNN, _RESNET18_CIFAR,
# _GPT2 (bench/run --configs for one of them: a folder with its
# <workload>.yaml, such as configs/bench/fast), HOTLOOP_GPU_TRACES=1
# (as --traces), HOTLOOP_GPU_TRACE_IMPLS (bench/run --trace-impls: whom
# the traced runs follow; default every implementation run) and
# HOTLOOP_GPU_TRACE_IMPLS_CNN, _RESNET18_CIFAR, _GPT2 (for one of them; the
# measure plan's default is hotloop alone, the tuned loops' traces on the
# same torch being in docs/measurements/, and for ResNet-18 both).
set -euo pipefail
SELF=$(readlink -f "$0")
cd "$(dirname "$SELF")/.."
REPO=$PWD
ARGS=("$@")

STAGES=(configure build test bench-gpt2 bench-resnet18_cifar bench-cnn ablation levers)
# The levers stage: one workload's hotloop row (HOTLOOP_GPU_LEVERS_WORKLOAD,
# default gpt2) once with its defaults, then once per lever (";" between
# levers, spaces between one lever's options), each on its own, in order,
# as long as the deadline leaves a run's time. GPT-2's default list is what
# is not measured yet: cuBLASLt's workspace at 128 MiB, where LibTorch
# gives Hopper 32 MiB (a lever env:NAME=VALUE is an environment variable
# for that run alone); the bias-gradient kernel off (2026-11-28 measured
# the three kernels together, and the other two alone, all with the three
# off by default); whole-step CUDA graphs with the kernels (1.01x that
# day, within one run's noise); then the three off together, the
# defaults of before (1.18x slower that day). A lever's `trace` among its
# options follows its run with a traced one. The levers measured before
# (docs/PERFORMANCE.md) are LEVERS_MEASURED_GPT2,
# HOTLOOP_GPU_LEVERS="$LEVERS_MEASURED_GPT2" to measure them again.
# ResNet-18's (measured 2026-11-28): whole-step CUDA graphs (its steady
# step is host-bound) and cuDNN's benchmark off (its first step's
# algorithm searches against a 200-batch run), alone and together, then
# the benchmark timing 3 algorithms a shape instead of 10 (LibTorch
# builds every algorithm's plan before it times the first
# benchmark_limit); the CNN's (which the measure plan runs with CUDA
# graphs): the benchmark off.
LEVERS_KERNELS_OFF_GPT2="model.fused_layer_norm=false model.fused_cross_entropy=false model.fused_bias_gradient=false"
LEVERS_DEFAULT_GPT2="env:CUBLASLT_WORKSPACE_SIZE=131072;model.fused_bias_gradient=false;trainer.cuda_graphs=true;$LEVERS_KERNELS_OFF_GPT2"
LEVERS_MEASURED_GPT2="trainer.sdpa_backend=cudnn;trainer.sdpa_backend=flash;model.loss_chunk_size=0;optimizer.fused=false;trainer.sdpa_backend=efficient;model.fused_layer_norm=false;model.fused_cross_entropy=false"
LEVERS_DEFAULT_RESNET18_CIFAR="trainer.cuda_graphs=true;trainer.benchmark=false;trainer.cuda_graphs=true trainer.benchmark=false;trainer.benchmark_limit=3"
LEVERS_DEFAULT_CNN="trainer.benchmark=false"
LEVER_NEEDS=30  # one untraced GPT-2 run of hotloop (the H200: 15-25 s)
# Seconds a stage needs to be started: what a GPU machine took, or for a
# stage not yet run there an estimate (docs/GPU.md). build is resumable
# (ninja goes on where a cut build stopped), so it starts with less.
declare -A NEEDS=([configure]=60 [build]=90 [test]=120 [bench-cnn]=300
                  [bench-resnet18_cifar]=240 [bench-gpt2]=300 [ablation]=150
                  [levers]=$((2 * LEVER_NEEDS)))
# What a traced run adds to a benchmark stage, per implementation traced
# (an estimate: a short run, the trace's export and its tables).
TRACE_NEEDS=20
# The measure plan's stages with hotloop and python-tuned only, untraced,
# with bench/run's untimed machine warm-up run, from what the H200 took
# (2026-11-27, second session: GPT-2 67 s with hotloop traced, ResNet-18
# 109 s and the CNN on configs/bench/fast 137 s with both traced; the
# warm-up run adds 5-12 s), rounded up.
declare -A MEASURE_NEEDS=([bench-gpt2]=80 [bench-resnet18_cifar]=90
                          [bench-cnn]=110)
# "cli": a hotloop program that runs, built here or carried (below).
declare -A REQUIRES=([configure]="" [build]="configure" [test]="build"
                     [bench-cnn]="cli" [bench-resnet18_cifar]="cli"
                     [bench-gpt2]="cli" [ablation]="cli" [levers]="cli")
RESERVE=20  # seconds kept for copying the results at the end
# The implementations a benchmark stage runs: HOTLOOP_GPU_BENCH_IMPLS_<WORKLOAD>
# (CNN, RESNET18_CIFAR, GPT2), else HOTLOOP_GPU_BENCH_IMPLS, else all six.
bench_impls() {
  local var="HOTLOOP_GPU_BENCH_IMPLS_${1^^}"
  echo "${!var:-${HOTLOOP_GPU_BENCH_IMPLS:-}}"
}
# Whom a workload's traced runs follow (bench/run --trace-impls), "" for
# every implementation run.
trace_impls() {
  local var="HOTLOOP_GPU_TRACE_IMPLS_${1^^}"
  echo "${!var:-${HOTLOOP_GPU_TRACE_IMPLS:-}}"
}
STOPPED_BY=""
CLI_KIT=${HOTLOOP_GPU_CLI:-.gpu-cli/hotloop-cli.tar.gz}
die() { echo "gpu_run: error: $*" >&2; STOPPED_BY=$*; exit 2; }
note() { echo "gpu_run: $*"; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$SELF"; }

CPU=0 REDO=0 LIST=0 BENCH_QUICK=0 REQUESTED="" DEADLINE="" PLAN=""
TRACES=${HOTLOOP_GPU_TRACES:-0}
while (($#)); do
  case $1 in
    --plan) [[ $# -ge 2 ]] || die "--plan needs a name (measure or test)"; PLAN=$2; shift ;;
    --plan=*) PLAN=${1#*=} ;;
    --traces) TRACES=1 ;;
    --stages) [[ $# -ge 2 ]] || die "--stages needs a list"; REQUESTED=$2; shift ;;
    --stages=*) REQUESTED=${1#*=} ;;
    --deadline) [[ $# -ge 2 ]] || die "--deadline needs seconds"; DEADLINE=$2; shift ;;
    --deadline=*) DEADLINE=${1#*=} ;;
    --cpu) CPU=1 ;;
    --redo) REDO=1 ;;
    --bench-quick) BENCH_QUICK=1 ;;
    --list) LIST=1 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
# A plan: fixed stages, run whatever an earlier call did (each call of a
# GPU session starts on a bare machine), and its settings where the
# environment gives none.
case $PLAN in
  "") ;;
  measure|test)
    REDO=1
    # A command may run 10 minutes (test: 570 s, 30 s left for the results
    # to come back); --cpu (the 2-core machine) keeps no limit.
    # measure: 560 s, its three workloads with their traces; what is left
    # of 15 minutes then covers the levers stage or a compile row on the
    # warm machine (docs/GPU.md says when the test call goes first).
    if ((!CPU)); then
      if [[ $PLAN == measure ]]; then
        DEADLINE=${DEADLINE:-${HOTLOOP_GPU_DEADLINE:-560}}
      else
        DEADLINE=${DEADLINE:-${HOTLOOP_GPU_DEADLINE:-570}}
      fi
    fi
    # --stages picks some of them (what a cut call left), with the plan's
    # settings.
    if [[ $PLAN == test ]]; then
      REQUESTED=${REQUESTED:-configure,build,test}
    else
      REQUESTED=${REQUESTED:-configure,build,bench-gpt2,bench-resnet18_cifar,bench-cnn}
      TRACES=${HOTLOOP_GPU_TRACES:-1}
      # hotloop's runs traced: the tuned loops' traces on torch 2.11 are
      # kept (GPT-2's in docs/measurements/2026-11-27-h200, ResNet-18's
      # and the CNN's in 2026-11-27-h200-b) and change only with torch.
      # ResNet-18's tuned loop is traced too until its first step's
      # operator table (which the kept tables predate) is kept beside
      # hotloop's: the two say why hotloop's cuDNN searches take longer.
      if [[ -z ${HOTLOOP_GPU_TRACE_IMPLS+set} ]]; then
        export HOTLOOP_GPU_TRACE_IMPLS=hotloop
        export HOTLOOP_GPU_TRACE_IMPLS_RESNET18_CIFAR=${HOTLOOP_GPU_TRACE_IMPLS_RESNET18_CIFAR-hotloop,python-tuned}
      fi
      export HOTLOOP_GPU_BENCH_IMPLS=${HOTLOOP_GPU_BENCH_IMPLS:-hotloop,python-tuned}
      export HOTLOOP_GPU_BENCH_CONFIGS_CNN=${HOTLOOP_GPU_BENCH_CONFIGS_CNN:-configs/bench/fast}
      export HOTLOOP_GPU_BENCH_HOTLOOP_OPTIONS_CNN=${HOTLOOP_GPU_BENCH_HOTLOOP_OPTIONS_CNN:-trainer.cuda_graphs=true}
    fi
    ;;
  *) die "--plan: expected measure or test, got '$PLAN'" ;;
esac
[[ $TRACES == 0 || $TRACES == 1 ]] || die "HOTLOOP_GPU_TRACES: expected 0 or 1, got '$TRACES'"
case ${HOTLOOP_GPU_LEVERS_WORKLOAD:-gpt2} in
  gpt2 | resnet18_cifar | cnn) ;;
  *) die "HOTLOOP_GPU_LEVERS_WORKLOAD: expected gpt2, resnet18_cifar or cnn, got '$HOTLOOP_GPU_LEVERS_WORKLOAD'" ;;
esac

# A benchmark stage that runs some of the six implementations needs a share
# of its time, 90 s at least, and a traced run more for each.
for s in bench-cnn bench-resnet18_cifar bench-gpt2; do
  chosen=$(bench_impls "${s#bench-}")
  count=6
  if [[ -n $chosen ]]; then
    IFS=',' read -r -a impls <<<"$chosen"
    count=${#impls[@]}
    share=$((NEEDS[$s] * count / 6))
    NEEDS[$s]=$((share > 90 ? share : 90))
    if [[ $PLAN == measure && $chosen == hotloop,python-tuned ]]; then
      NEEDS[$s]=${MEASURE_NEEDS[$s]}
    fi
  fi
  if ((TRACES)); then
    traced=$count
    traced_chosen=$(trace_impls "${s#bench-}")
    if [[ -n $traced_chosen ]]; then
      IFS=',' read -r -a traced_impls <<<"$traced_chosen"
      traced=${#traced_impls[@]}
      ((traced < count)) || traced=$count
    fi
    NEEDS[$s]=$((NEEDS[$s] + TRACE_NEEDS * traced))
  fi
done

if [[ -n $REQUESTED ]]; then
  IFS=',' read -r -a asked <<<"$REQUESTED"
  for s in "${asked[@]}"; do
    [[ -n ${NEEDS[$s]:-} ]] || die "unknown stage '$s' (stages: ${STAGES[*]})"
  done
fi
if [[ -z $DEADLINE ]]; then
  DEADLINE=${HOTLOOP_GPU_DEADLINE:-$((CPU ? 0 : 540))}
fi
[[ $DEADLINE =~ ^[0-9]+$ ]] || die "--deadline: expected seconds, got '$DEADLINE'"

BUILD=${HOTLOOP_GPU_BUILD:-build-gpu}
DEPS=${HOTLOOP_GPU_DEPS:-.gpu-deps}
RESULTS=${HOTLOOP_GPU_RESULTS:-$BUILD/gpu-results}
JOBS=${HOTLOOP_GPU_JOBS:-$(nproc)}
mkdir -p "$BUILD"
BUILD_ABS=$(cd "$BUILD" && pwd)
STATE=$BUILD_ABS/gpu-run      # survives between calls on a warm machine
LOGS=$STATE/logs
ART=$STATE/artifacts
mkdir -p "$LOGS" "$ART"
PREFIX=$REPO/$DEPS/prefix
[[ $DEPS == /* ]] && PREFIX=$DEPS/prefix

# ---------------------------------------------------------------------------
# Which stages are done (a file per call-spanning state)

is_done() { grep -qx "$1" "$STATE/done" 2>/dev/null; }
mark_done() { is_done "$1" || echo "$1" >>"$STATE/done"; }
unmark_done() {
  [[ -f $STATE/done ]] || return 0
  grep -vx "$1" "$STATE/done" >"$STATE/done.tmp" || true
  mv "$STATE/done.tmp" "$STATE/done"
}
((REDO)) && rm -f "$STATE/done" "$STATE/stages.tsv"

if ((LIST)); then
  for s in "${STAGES[@]}"; do
    last=$(awk -F'\t' -v s="$s" '$1 == s { line = $2 ($3 != "-" ? " in " $3 " s" : "") ($4 != "" ? ": " $4 : "") }
                                  END { print line }' "$STATE/stages.tsv" 2>/dev/null || true)
    printf '  %-22s %-5s %s\n' "$s" "$(is_done "$s" && echo 'done' || echo -)" "${last:+(last: $last)}"
  done
  exit 0
fi

mkdir -p "$RESULTS"
RESULTS_ABS=$(cd "$RESULTS" && pwd)

# ---------------------------------------------------------------------------
# --cpu as root: hide the system's copies of the carried packages (their
# headers, CMake and pkg-config files, archives) from this process and its
# children, in a mount namespace of its own. Runtime libraries stay: other
# programs (Python's torch) load them too.

if ((CPU)) && [[ -z ${HOTLOOP_GPU_ISOLATED:-} ]]; then
  if [[ $(id -u) -eq 0 ]] && command -v unshare >/dev/null &&
     unshare --mount --propagation private true 2>/dev/null; then
    exec env HOTLOOP_GPU_ISOLATED=1 unshare --mount --propagation private \
      bash "$SELF" "${ARGS[@]}"
  fi
  note "warning: cannot hide the system's copies of the carried packages (needs root and unshare); the configure stage still checks that every dependency resolves into $DEPS/prefix"
fi
HIDDEN=""
if [[ ${HOTLOOP_GPU_ISOLATED:-} == 1 && -f $DEPS/MANIFEST ]]; then
  count=0 pkgs=()
  while read -r pkg _; do
    [[ $pkg == \#* || -z $pkg ]] && continue
    [[ $pkg == *-dev ]] || continue
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || continue
    pkgs+=("$pkg")
    while IFS= read -r f; do
      [[ -f $f && ! -L $f && $f != /usr/share/doc/* ]] || continue
      mount --bind /dev/null "$f" && count=$((count + 1))
    done < <(dpkg -L "$pkg")
  done <"$DEPS/MANIFEST"
  HIDDEN="$count files of ${pkgs[*]:-no installed package}"
fi

# ---------------------------------------------------------------------------
# Results: a few files in $RESULTS (what comes back from the machine),
# written at the end of every call, also one that the checks stopped

row() { ROWS+=("$(printf '  %-22s %-10s %7s  %s' "$1" "$2" "$3" "$4")"); printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$STATE/stages.tsv"; }

# shellcheck disable=SC2317  # runs from the EXIT trap
publish() {
  set +e
  local summary=$STATE/summary.txt
  {
    echo "hotloop GPU run, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(hostname), mode $MODE"
    echo "found:"
    ((${#FOUND[@]})) && printf '%s\n' "${FOUND[@]}"
    echo "this call ($((SECONDS - START)) s of $( ((DEADLINE)) && echo "$DEADLINE" || echo "no limit")):"
    printf '  %-22s %-10s %7s  %s\n' stage status seconds note
    ((${#ROWS[@]})) && printf '%s\n' "${ROWS[@]}"
    [[ -z $STOPPED_BY ]] || echo "  stopped by the checks: $STOPPED_BY"
    echo "every call on this build folder:"
    awk -F'\t' '{ printf "  %-22s %-10s %7s  %s\n", $1, $2, $3, $4 }' "$STATE/stages.tsv" 2>/dev/null
    if [[ -n $STOPPED_BY ]]; then
      echo "left: every stage asked for (fix what the checks found, then run again)"
    elif ((${#LEFT_STAGES[@]})); then
      local next
      next=$(IFS=,; echo "${LEFT_STAGES[*]}")
      echo "left: ${LEFT_STAGES[*]}"
      echo "next: scripts/gpu_run.sh${PLAN:+ --plan $PLAN} --stages $next$( ((CPU)) && echo " --cpu")"
      echo "  (on a fresh machine it configures and builds what these need, except that the benchmarks"
      echo "  and the ablation take the hotloop program from this call's hotloop-cli.tar.gz when it is"
      echo "  carried back as $CLI_KIT)"
    else
      echo "left: none"
    fi
    [[ -f $ART/tests.txt ]] && { echo; cat "$ART/tests.txt"; }
    for f in "$ART"/bench-*.txt "$ART/ablation.md"; do
      [[ -f $f ]] && sed -n '/^targets:/,$p' "$f"
    done
    [[ -f $ART/levers.txt ]] && { echo; cat "$ART/levers.txt"; }
  } >"$summary"
  local out=$RESULTS_ABS
  mkdir -p "$out"
  cp "$summary" "$out/summary.txt"
  # The traced runs' tables, one file (bench/trace_summary.py; well under
  # 1 MB): what the diagnosis on a machine without a GPU reads.
  local w f traced=()
  for w in gpt2 resnet18_cifar cnn; do
    for f in "$ART/traces/$w"-*.txt; do [[ -f $f ]] && traced+=("$f"); done
  done
  if ((${#traced[@]})); then
    for f in "${traced[@]}"; do cat "$f"; echo; done >"$out/traces.txt"
  fi
  [[ -f $ART/ctest-junit.xml ]] && cp "$ART/ctest-junit.xml" "$out/ctest-junit.xml"
  [[ -f $ART/hotloop-cli.tar.gz ]] && cp "$ART/hotloop-cli.tar.gz" "$out/hotloop-cli.tar.gz"
  local tables=()
  for w in gpt2 resnet18_cifar cnn; do
    [[ -f $ART/bench-$w.txt ]] && tables+=("$ART/bench-$w.txt")
  done
  [[ -f $ART/ablation.md ]] && tables+=("$ART/ablation.md")
  [[ -f $ART/levers.txt ]] && tables+=("$ART/levers.txt")
  if ((${#tables[@]})); then
    for f in "${tables[@]}"; do cat "$f"; echo; done >"$out/bench.txt"
    "${PY:-python3}" - "$ART" "$out/bench.json" <<'EOF'
import glob, json, os, sys
art, dest = sys.argv[1], sys.argv[2]
doc = {"bench": {}, "ablation": None}
for path in sorted(glob.glob(os.path.join(art, "bench-*.json"))):
    name = os.path.basename(path)[len("bench-"):-len(".json")]
    with open(path) as f:
        doc["bench"][name] = json.load(f)
levers = sorted(glob.glob(os.path.join(art, "levers", "*.json")),
                key=lambda p: int(os.path.basename(p)[:-5]))
if levers:
    doc["levers"] = []
    for path in levers:
        with open(path) as f:
            doc["levers"].append(json.load(f))
if os.path.exists(os.path.join(art, "ablation.json")):
    with open(os.path.join(art, "ablation.json")) as f:
        doc["ablation"] = json.load(f)
with open(dest, "w") as f:
    json.dump(doc, f, indent=1)
EOF
  fi
  local kept=(gpu-run/logs gpu-run/artifacts gpu-run/stages.tsv gpu-run/summary.txt)
  for f in CMakeCache.txt Testing/Temporary/LastTest.log Testing/Temporary/LastTestsFailed.log \
           CMakeFiles/CMakeConfigureLog.yaml CMakeFiles/CMakeError.log CMakeFiles/CMakeOutput.log; do
    [[ -f $BUILD_ABS/$f ]] && kept+=("$f")
  done
  tar -czf "$out/logs.tar.gz" -C "$BUILD_ABS" "${kept[@]}" 2>/dev/null
  echo
  cat "$summary"
  note "results in $RESULTS: $(cd "$out" && echo *)"
}

if ((CPU)); then MODE="cpu (no GPU)"; else MODE=gpu; fi
FOUND=()
ROWS=()
LEFT_STAGES=()
trap 'publish' EXIT

# ---------------------------------------------------------------------------
# What the machine has

START=$SECONDS
left() { echo $((DEADLINE - (SECONDS - START) - RESERVE)); }
# Runs a command within what is left of the deadline (exit 124 past it).
bounded() {
  if ((DEADLINE == 0)); then "$@"; return; fi
  local t
  t=$(left)
  ((t > 0)) || return 124
  timeout --kill-after=10 "$t" "$@"
}

found() { FOUND+=("$(printf '  %-12s %s' "$1" "$2")"); }

pick_python() {
  local candidates=()
  if [[ -n ${HOTLOOP_PYTHON:-} ]]; then
    candidates=("$HOTLOOP_PYTHON")
  elif ((CPU)); then
    candidates=(/usr/bin/python3 python3)
  else
    candidates=(python3 /usr/bin/python3)
  fi
  local py
  for py in "${candidates[@]}"; do
    if command -v "$py" >/dev/null && "$py" -c 'import torch' 2>/dev/null; then
      command -v "$py"
      return
    fi
  done
  die "no Python with torch (tried ${candidates[*]}): set HOTLOOP_PYTHON"
}

PY=$(pick_python)
probe=$("$PY" - <<'EOF'
import os, platform, shlex, sys

def put(key, value):
    print(f"{key}={shlex.quote('' if value is None else str(value))}")

put("PY_VERSION", platform.python_version())
put("PY_REAL", sys.executable)
import torch
import torch.utils
put("TORCH", torch.__version__)
put("TORCH_CUDA", torch.version.cuda)
put("TORCH_ABI", int(torch.compiled_with_cxx11_abi()))
prefix = getattr(torch.utils, "cmake_prefix_path", "")
put("TORCH_PREFIX", prefix if prefix and os.path.isdir(prefix) else "")
cuda = torch.cuda.is_available()
put("CUDA_AVAILABLE", int(cuda))
if cuda:
    major, minor = torch.cuda.get_device_capability(0)
    put("GPU_CAP", f"{major}.{minor}")
    put("GPU_COUNT", torch.cuda.device_count())
# The cuDNN and cuBLASLt this torch's process loads (cudnn.version() loads
# cuDNN), for the build stage to set beside the ones hotloop resolves.
libs = {}
try:
    put("PY_CUDNN", torch.backends.cudnn.version() if cuda else "")
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            for name in ("libcudnn.so", "libcublasLt.so"):
                if os.path.basename(path).startswith(name):
                    libs.setdefault(name, os.path.realpath(path))
except Exception:
    pass
put("PY_CUDNN_LIB", libs.get("libcudnn.so", ""))
put("PY_CUBLASLT_LIB", libs.get("libcublasLt.so", ""))
put("HAS_COMPILE", int(hasattr(torch, "compile")))
# NCCL's headers come with the nvidia-nccl wheel torch depends on, not with
# torch: the folder that holds include/nccl.h, for CMAKE_PREFIX_PATH.
nccl_root = ""
try:
    import importlib.util
    spec = importlib.util.find_spec("nvidia.nccl")
    for place in (spec.submodule_search_locations or []) if spec else []:
        if os.path.exists(os.path.join(place, "include", "nccl.h")):
            nccl_root = place
            break
except Exception:
    pass
put("NCCL_ROOT", nccl_root)
for name in ("torchvision", "tensorboard"):
    try:
        put(name.upper(), __import__(name).__version__)
    except Exception:
        put(name.upper(), "")
lightning = ""
for name in ("lightning", "pytorch_lightning"):
    try:
        lightning = f"{name} {__import__(name).__version__}"
        break
    except Exception:
        pass
put("LIGHTNING", lightning)
EOF
) || die "$PY cannot import torch and report on it"
eval "$probe"

note "hotloop at $REPO, mode $MODE, build folder $BUILD, results to $RESULTS"

# The GPU, its driver and CUDA.
NVCC="" CUDA_ARCH="" TORCH_ARCH=""
if ((CPU)); then
  found gpu "none (--cpu)"
else
  command -v nvidia-smi >/dev/null ||
    die "nvidia-smi not found: this machine shows no NVIDIA GPU (scripts/gpu_run.sh --cpu checks the kit without one)"
  smi=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -n1) ||
    die "nvidia-smi failed: $smi"
  IFS=',' read -r gpu_name gpu_mem gpu_driver <<<"$smi"
  ((CUDA_AVAILABLE)) ||
    die "torch.cuda.is_available() is False for $PY (torch $TORCH, CUDA ${TORCH_CUDA:-none}): set HOTLOOP_PYTHON to a Python whose torch sees the GPU"
  found gpu "${gpu_name# }, ${gpu_mem# }, driver ${gpu_driver# }, compute capability $GPU_CAP, $GPU_COUNT visible"
  NVCC=$(command -v nvcc || true)
  [[ -z $NVCC && -x /usr/local/cuda/bin/nvcc ]] && NVCC=/usr/local/cuda/bin/nvcc
  [[ -n $NVCC ]] || die "nvcc not found (PATH, /usr/local/cuda/bin): LibTorch's CMake config needs CUDA's compiler"
  nvcc_version=$("$NVCC" --version | sed -n 's/.*release \([0-9.]*\), V\([0-9.]*\).*/\2/p')
  found cuda "torch built with $TORCH_CUDA, cuDNN ${PY_CUDNN:-?}; nvcc ${nvcc_version:-?} ($NVCC)"
  if [[ ${nvcc_version%%.*} != "${TORCH_CUDA%%.*}" ]]; then
    note "warning: nvcc ${nvcc_version} and torch's CUDA $TORCH_CUDA differ in the major version"
  fi
  CUDA_ARCH=${GPU_CAP/./}      # 9.0 -> 90: the GPU's own code for add_layer_norm's kernels
  TORCH_ARCH=$GPU_CAP
fi

# torch and the Python side of the benchmarks.
found torch "$TORCH ($PY_REAL, Python $PY_VERSION), $([[ $TORCH_ABI == 1 ]] && echo "C++11 ABI" || echo "pre-C++11 ABI")"
[[ $TORCH_ABI == 1 ]] ||
  die "torch $TORCH is built with the pre-C++11 ABI; the carried Debian libraries (yaml-cpp, GoogleTest) need the C++11 ABI"
if [[ -n $TORCH_PREFIX ]]; then
  found libtorch "$TORCH_PREFIX (torch.utils.cmake_prefix_path)"
elif ((CPU)); then
  found libtorch "CMake's default search (Debian's libtorch-dev in /usr)"
else
  die "torch.utils.cmake_prefix_path of $PY names no folder: this torch carries no LibTorch CMake files"
fi
if ((!CPU)); then
  # Without it the build has no NCCL process group (configure says so).
  found nccl "${NCCL_ROOT:-not found (no nvidia.nccl package with include/nccl.h)}"
fi
found python-side "torchvision ${TORCHVISION:-MISSING}; torch.compile $([[ $HAS_COMPILE == 1 ]] && echo yes || echo "no (torch < 2.0)"); lightning ${LIGHTNING:-none}; tensorboard ${TENSORBOARD:-none}"
[[ -n $TORCHVISION ]] || die "torchvision is missing for $PY: the Python baselines need it"
if ((!CPU)); then
  [[ -n $TENSORBOARD ]] || die "the tensorboard package is missing for $PY: the tensorboard_python_reader test would be skipped"
  [[ -n $LIGHTNING ]] || note "warning: neither lightning nor pytorch_lightning for $PY: the python-lightning rows will read skipped"
fi

# Build tools.
command -v cmake >/dev/null || die "cmake not found"
command -v ninja >/dev/null || die "ninja not found (the build uses CMake's Ninja generator)"
CXX_BIN=${CXX:-$(command -v c++ || command -v g++ || true)}
[[ -n $CXX_BIN ]] || die "no C++ compiler (c++ or g++; or set CXX)"
cmake_version=$(cmake --version | awk 'NR == 1 { print $3 }')
glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{ print $2 }' || true)
found tools "cmake $cmake_version, ninja $(ninja --version), $("$CXX_BIN" --version | head -n1), glibc ${glibc:-?}, pkg-config: $(command -v pkg-config >/dev/null && echo yes || echo "none (CMake finds libturbojpeg directly)")"
if [[ -n $glibc && $(printf '%s\n' 2.32 "$glibc" | sort -V | head -n1) != 2.32 ]]; then
  die "glibc $glibc is older than the 2.32 that the carried Debian 12 libraries need"
fi

# The carried prefix and the data.
[[ -d $PREFIX && -f $DEPS/MANIFEST ]] ||
  die "$DEPS/prefix not found: run scripts/gpu_deps.sh on the Debian machine and send $DEPS along with the working tree"
found carried "$DEPS/prefix: $(grep -vc '^#' "$DEPS/MANIFEST") Debian packages ($(sed -n '2s/^# //p' "$DEPS/MANIFEST")), $(du -sh "$DEPS" | cut -f1)"
[[ -n $HIDDEN ]] && found hidden "the system's $HIDDEN (this run only)"
DATA=""
for d in "$PREFIX/share/datasets/fashion-mnist" /usr/share/datasets/fashion-mnist; do
  if [[ -f $d/train-images-idx3-ubyte.gz || -f $d/train-images-idx3-ubyte ]]; then DATA=$d; break; fi
done
found data "${DATA:-no Fashion-MNIST files}"

# The benchmarks need only the hotloop program and its library. A call that
# starts on a fresh machine can take them from the tarball an earlier call's
# build left in the results (hotloop-cli.tar.gz), carried back as $CLI_KIT
# (default .gpu-cli/hotloop-cli.tar.gz), instead of building again; it is
# used only when the sources are the ones it was built from and the program
# runs here.
source_id() {
  (cd "$REPO" && find CMakeLists.txt cmake src include apps -type f -print0 |
     sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
}
cli_ready() { [[ -x $BUILD/hotloop ]] && "$BUILD/hotloop" --version >/dev/null 2>&1; }
if ! cli_ready && [[ -f $CLI_KIT ]]; then
  kit_id=$(tar -xzOf "$CLI_KIT" cli-kit.txt 2>/dev/null | sed -n 's/^sources //p')
  if [[ $kit_id != "$(source_id)" ]]; then
    note "not using $CLI_KIT: built from other sources ($kit_id, now $(source_id))"
  else
    tar -xzf "$CLI_KIT" -C "$BUILD"
    if cli_ready; then
      found cli "$CLI_KIT: $("$BUILD/hotloop" --version) (built in an earlier call)"
    else
      note "not using $CLI_KIT: its hotloop does not run here ($("$BUILD/hotloop" --version 2>&1 | head -n1))"
      rm -f "$BUILD/hotloop" "$BUILD"/libhotloop.so*
    fi
  fi
fi
found cores "$(nproc) ($JOBS jobs); deadline $( ((DEADLINE)) && echo "$DEADLINE s for this call" || echo none)"

note "found:"
printf '%s\n' "${FOUND[@]}"

# ---------------------------------------------------------------------------
# The plan: the stages asked for (or every one not done) and what they need

plan=()
in_plan() { local p; for p in "${plan[@]}"; do [[ $p == "$1" ]] && return 0; done; return 1; }
add_stage() {
  local s=$1 r
  in_plan "$s" && return
  for r in ${REQUIRES[$s]}; do
    if [[ $r == cli ]]; then
      cli_ready || in_plan build || add_stage build
    else
      is_done "$r" || add_stage "$r"
    fi
  done
  plan+=("$s")
}
if [[ -n $REQUESTED ]]; then
  for s in "${STAGES[@]}"; do   # in the stages' own order
    for a in "${asked[@]}"; do [[ $a == "$s" ]] && add_stage "$s"; done
  done
else
  for s in "${STAGES[@]}"; do is_done "$s" || add_stage "$s"; done
fi
if [[ -z $DATA ]]; then
  for s in "${plan[@]}"; do
    [[ $s == test || $s == bench-cnn || $s == ablation ]] &&
      die "no Fashion-MNIST files ($DEPS/prefix/share/datasets/fashion-mnist or /usr/share/datasets/fashion-mnist) for stage $s: run scripts/gpu_deps.sh without --no-data"
  done
fi
note "stages: ${plan[*]:-none left (--redo starts over)}"

# The environment every stage shares. CMake reads CMAKE_PREFIX_PATH,
# CMAKE_GENERATOR and, for LibTorch's CUDA setup, CUDACXX, CUDAARCHS,
# CUDAToolkit_ROOT and TORCH_CUDA_ARCH_LIST from it too, so the test that
# builds examples/ against the installed hotloop configures the
# same way.
PREFIX_PATH=$PREFIX${TORCH_PREFIX:+;$TORCH_PREFIX}${NCCL_ROOT:+;$NCCL_ROOT}
export CMAKE_PREFIX_PATH=${PREFIX_PATH//;/:}
export CMAKE_GENERATOR=Ninja
export PYTHON=$PY   # tests/tensorboard_reader.sh
if [[ -n $DATA && $DATA != /usr/share/datasets/fashion-mnist ]]; then
  export HOTLOOP_FASHION_MNIST_ROOT=$DATA   # idx_test.cpp, examples_run.cmake
fi
if ((!CPU)); then
  # What the checks found, unless the command sets them.
  export CUDACXX=${CUDACXX:-$NVCC} CUDAARCHS=${CUDAARCHS:-$CUDA_ARCH}
  export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-$TORCH_ARCH}
  export CUDAToolkit_ROOT
  CUDAToolkit_ROOT=${CUDAToolkit_ROOT:-$(dirname "$(dirname "$(readlink -f "$CUDACXX")")")}
fi
if [[ ${cmake_version%%.*} -ge 4 ]]; then
  export CMAKE_POLICY_VERSION_MINIMUM=3.5   # config files older than 3.5
fi

# ---------------------------------------------------------------------------
# Stages. Each writes $LOGS/<stage>.log and returns non-zero on failure
# (124 when it ran out of time).

# The dependencies as CMake resolved them: each must come from the carried
# prefix (a system copy here would be missing on the GPU machine). With a
# GPU, a system copy there is only reported: it builds all the same.
check_resolved() {
  local cache=$BUILD/CMakeCache.txt bad=0 real_prefix
  real_prefix=$(readlink -f "$PREFIX")
  local -a deps=(
    "yaml-cpp:yaml-cpp_DIR"
    "nlohmann_json:nlohmann_json_DIR"
    "GTest:GTest_DIR GTEST_LIBRARY"
    "zlib headers:ZLIB_INCLUDE_DIR"
    "zlib:ZLIB_LIBRARY_RELEASE ZLIB_LIBRARY"
    "libpng headers:PNG_PNG_INCLUDE_DIR"
    "libpng:PNG_LIBRARY_RELEASE PNG_LIBRARY"
    "turbojpeg headers:TURBOJPEG_INCLUDEDIR TURBOJPEG_INCLUDE_DIR"
    "turbojpeg:pkgcfg_lib_TURBOJPEG_turbojpeg TURBOJPEG_LIBRARY"
    "Gloo headers:HOTLOOP_GLOO_INCLUDE_DIR"
  )
  echo "dependencies as CMake resolved them:"
  local entry name keys key value where
  for entry in "${deps[@]}"; do
    name=${entry%%:*} keys=${entry#*:} value=""
    for key in $keys; do
      value=$(sed -n "s/^$key:[A-Z]*=//p" "$cache" | head -n1)
      [[ -n $value && $value != *-NOTFOUND ]] && break
      value=""
    done
    if [[ -z $value ]]; then
      where="NOT FOUND in CMakeCache.txt ($keys)"; bad=1
    elif [[ $(readlink -f "$value") == "$real_prefix"/* || $value == "$PREFIX"/* ]]; then
      where="carried: ${value#"$REPO"/}"
    else
      where="NOT CARRIED: $value"
      ((CPU)) && bad=1
    fi
    printf '  %-17s %s\n' "$name" "$where"
  done
  printf '  %-17s %s\n' "LibTorch" "$(sed -n 's/^Torch_DIR:[A-Z]*=//p' "$cache")"
  return $bad
}

stage_configure() {
  # The carried libraries lie inside the source tree, whose folders CMake
  # leaves out of installed programs' RPATH on its own.
  local args=(-S "$REPO" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
              "-DCMAKE_PREFIX_PATH=$PREFIX_PATH" "-DHOTLOOP_BENCH_PYTHON=$PY_REAL"
              "-DHOTLOOP_TEST_PYTHON=$PY_REAL"
              "-DCMAKE_INSTALL_RPATH=$PREFIX/lib/x86_64-linux-gnu")
  if ((!CPU)); then
    args+=("-DCMAKE_CUDA_COMPILER=$CUDACXX" "-DCMAKE_CUDA_ARCHITECTURES=$CUDAARCHS"
           "-DTORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST" "-DCUDAToolkit_ROOT=$CUDAToolkit_ROOT"
           "-DPython_EXECUTABLE=$PY_REAL" "-DPYTHON_EXECUTABLE=$PY_REAL")
  fi
  # A folder another command configured (setup.sh's build/) keeps that
  # configure's cache, whose paths to the system's copies of the carried
  # packages --cpu hides: CMake would fail on them and leave the folder
  # broken for its own command. Only a folder this script configured (its
  # RPATH setting below) is configured again.
  if [[ -f $BUILD/CMakeCache.txt ]] &&
     ! grep -qx "CMAKE_INSTALL_RPATH:[A-Z]*=$PREFIX/lib/x86_64-linux-gnu" "$BUILD/CMakeCache.txt"; then
    echo "$BUILD was configured by another command (its CMakeCache.txt has not this script's settings): give this script a build folder of its own (HOTLOOP_GPU_BUILD; default build-gpu)"
    return 1
  fi
  echo "\$ cmake ${args[*]}"
  bounded cmake "${args[@]}" || return
  grep -h '^-- hotloop:' "$LOGS/configure.log" || true
  check_resolved
}

# Where the built library finds the carried runtime libraries.
check_runtime() {
  local lib=$BUILD/libhotloop.so bad=0 name line path real real_prefix libs
  real_prefix=$(readlink -f "$PREFIX")
  [[ -e $lib ]] || { echo "no $lib"; return 1; }
  libs=$(ldd "$lib")
  echo "runtime libraries of $lib:"
  for name in libyaml-cpp libpng16 libturbojpeg libz.so; do
    line=$(grep -m1 "$name" <<<"$libs" || true)
    path=$(awk '{ print $3 }' <<<"$line")
    if [[ -z $line ]]; then
      printf '  %-14s not linked\n' "$name"
    elif [[ $line == *"not found"* ]]; then
      printf '  %-14s NOT FOUND\n' "$name"; bad=1
    elif [[ $(readlink -f "$path") == "$real_prefix"/* ]]; then
      printf '  %-14s carried: %s\n' "$name" "${path#"$REPO"/}"
    else
      printf '  %-14s system: %s\n' "$name" "$path"
    fi
  done
  # cuDNN and cuBLASLt: hotloop's own against the ones torch's Python
  # process loads, so that a benchmark's two rows are known to time the
  # same libraries (a system copy found first would give other kernels).
  # Reported, not failed: the rows' kernels will say what it changed.
  for name in libcudnn.so libcublasLt.so; do
    line=$(grep -m1 "$name" <<<"$libs" || true)
    if [[ $line == *"not found"* ]]; then
      printf '  %-14s NOT FOUND\n' "$name"; bad=1
      continue
    fi
    path=$(awk '{ print $3 }' <<<"$line")
    [[ -n $path ]] && path=$(readlink -f "$path")
    case $name in
      libcudnn.so) real=$PY_CUDNN_LIB ;;
      *) real=$PY_CUBLASLT_LIB ;;
    esac
    if [[ -z $path && -z $real ]]; then
      continue
    elif [[ $path == "$real" ]]; then
      printf '  %-14s %s (the same as torch'"'"'s Python loads)\n' "$name" "$path"
    else
      printf '  %-14s hotloop: %s; torch'"'"'s Python: %s: DIFFERENT\n' \
        "$name" "${path:-not linked}" "${real:-not loaded}"
    fi
  done
  return $bad
}

stage_build() {
  # Everything when the tests follow; else the program the benchmarks run.
  local target=()
  in_plan test || target=(--target hotloop_cli)
  echo "\$ cmake --build $BUILD -j $JOBS ${target[*]}"
  bounded cmake --build "$BUILD" -j "$JOBS" "${target[@]}" || return
  check_runtime || return
  # The program and its library for a later call on a fresh machine.
  printf 'sources %s\nbuilt %s\n' "$(source_id)" "$(date -u '+%Y-%m-%d %H:%M UTC')" \
    >"$BUILD/cli-kit.txt"
  (cd "$BUILD" && tar -czf "$ART/hotloop-cli.tar.gz" cli-kit.txt hotloop libhotloop.so*)
}

stage_test() {
  local rc=0
  rm -f "$ART/ctest-junit.xml"
  # The test programs too, where an earlier build made only the CLI.
  bounded cmake --build "$BUILD" -j "$JOBS" || return
  # Each test process takes every core it may run on unless told otherwise:
  # $JOBS of them at once would share the cores many times over.
  local per_test=$(( $(nproc) / JOBS ))
  ((per_test >= 1)) || per_test=1
  echo "\$ OMP_NUM_THREADS=$per_test ctest --test-dir $BUILD -j $JOBS --output-on-failure --timeout 300 --output-junit $ART/ctest-junit.xml"
  bounded env OMP_NUM_THREADS=$per_test \
    ctest --test-dir "$BUILD" -j "$JOBS" --output-on-failure --timeout 300 \
    --output-junit "$ART/ctest-junit.xml" || rc=$?
  ((rc == 124 || rc == 137)) && return 124
  [[ -f $ART/ctest-junit.xml ]] || { echo "ctest wrote no JUnit file (exit $rc)"; return 1; }
  local check=(python3 "$REPO/scripts/gpu_junit.py" "$ART/ctest-junit.xml")
  command -v python3 >/dev/null || check=("$PY" "$REPO/scripts/gpu_junit.py" "$ART/ctest-junit.xml")
  ((CPU)) || check+=(--gpu)
  "${check[@]}" | tee "$ART/tests.txt" || rc=1
  return $rc
}

# The bench/run arguments every run of `workload` gets (the build's
# hotloop, the Python, the data, its configs and hotloop options from the
# environment, --dry-run and --quick as this call runs), its JSON going to
# `json_out`, into the array BENCH_ARGS.
bench_args() {
  local workload=$1 json_out=$2
  BENCH_ARGS=(--suite cuda --workloads "$workload" --hotloop "$BUILD_ABS/hotloop"
              --python "$PY_REAL" --json-out "$json_out")
  [[ -n $DATA ]] && BENCH_ARGS+=(--data-root "$DATA")
  ((CPU)) && BENCH_ARGS+=(--dry-run)
  ((BENCH_QUICK)) && BENCH_ARGS+=(--quick)
  local configs="HOTLOOP_GPU_BENCH_CONFIGS_${workload^^}"
  [[ -n ${!configs:-} ]] && BENCH_ARGS+=(--configs "${!configs}")
  local option options_var="HOTLOOP_GPU_BENCH_HOTLOOP_OPTIONS_${workload^^}"
  for option in ${HOTLOOP_GPU_BENCH_HOTLOOP_OPTIONS:-} ${!options_var:-}; do
    BENCH_ARGS+=(--hotloop-option "$option")
  done
}

bench_stage() {
  local workload=$1 rc=0
  bench_args "$workload" "$ART/bench-$workload.json"
  local args=("${BENCH_ARGS[@]}")
  local impls
  impls=$(bench_impls "$workload")
  [[ -n $impls ]] && args+=(--impls "$impls")
  if ((TRACES)); then
    mkdir -p "$ART/traces"
    args+=(--traces "$ART/traces")
    local traced
    traced=$(trace_impls "$workload")
    [[ -n $traced ]] && args+=(--trace-impls "$traced")
  fi
  rm -f "$ART/bench-$workload.json" "$ART/bench-$workload.txt"
  echo "\$ $PY_REAL bench/run ${args[*]}"
  bounded "$PY_REAL" bench/run "${args[@]}" >"$ART/bench-$workload.txt" || rc=$?
  cat "$ART/bench-$workload.txt"
  return $rc
}

stage_ablation() {
  local rc=0
  local args=(--suite cuda --hotloop "$BUILD_ABS/hotloop" --markdown
              --json-out "$ART/ablation.json")
  [[ -n $DATA ]] && args+=(--data-root "$DATA")
  ((CPU)) && args+=(--dry-run)
  ((BENCH_QUICK)) && args+=(--epochs 1 --limit-batches 20)
  rm -f "$ART/ablation.json" "$ART/ablation.md"
  echo "\$ $PY_REAL bench/ablation ${args[*]}"
  bounded "$PY_REAL" bench/ablation "${args[@]}" >"$ART/ablation.md" || rc=$?
  cat "$ART/ablation.md"
  return $rc
}

# One workload's levers, each measured on its own against the defaults in the same
# call: one bench/run of hotloop per lever (untraced), as long as the
# deadline leaves a run's time; levers.txt is the table.
stage_levers() {
  local levers=() lever i=0 rc=0 args
  local workload=${HOTLOOP_GPU_LEVERS_WORKLOAD:-gpt2}
  local defaults_var="LEVERS_DEFAULT_${workload^^}"
  local defaults=${!defaults_var}
  IFS=';' read -r -a levers <<<"${HOTLOOP_GPU_LEVERS:-$defaults}"
  levers=("" "${levers[@]}")
  rm -rf "$ART/levers" "$ART/levers.txt"
  mkdir -p "$ART/levers"
  for lever in "${levers[@]}"; do
    local needs=$LEVER_NEEDS # and a traced run's after it (TRACE_NEEDS)
    [[ " $lever " == *" trace "* ]] && needs=$((LEVER_NEEDS + TRACE_NEEDS))
    if ((DEADLINE)) && (($(left) < needs)); then
      echo "levers: stopped before '${lever:-defaults}': $(left) s left"
      break
    fi
    bench_args "$workload" "$ART/levers/$i.json"
    args=("${BENCH_ARGS[@]}" --impls hotloop)
    # bench/run's untimed machine warm-up once, before the defaults' row:
    # the runs after it find the machine as warm as that row did.
    ((i > 0)) && args+=(--no-machine-warmup)
    # env:NAME=VALUE sets a variable for that run alone (a library's
    # setting, such as cuBLASLt's workspace); `trace` follows the run with
    # a traced one, whose tables go to traces.txt under the lever's name;
    # the rest are hotloop options.
    local option envs=() traced=0
    for option in $lever; do
      if [[ $option == env:* ]]; then
        envs+=("${option#env:}")
      elif [[ $option == trace ]]; then
        traced=1
      else
        args+=(--hotloop-option "$option")
      fi
    done
    ((traced)) && args+=(--traces "$ART/levers/trace-$i" --trace-impls hotloop)
    printf '%s\n' "${envs[@]}" | sed '/^$/d' >"$ART/levers/$i.env"
    echo "\$ ${envs[*]} $PY_REAL bench/run ${args[*]}"
    bounded env "${envs[@]}" "$PY_REAL" bench/run "${args[@]}" >"$ART/levers/$i.txt" 2>&1 || rc=$?
    tail -n 25 "$ART/levers/$i.txt"
    local table="$ART/levers/trace-$i/$workload-hotloop.txt"
    if ((traced)) && [[ -f $table ]]; then
      mkdir -p "$ART/traces"
      { echo "lever: $lever"; cat "$table"; } >"$ART/traces/$workload-lever-$i.txt"
    fi
    ((rc == 124 || rc == 137)) && break
    i=$((i + 1))
  done
  "$PY" "$REPO/scripts/gpu_levers.py" "$ART/levers" >"$ART/levers.txt" || rc=1
  cat "$ART/levers.txt"
  return $rc
}

run_stage() {
  case $1 in
    configure) stage_configure ;;
    build) stage_build ;;
    test) stage_test ;;
    bench-*) bench_stage "${1#bench-}" ;;
    ablation) stage_ablation ;;
    levers) stage_levers ;;
  esac
}

# ---------------------------------------------------------------------------

status=0
for i in "${!plan[@]}"; do
  stage=${plan[$i]}
  if ((DEADLINE)) && (($(left) < NEEDS[$stage])); then
    LEFT_STAGES=("${plan[@]:$i}")
    row "$stage" stopped - "needs about ${NEEDS[$stage]} s, $(left) s left"
    note "stopped before $stage: about ${NEEDS[$stage]} s needed, $(left) s left of this call"
    status=3
    break
  fi
  note "stage $stage ..."
  t0=$SECONDS
  rc=0
  run_stage "$stage" >"$LOGS/$stage.log" 2>&1 || rc=$?
  took=$((SECONDS - t0))
  case $stage in
    configure) sed -n '/^-- hotloop:/p; /^dependencies as/,$p' "$LOGS/$stage.log" ;;
    build) sed -n '/^runtime libraries/,$p' "$LOGS/$stage.log" ;;
    test) [[ ! -f $ART/tests.txt ]] || cat "$ART/tests.txt" ;;
    bench-*) [[ ! -f $ART/$stage.txt ]] || cat "$ART/$stage.txt" ;;
    ablation) [[ ! -f $ART/ablation.md ]] || cat "$ART/ablation.md" ;;
    levers) [[ ! -f $ART/levers.txt ]] || cat "$ART/levers.txt" ;;
  esac
  if ((rc == 0)); then
    row "$stage" passed "$took" ""
    mark_done "$stage"
    continue
  fi
  if ((rc == 124 || rc == 137)); then
    row "$stage" timed-out "$took" "cut at the deadline; runs again next call"
    note "$stage ran out of this call's time after $took s"
    unmark_done "$stage"
    LEFT_STAGES=("${plan[@]:$i}")
    status=3
    break
  fi
  row "$stage" failed "$took" "exit $rc; $LOGS/$stage.log"
  note "$stage failed (exit $rc); the end of $LOGS/$stage.log:"
  tail -n 30 "$LOGS/$stage.log" | sed 's/^/  | /'
  status=1
  if [[ $stage == configure || $stage == build ]]; then
    unmark_done "$stage"
    LEFT_STAGES=("${plan[@]:$i}")
    break
  fi
  mark_done "$stage"   # ran to the end; --stages runs it again
done
exit $status
