#!/usr/bin/env bash
# `make demo`: the main job. The FP8 formats, then the seed experiment: the tiny Transformer trained
# on IMDB in BF16 and in FP8 on the same data order (3 epochs, batch 32), the query layer's FP8
# scales and amax histories before and after, and a final comparison table.
# Usage: scripts/demo.sh [BUILD_DIR] [extra `fp8kit train` options, e.g. --seed 1 --lag keras]
set -euo pipefail
build=${1:-build}
shift || true
"$build/fp8kit" formats
echo
# Spin-waiting OpenMP threads run ten times slower when other processes share the cores.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
"$build/fp8kit" train --compare bf16,fp8 --epochs 3 --batch-size 32 --inspect-fp8 --out "${FP8KIT_OUT:-out/demo}" "$@"
