#!/usr/bin/env bash
# Builds hotloop against LibTorch 2.x and runs its tests there, on a machine
# without a GPU: Debian 13 (trixie) ships LibTorch 2.6 (CPU) with c10d's
# Gloo group, so a Debian 13 root made with debootstrap gives the 2.x build,
# the 2.x c10d (process-group backends, the 2.x Reducer) and the data-parallel
# tests over Gloo, built with GCC 14, but none of the CUDA code. Needs root
# (debootstrap, chroot, mounts) and Debian's package mirror.
#
#   scripts/torch2.sh                   # make the root if needed, build, the whole suite
#   scripts/torch2.sh -R 'DDP|Launcher' # extra arguments go to ctest
#   scripts/torch2.sh --build-only      # configure and build, no tests
#   scripts/torch2.sh --shell           # a shell in the root, the tree at /src
#   scripts/torch2.sh --cuda            # against LibTorch 2.6 with CUDA 12.4 and NCCL
#
# --cuda builds, and only builds, against Debian 13's CUDA LibTorch
# (contrib), CUDA toolkit and NCCL (non-free) in a root of its own: the
# CUDA code (the NCCL group, CUDA graph capture, the CUDA-only tests)
# compiled and linked without a GPU. Debian's nvidia-cudnn package fetches
# cuDNN from NVIDIA when it is installed; where NVIDIA's site cannot be
# reached its install step is skipped, so the root has no cuDNN library,
# the programs link with LibTorch's cuDNN symbols unresolved, and they
# cannot run there.
#
# The roots are /var/cache/hotloop/torch2-root (2.3 GB) and
# torch2-cuda-root (11 GB) there (HOTLOOP_TORCH2_ROOT=DIR to put one
# elsewhere), the build folders build-torch2/ and build-torch2-cuda/. The
# tree is mounted into the root at /src while the script runs and unmounted
# when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }
die() { echo "torch2: error: $*" >&2; exit 1; }

mode=test
cuda=0
ctest_args=()
for arg in "$@"; do
  case $arg in
    --build-only) mode=build ;;
    --cuda) cuda=1 ;;
    --shell) mode=shell ;;
    -h|--help) usage; exit 0 ;;
    *) ctest_args+=("$arg") ;;
  esac
done
if ((cuda)) && [[ $mode == test ]]; then
  ((${#ctest_args[@]} == 0)) || die "--cuda builds only: its programs cannot run without cuDNN (see --help)"
  mode=build
fi

SUITE=trixie
MIRROR=http://deb.debian.org/debian
# What setup.sh installs on Debian 12, under Debian 13's names, less
# Chromium (its tests skip without it) and the Fashion-MNIST files (bound
# in from this machine when it has them).
PACKAGES=(
  g++ cmake ninja-build pkg-config ccache libopenblas0-pthread libopenblas0-openmp
  libyaml-cpp-dev nlohmann-json3-dev zlib1g-dev libpng-dev libturbojpeg0-dev
  libgtest-dev libgmock-dev
)
if ((cuda)); then
  ROOT=${HOTLOOP_TORCH2_ROOT:-/var/cache/hotloop/torch2-cuda-root}
  BUILD=build-torch2-cuda
  COMPONENTS="main contrib non-free"
  # LibTorch with CUDA is in contrib, the CUDA toolkit and NCCL in non-free;
  # the CUDA LibTorch needs Gloo's CUDA build.
  PACKAGES+=(libtorch-cuda-dev libgloo-cuda-dev nvidia-cuda-toolkit libnccl-dev)
else
  ROOT=${HOTLOOP_TORCH2_ROOT:-/var/cache/hotloop/torch2-root}
  BUILD=build-torch2
  COMPONENTS=main
  # python3-torch gives torchrun and the Python reference checks, at 2.6
  # too; python3-safetensors the check against the safetensors library
  # itself (Debian 12 has none).
  PACKAGES+=(libtorch-dev libgloo-dev python3-torch python3-safetensors)
fi
ROOT=$(realpath -m "$ROOT")

[[ $(id -u) -eq 0 ]] || die "run this as root: it needs debootstrap, chroot and mounts"
[[ $(dpkg --print-architecture 2>/dev/null) == amd64 ]] || die "this script makes an amd64 Debian root; run it on amd64 Debian"

mounts=()
cleanup() {
  local i
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
    umount -l "${mounts[i]}" 2>/dev/null || true
  done
}
trap cleanup EXIT
mount_in() {  # mount_in TARGET MOUNT-ARGS...: mounts unless already mounted
  local target=$ROOT$1
  shift
  mkdir -p "$target"
  if ! mountpoint -q "$target"; then
    mount "$@" "$target"
    mounts+=("$target")
  fi
}
in_root() { chroot "$ROOT" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 bash -c "$1"; }

if [[ ! -x $ROOT/usr/bin/apt-get ]]; then
  if ! command -v debootstrap >/dev/null; then
    echo "torch2: installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null
  fi
  echo "torch2: making a Debian 13 root in $ROOT"
  mkdir -p "$(dirname "$ROOT")"
  debootstrap --variant=minbase --include=ca-certificates --components="${COMPONENTS// /,}" \
    "$SUITE" "$ROOT" "$MIRROR" >"$ROOT.debootstrap.log" 2>&1 ||
    die "debootstrap $SUITE failed; its log is $ROOT.debootstrap.log"
  rm -f "$ROOT.debootstrap.log"
fi
mount_in /proc -t proc proc
mount_in /dev --bind /dev
mount_in /dev/pts --bind /dev/pts
mount_in /dev/shm -t tmpfs tmpfs
mount_in /src --bind "$PWD"
if [[ -d /usr/share/datasets/fashion-mnist ]]; then
  mount_in /usr/share/datasets/fashion-mnist --bind /usr/share/datasets/fashion-mnist -o ro
fi
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
echo "deb $MIRROR $SUITE $COMPONENTS" >"$ROOT/etc/apt/sources.list"

installed=" $(in_root "dpkg-query -W -f='\${Package}:\${Status} ' ${PACKAGES[*]} 2>/dev/null || true") "
missing=()
for pkg in "${PACKAGES[@]}"; do
  [[ $installed == *" $pkg:install ok installed "* ]] || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "torch2: installing into the root: ${missing[*]}"
  log=$ROOT.install.log
  if ! in_root "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends ${PACKAGES[*]}" >"$log" 2>&1; then
    # nvidia-cudnn's install step downloads cuDNN from NVIDIA; where that
    # fails, skip the step so that the packages that depend on it configure.
    postinst=$ROOT/var/lib/dpkg/info/nvidia-cudnn.postinst
    if ((cuda)) && grep -q "nvidia-cudnn (--configure)" "$log" && [[ -f $postinst ]]; then
      echo "torch2: nvidia-cudnn could not fetch cuDNN from NVIDIA; going on without it (the build needs no cuDNN)"
      printf '#!/bin/sh\nexit 0\n' >"$postinst"
      in_root "dpkg --configure -a" >>"$log" 2>&1 || die "dpkg --configure in $ROOT failed; see $log"
    else
      die "apt-get install in $ROOT failed; see $log"
    fi
  fi
fi
echo "torch2: $(in_root "dpkg-query -W -f='\${Status} \${Package} \${Version}\n' libtorch-dev libtorch-cuda-dev 2>/dev/null | sed -n 's/^install ok installed \(.*\)/\1, /p' | tr -d '\n'; g++ --version | head -1")"

if [[ $mode == shell ]]; then
  chroot "$ROOT" /usr/bin/env HOME=/root bash -c 'cd /src && exec bash -i'
  exit
fi

configure="-G Ninja -DCMAKE_BUILD_TYPE=Release -DHOTLOOP_BUILD_TESTS=ON -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
if ((cuda)) && ! in_root "test -e /usr/lib/x86_64-linux-gnu/libcudnn.so.9"; then
  # Without cuDNN the programs link with LibTorch's cuDNN symbols
  # unresolved, and GoogleTest lists the tests when ctest runs, not after
  # the link (the test program cannot start there).
  configure+=" -DCMAKE_EXE_LINKER_FLAGS=-Wl,--unresolved-symbols=ignore-in-shared-libs"
  configure+=" -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST"
fi
mkdir -p "$BUILD"
log=$PWD/$BUILD/configure.log
in_root "cd /src && cmake -S . -B $BUILD $configure" >"$log" 2>&1 ||
  { tail -n 30 "$log" >&2; die "configuring $BUILD failed; the whole output is $log"; }
grep -E '^-- hotloop:' "$log" || true
rm -f "$log"
in_root "cd /src && cmake --build $BUILD --target hotloop_cli hotloop_tests"
[[ $mode == build ]] && exit 0
quoted=""
((${#ctest_args[@]} == 0)) || quoted=$(printf '%q ' "${ctest_args[@]}")
in_root "cd /src && ctest --test-dir $BUILD --output-on-failure -j2 $quoted"
