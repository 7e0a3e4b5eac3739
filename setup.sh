#!/usr/bin/env bash
# Installs what hotloop needs from Debian's packages, then configures and
# builds it in Release under build/. Safe to run again: installed packages
# are skipped and the build is incremental.
#
#   ./setup.sh              install + build
#   BUILD_DIR=out ./setup.sh
set -euo pipefail
cd "$(dirname "$0")"

BUILD_DIR=${BUILD_DIR:-build}
PACKAGES=(
  g++ cmake ninja-build pkg-config
  libtorch-dev            # LibTorch 1.13 (CPU)
  libgloo-dev             # c10d's Gloo backend, used by LibTorch's CMake config
  libopenblas0-pthread    # without it BLAS falls back to the reference one (~12x slower)
  libyaml-cpp-dev         # config files
  nlohmann-json3-dev      # summary.json
  zlib1g-dev              # gzipped IDX files
  libpng-dev libturbojpeg0-dev  # image folders (PNG, JPEG)
  libgtest-dev libgmock-dev
  dataset-fashion-mnist   # the main job's data: /usr/share/datasets/fashion-mnist
  chromium                # renders the run report in its headless test
)

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

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD_DIR"
echo "setup: built $BUILD_DIR/hotloop"
