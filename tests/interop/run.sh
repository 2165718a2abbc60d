#!/usr/bin/env bash
# Runs one interop test (tests/interop/test_*.py) with the venv's Python that scripts/bootstrap.sh
# makes, given the fp8kit binary; exits 77 (ctest: skipped) when that venv is missing or incomplete.
set -euo pipefail
test=$1 cli=$2
root="$(cd "$(dirname "$0")/../.." && pwd)"
venv="${FP8KIT_INTEROP_VENV:-$root/.interop-venv}"
if [ ! -x "$venv/bin/python" ] || [ ! -f "$venv/fp8kit-requirements.sha256" ]; then
  echo "skipped: no complete interop venv at $venv; run scripts/bootstrap.sh (it needs PyPI) to make it"
  exit 77
fi
exec "$venv/bin/python" "$test" "$cli"
