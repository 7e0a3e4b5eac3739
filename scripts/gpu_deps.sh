#!/usr/bin/env bash
# Downloads the Debian 12 packages that hotloop's build and tests need beyond
# LibTorch -- development files, their runtime libraries and the
# Fashion-MNIST files -- and unpacks them into one relocatable prefix,
# .gpu-deps/prefix, for a machine that has LibTorch (a CUDA wheel of torch)
# but no package registry. Nothing is installed on this machine. Send the
# folder along with the working tree; scripts/gpu_run.sh builds against it
# (docs/GPU.md).
#
#   scripts/gpu_deps.sh             # .gpu-deps/prefix, then its size
#   scripts/gpu_deps.sh --no-data   # without the Fashion-MNIST files (30 MB)
#   HOTLOOP_GPU_DEPS=DIR scripts/gpu_deps.sh
#
# Layout: prefix/{include,lib/x86_64-linux-gnu,share} as under /usr, with
# /lib's files merged into lib/, every symbolic link relative and every
# pkg-config file's prefix relative to the file (${pcfiledir}), so the
# folder works wherever it lands; prefix/share/datasets/fashion-mnist holds
# the IDX files. .gpu-deps/MANIFEST lists the packages and versions.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }
die() { echo "gpu_deps: error: $*" >&2; exit 1; }

WITH_DATA=1
for arg in "$@"; do
  case $arg in
    --no-data) WITH_DATA=0 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$arg' (see --help)" ;;
  esac
done

DEPS=${HOTLOOP_GPU_DEPS:-.gpu-deps}
SEND_LIMIT_MIB=64  # what one command on the GPU machine may be sent: working tree + carried
# Debian 12 (bookworm) names; the runtime packages are the ones each -dev
# package pins to its own version.
PACKAGES=(
  libyaml-cpp-dev libyaml-cpp0.7    # config files
  nlohmann-json3-dev                # summary.json, callback state (headers)
  zlib1g-dev zlib1g                 # gzipped IDX files
  libpng-dev libpng16-16            # image folders: PNG
  libturbojpeg0-dev libturbojpeg0   # image folders: JPEG (TurboJPEG API)
  libgtest-dev libgmock-dev         # the test suite (static libraries)
  libgloo-dev                       # Gloo's headers, for c10d's Gloo process group
)
DATA_PACKAGES=(dataset-fashion-mnist)  # the main job's data, one test, the CNN benchmark
# Static archives nothing links (the build uses the shared libraries).
UNUSED_ARCHIVES=(libz.a libpng.a libpng16.a libturbojpeg.a libyaml-cpp.a)

command -v apt-get >/dev/null || die "apt-get not found: run this on Debian 12, whose packages it carries"
command -v dpkg-deb >/dev/null || die "dpkg-deb not found: run this on Debian 12"
arch=$(dpkg --print-architecture)
[[ $arch == amd64 ]] || die "this machine is $arch; the GPU machine is x86-64 (amd64): run this on an amd64 Debian 12"
if [[ -r /etc/debian_version ]] && [[ $(cut -d. -f1 /etc/debian_version) != 12 ]]; then
  echo "gpu_deps: warning: this is Debian $(cat /etc/debian_version), not 12: the package names are bookworm's" >&2
fi

wanted=("${PACKAGES[@]}")
((WITH_DATA)) && wanted+=("${DATA_PACKAGES[@]}")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/debs" "$work/root"

download() { (cd "$work/debs" && apt-get download -q "${wanted[@]}") >"$work/download.log" 2>&1; }
echo "gpu_deps: downloading ${#wanted[@]} packages: ${wanted[*]}"
if ! download; then
  if [[ $(id -u) -eq 0 ]]; then
    echo "gpu_deps: apt-get download failed; refreshing the package lists (apt-get update) and trying again"
    apt-get update -q >/dev/null 2>&1 || die "apt-get update failed: is a Debian mirror reachable?"
    download || die "apt-get download failed: $(grep -m1 -E '^E:' "$work/download.log" || tail -n1 "$work/download.log")"
  else
    die "apt-get download failed ($(grep -m1 -E '^E:' "$work/download.log" || tail -n1 "$work/download.log")); as root, 'apt-get update' first"
  fi
fi

manifest=$work/MANIFEST
{
  echo "# Debian packages unpacked into prefix/ by scripts/gpu_deps.sh"
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), Debian $(cat /etc/debian_version 2>/dev/null || echo '?'), $arch"
} >"$manifest"
for deb in "$work"/debs/*.deb; do
  dpkg-deb -x "$deb" "$work/root"
  dpkg-deb -f "$deb" Package Version | paste -sd' ' >>"$manifest"
done
for pkg in "${wanted[@]}"; do
  grep -q "^Package: $pkg " "$manifest" || die "package $pkg was not downloaded (see apt-get download's output)"
done
sed -i 's/^Package: \(.*\) Version: /\1 /' "$manifest"

# /usr's tree is the prefix; /lib's files (zlib) join its lib/.
new=$DEPS/prefix.new
rm -rf "$new"
mkdir -p "$new"
cp -a "$work/root/usr/." "$new/"
if [[ -d $work/root/lib ]]; then
  mkdir -p "$new/lib"
  cp -a "$work/root/lib/." "$new/lib/"
fi
rm -rf "${new:?}"/share/{doc,doc-base,man,lintian} "${new:?}"/{bin,src}
for archive in "${UNUSED_ARCHIVES[@]}"; do
  rm -f "$new"/lib/*/"$archive"
done
# Gloo: the headers alone. LibTorch holds Gloo compiled in; Debian's library
# (and the CMake package that names it) would be a second copy.
rm -rf "$new"/lib/libgloo* "$new"/lib/*/libgloo* "$new"/share/cmake/Gloo

# Absolute links (/lib/... or /usr/...) point into the prefix, relatively.
while IFS= read -r -d '' link; do
  target=$(readlink "$link")
  [[ $target == /* ]] || continue
  case $target in
    /usr/*) inside=$new/${target#/usr/} ;;
    /lib/*) inside=$new/lib/${target#/lib/} ;;
    *) die "$link points to $target, outside /usr and /lib" ;;
  esac
  ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$inside")" "$link"
done < <(find "$new" -type l -print0)
dangling=$(find -L "$new" -type l -print)
[[ -z $dangling ]] || die "links that point nowhere in the prefix: $dangling"

# pkg-config files: the prefix relative to the file itself.
while IFS= read -r -d '' pc; do
  up=$(realpath -m --relative-to="$(dirname "$pc")" "$new")
  if grep -q '^prefix=' "$pc"; then
    sed -i "s|^prefix=/usr\$|prefix=\${pcfiledir}/$up|" "$pc"
  else
    sed -i "1i prefix=\${pcfiledir}/$up" "$pc"
  fi
  sed -i -e 's|^exec_prefix=/usr$|exec_prefix=${prefix}|' \
         -e 's|\([=IL ]\)/usr/|\1${prefix}/|g' "$pc"
  if grep -q '/usr' "$pc"; then
    die "$pc still names /usr after the fix-up: $(grep -m1 /usr "$pc")"
  fi
done < <(find "$new" -name '*.pc' -type f -print0)

rm -rf "$DEPS/prefix"
mv "$new" "$DEPS/prefix"
cp "$manifest" "$DEPS/MANIFEST"

if [[ $DEPS != /* ]] && command -v git >/dev/null && git rev-parse --git-dir >/dev/null 2>&1 &&
   ! git check-ignore -q "$DEPS"; then
  echo "gpu_deps: warning: $DEPS is not ignored by git: add '/$DEPS/' to .gitignore" >&2
fi

mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
total=$(du -sb "$DEPS" | cut -f1)
data=0
[[ -d $DEPS/prefix/share/datasets ]] && data=$(du -sb "$DEPS/prefix/share/datasets" | cut -f1)
tree=0
if command -v git >/dev/null && git rev-parse --git-dir >/dev/null 2>&1; then
  tree=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } |
          xargs -0 -r stat -c %s -- 2>/dev/null | awk '{ s += $1 } END { print s + 0 }') || true
  tree=${tree:-0}   # files deleted from the work tree are not counted
fi
echo "gpu_deps: $DEPS: $(mib "$total") MiB ($(mib $((total - data))) MiB of libraries and headers, $(mib "$data") MiB of Fashion-MNIST), $(grep -vc '^#' "$DEPS/MANIFEST") packages"
echo "gpu_deps: sent with the working tree ($(mib "$tree") MiB): $(mib $((total + tree))) MiB of the ${SEND_LIMIT_MIB} MiB one command may be sent"
if ((total + tree > SEND_LIMIT_MIB * 1048576)); then
  die "over the ${SEND_LIMIT_MIB} MiB that may be sent; try --no-data"
fi
echo "gpu_deps: send '$DEPS' along with the working tree (it is ignored by git: name it); scripts/gpu_run.sh finds it there"
