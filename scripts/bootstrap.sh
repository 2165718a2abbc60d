#!/usr/bin/env bash
# Installs the Debian packages fp8kit builds and tests with, the interop tests' Python packages in
# .interop-venv/, and where CUDA is, the cudnn-frontend headers; skips what is already present.
#   --with-chromium   also Debian's chromium (optional, not needed by CI): scripts/render-html.sh renders
#                     `fp8kit lab`'s page with it, and the ctest lab.render_page runs instead of skipping
set -euo pipefail
cd "$(dirname "$0")/.."

with_chromium=no
for arg in "$@"; do
  case $arg in
    --with-chromium) with_chromium=yes ;;
    *) echo "error: unknown option $arg (bootstrap.sh takes only --with-chromium)" >&2; exit 2 ;;
  esac
done

packages=(
  build-essential cmake ninja-build pkg-config
  clang libclang-rt-dev libomp-dev  # the asan preset: clang's sanitizers, libFuzzer, OpenMP
  libopenblas-dev libcli11-dev libfmt-dev nlohmann-json3-dev
  libarchive-dev zlib1g-dev libutf8proc-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  ca-certificates curl
  python3 python3-venv  # the interop tests' venv
)
if [ "$with_chromium" = yes ]; then
  packages+=(chromium)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "bootstrap: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "error: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Where nvcc is (the CUDA backend gets built): cudnn-frontend, cuDNN's header-only C++ graph API, from
# the pinned PyPI wheel (its headers are the same in every wheel: the cp311 manylinux one is taken
# whatever the local Python), unpacked into .deps/cudnn-frontend/include (gitignored; cmake/Cudnn.cmake
# looks there). cuDNN itself comes with the CUDA toolkit (or CUDNN_ROOT).
frontend_version=1.32.0
frontend=.deps/cudnn-frontend
if { command -v nvcc || [ -x /usr/local/cuda/bin/nvcc ]; } >/dev/null 2>&1 &&
    [ "$(cat "$frontend/VERSION" 2>/dev/null)" != "$frontend_version" ]; then
  echo "bootstrap: fetching cudnn-frontend $frontend_version's headers into $frontend"
  wheel=$(mktemp -d)
  trap 'rm -rf "$wheel"' EXIT
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_28_x86_64 "nvidia-cudnn-frontend==$frontend_version" -d "$wheel"
  python3 -m zipfile -e "$wheel"/nvidia_cudnn_frontend-*.whl "$wheel/unpacked"
  rm -rf "$frontend"
  mkdir -p "$frontend"
  mv "$wheel/unpacked/include" "$frontend/include"
  echo "$frontend_version" >"$frontend/VERSION"
fi

# The interop tests (tests/interop/, ctest label `interop`) check fp8kit's files against the reference
# Python packages pinned in scripts/interop-requirements.txt, in .interop-venv/ (gitignored). The
# venv is complete when its stamp holds the requirements' hash; otherwise it is made anew. Without
# PyPI this warns and goes on: those tests then skip, saying why.
venv=.interop-venv
stamp="$venv/fp8kit-requirements.sha256"
requirements=scripts/interop-requirements.txt
want=$(sha256sum "$requirements" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "bootstrap: installing the interop tests' Python packages into $venv"
  rm -rf "$venv"
  if python3 -m venv "$venv" &&
      "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input --retries 2 --timeout 60 \
        -r "$requirements"; then
    echo "$want" >"$stamp"
  else
    rm -rf "$venv"
    echo "warning: could not install $requirements into $venv (is PyPI reachable?); the interop tests will be" \
      "skipped until scripts/bootstrap.sh succeeds" >&2
  fi
fi
