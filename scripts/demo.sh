#!/usr/bin/env bash
# `make demo`: the main job. Until `fp8kit train` lands, the formats table and the quantization-error report.
set -euo pipefail
build=${1:-build}
"$build/fp8kit" formats
"$build/fp8kit" quant-error --out "${FP8KIT_OUT:-out/quant-error}"
