#!/usr/bin/env bash
# Installs what hotloop needs from Debian's packages, then configures and
# builds it in Release under build/. Safe to run again: installed packages
# are skipped and the build is incremental.
#
#   ./setup.sh              install + build the library and the hotloop CLI
#   ./setup.sh --tests      the same, plus what the tests need: GoogleTest,
#                           Chromium (the report test), torchrun (Debian's
#                           python3-torch), torchvision, valgrind, the test
#                           binary
#   BUILD_DIR=out ./setup.sh
set -euo pipefail
cd "$(dirname "$0")"

TESTS=0
for arg in "$@"; do
  case $arg in
    --tests) TESTS=1 ;;
    -h|--help) sed -n '2,10{s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) echo "setup: error: unknown argument '$arg' (expected --tests)" >&2; exit 2 ;;
  esac
done

BUILD_DIR=${BUILD_DIR:-build}
PACKAGES=(
  g++ cmake ninja-build pkg-config
  libtorch-dev            # LibTorch 1.13 (CPU)
  libgloo-dev             # c10d's Gloo backend, used by LibTorch's CMake config
  libopenblas0-pthread    # without it BLAS falls back to the reference one (~12x slower)
  libopenblas0-openmp     # the build hotloop restarts on: products on LibTorch's OpenMP threads
                          # (1.3-1.5x on Linear layers); the pthreads build stays the system's BLAS
  libyaml-cpp-dev         # config files
  nlohmann-json3-dev      # summary.json
  zlib1g-dev              # gzipped IDX files
  libpng-dev libturbojpeg0-dev  # image folders (PNG, JPEG)
  dataset-fashion-mnist   # the main job's data: /usr/share/datasets/fashion-mnist
)
if ((TESTS)); then
  PACKAGES+=(
    libgtest-dev libgmock-dev
    chromium                # renders the run report in its headless test
    python3-torch           # torchrun, which the data-parallel tests launch with
    python3-torchvision     # resnet18, the Python side of the weight-exchange tests
    valgrind                # the CUDA kernels' emulated tests under memcheck
  )
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null; then
      SUDO=sudo
    else
      echo "setup: error: these Debian packages are missing and I am not root: ${missing[*]}" >&2
      echo "setup: hint: run 'apt-get install ${missing[*]}' as root, then ./setup.sh again" >&2
      exit 1
    fi
  fi
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#PACKAGES[@]} Debian packages present"
fi

# The main job needs the library and the CLI only; the test binary (most of
# a clean build's time on two cores) is built when the tests are asked for.
# A build folder that has the tests keeps them.
configure=(-S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release)
if ((TESTS)); then
  configure+=(-DHOTLOOP_BUILD_TESTS=ON)
elif [[ ! -f $BUILD_DIR/CMakeCache.txt ]]; then
  configure+=(-DHOTLOOP_BUILD_TESTS=OFF)
fi
if command -v ccache >/dev/null && [[ ! -f $BUILD_DIR/CMakeCache.txt ]]; then
  configure+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake "${configure[@]}"
if ((TESTS)); then
  cmake --build "$BUILD_DIR" --target hotloop_cli hotloop_tests
  echo "setup: built $BUILD_DIR/hotloop and the tests (ctest --test-dir $BUILD_DIR)"
else
  cmake --build "$BUILD_DIR" --target hotloop_cli
  echo "setup: built $BUILD_DIR/hotloop"
fi
