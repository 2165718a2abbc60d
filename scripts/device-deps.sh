#!/usr/bin/env bash
# Downloads (here, with network) the Debian packages that the GPU machine lacks into .deps/, so a
# device run can unpack them with scripts/device-check.sh. Carry `.deps` with the run (gitignored).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  # headers, static libraries and CMake configs for the build
  libfmt-dev libcli11-dev nlohmann-json3-dev libarchive-dev libutf8proc-dev zlib1g-dev
  libopenblas-dev libopenblas-pthread-dev libgtest-dev libgmock-dev libbenchmark-dev
  # pkg-config itself, in case the GPU machine has none
  pkgconf-bin libpkgconf3
  # shared libraries the programs load, and what those load in turn (the GPU machine runs another
  # distribution, so sonames such as libicuuc.so.72 are not there)
  libfmt9 libarchive13 libutf8proc2 libopenblas0-pthread libbenchmark1debian
  libgfortran5 libquadmath0 libacl1 libbz2-1.0 liblz4-1 liblzma5 libnettle8 libxml2 libicu72 libzstd1 zlib1g
)

mkdir -p .deps
cd .deps
rm -f ./*.deb
apt-get download "${packages[@]}" >/dev/null
du -sh . | awk '{print "device-deps: .deps holds " $1}'
