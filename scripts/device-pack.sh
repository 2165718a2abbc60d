#!/usr/bin/env bash
# Builds CUDA programs HERE (nvcc, no GPU needed) and packs them into .run/ for a device call that
# then spends none of its device time building: each program stripped and gzipped, and the Debian
# runtime libraries they load (from ldd: what the GPU machine's other distribution lacks). On the
# device, scripts/device-run.sh unpacks and runs them. Carry ".run" (its size is printed; a call
# carries 64 MiB at most).
#
# Usage: scripts/device-pack.sh [--baseline REV] TARGET...
#   TARGET: a target of the release tree (test_cuda, bench_cuda_gpt_layer, fp8kit_cli, ...), packed
#   as .run/NAME (fp8kit_cli as fp8kit). --baseline REV builds the same targets from `git archive
#   REV` in build-baseline/ (rebuilt incrementally while REV stays) and packs them as NAME.base, for
#   a ratio against the baseline in one call.
# Then, e.g.: device run with carry [".run"] and
#   scripts/device-run.sh 'test_cuda --gtest_filter=CudaBiasSum.*; bench_cuda_gpt_layer.base; bench_cuda_gpt_layer'
# The programs were built for this tree's paths: tests that read files of the source tree by their
# compiled-in paths belong to scripts/device-check.sh, which builds on the device.
set -euo pipefail
cd "$(dirname "$0")/.."

baseline=""
if [ "${1:-}" = --baseline ]; then baseline=$2; shift 2; fi
[ $# -gt 0 ] || { echo "usage: scripts/device-pack.sh [--baseline REV] TARGET..." >&2; exit 2; }
command -v nvcc >/dev/null || { echo "device-pack: no nvcc here: the programs need the CUDA backend" >&2; exit 1; }

./scripts/bootstrap.sh >/dev/null
rm -rf .run
mkdir -p .run/debs

# build dir, source dir: configures with the CUDA backend (sm_90a) when needed, builds the targets.
build() {
  [ -f "$1/build.ninja" ] || cmake -S "$2" -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP8KIT_CUDA=ON \
    -DCUDNN_FRONTEND_INCLUDE_DIR="$PWD/.deps/cudnn-frontend/include" >/dev/null
  cmake --build "$1" -j "$(nproc)" --target "${@:3}"
}

# build dir, suffix: each target's program, stripped and gzipped into .run/.
pack() {
  local t name path
  for t in "${@:3}"; do
    name=${t%_cli}
    path=$(find "$1" -maxdepth 3 -type f -perm -u+x -name "$name" | head -1)
    [ -n "$path" ] || { echo "device-pack: no program $name in $1" >&2; exit 1; }
    strip -o ".run/$name$2" "$path"
    gzip -9 ".run/$name$2"
  done
}

build build . "$@"
pack build "" "$@"
if [ -n "$baseline" ]; then
  src=build-baseline/src
  if [ "$(cat build-baseline/rev 2>/dev/null)" != "$(git rev-parse "$baseline")" ]; then
    rm -rf "$src" && mkdir -p "$src"
    git archive "$baseline" | tar -x -C "$src"
    git rev-parse "$baseline" >build-baseline/rev
  fi
  build build-baseline/build "$src" "$@"
  pack build-baseline/build .base "$@"
fi

# The packages of the shared libraries the programs load, less those every CUDA machine has.
libs=$(for f in .run/*.gz; do gzip -dc "$f" >.run/probe && chmod +x .run/probe && ldd .run/probe; done |
  awk '$3 ~ /^\// && $3 !~ /cuda/ {print $3}' | sort -u)
rm -f .run/probe
packages=$(for l in $libs; do dpkg -S "$(readlink -f "$l")" 2>/dev/null || dpkg -S "$l"; done |
  cut -d: -f1 | sort -u | grep -vxE 'libc6|libstdc\+\+6|libgcc-s1|libgomp1')
(cd .run/debs && apt-get download $packages >/dev/null 2>&1) ||
  { echo "device-pack: apt-get download failed for: $packages (run apt-get update first)" >&2; exit 1; }
echo "device-pack: .run holds $(du -sh .run | cut -f1): $(cd .run && ls *.gz | tr '\n' ' ')"
