#!/usr/bin/env bash
# Installs the Debian packages fp8kit builds and tests with; skips what is already present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  clang libclang-rt-dev libomp-dev  # the asan preset: clang's sanitizers, libFuzzer, OpenMP
  libopenblas-dev libcli11-dev libfmt-dev nlohmann-json3-dev
  libarchive-dev zlib1g-dev libutf8proc-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  ca-certificates curl
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "bootstrap: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "error: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
