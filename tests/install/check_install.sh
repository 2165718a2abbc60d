#!/usr/bin/env bash
# The install test: installs the build tree BUILD into a temporary prefix, then builds and runs the
# consumer project against it twice, through find_package(fp8kit) and through pkg-config.
# Usage: check_install.sh BUILD CXX
set -euo pipefail
build=$1 cxx=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/fp8kit_install_XXXXXX")
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/prefix" >/dev/null
test -x "$work/prefix/bin/fp8kit"
"$work/prefix/bin/fp8kit" --version

cmake -S "$here/consumer" -B "$work/cmake" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/cmake" >/dev/null
"$work/cmake/consumer"

pc=$(find "$work/prefix" -name fp8kit.pc)
export PKG_CONFIG_PATH="$(dirname "$pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
# shellcheck disable=SC2046  # pkg-config's output is a list of flags
"$cxx" -std=c++20 "$here/consumer/main.cpp" -o "$work/consumer_pc" $(pkg-config --cflags --libs fp8kit)
"$work/consumer_pc"
