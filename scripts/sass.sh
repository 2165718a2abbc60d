#!/usr/bin/env bash
# Static SASS of one CUDA source for sm_90a, with no GPU: per kernel, its instruction count, its
# spills (STL/LDL, and the instruction before each reload, which says where in the loop it sits), and
# its most common opcodes. ptxas -v reports spills per kernel only; where they sit decides whether
# they cost anything (a reload behind a tile's stores did: bench/cuda/README.md, the short-k GEMM).
# cuobjdump and the nvdisasm it runs come from NVIDIA's PyPI wheels (nvidia-cuda-cuobjdump,
# nvidia-cuda-nvdisasm), fetched once into .deps/cuobjdump.
# Usage: scripts/sass.sh SOURCE.cu [KERNEL-NAME-SUBSTRING] [--full]   (--full also prints the SASS)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: scripts/sass.sh SOURCE.cu [KERNEL-NAME-SUBSTRING] [--full]" >&2; exit 2; }
source=$1 filter=${2:-} full=${3:-}
[ -f "$source" ] || { echo "error: no such source: $source" >&2; exit 2; }
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc" ] || { echo "error: nvcc not found (the CUDA toolkit builds the cubin)" >&2; exit 1; }

tools=.deps/cuobjdump
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bin=$tools/nvidia/cu13/bin
if [ ! -x "$bin/cuobjdump" ] || [ ! -x "$bin/nvdisasm" ]; then
  echo "sass: fetching cuobjdump and nvdisasm (NVIDIA's PyPI wheels) into $tools" >&2
  python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
    "nvidia-cuda-cuobjdump>=13,<14" "nvidia-cuda-nvdisasm>=13,<14" -d "$work"
  rm -rf "$tools"
  for w in "$work"/*.whl; do python3 -m zipfile -e "$w" "$tools"; done
  chmod +x "$bin/cuobjdump" "$bin/nvdisasm"
fi

"$nvcc" -DFP8KIT_HAVE_CUDA=1 -Isrc -O3 --generate-code=arch=compute_90a,code=[sm_90a] \
  --expt-relaxed-constexpr -std=c++20 -x cu -cubin "$source" -o "$work/k.cubin"
NVDISASM_PATH=$bin "$bin/cuobjdump" -sass "$work/k.cubin" >"$work/k.sass"
python3 - "$work/k.sass" "$filter" "$full" <<'PY'
import collections, re, sys
text, wanted, full = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3] == "--full"
for function in re.split(r"\n\s+Function : ", text)[1:]:
    name = function.split("\n")[0].strip()
    if wanted not in name:
        continue
    code = re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", function)
    ops = collections.Counter()
    for _, ins in code:
        words = ins.split()
        op = words[1] if words[0].startswith("@") else words[0]
        ops[op.split(".")[0]] += 1
    print(f"{name}\n  {len(code)} instructions, {ops['STL']} STL, {ops['LDL']} LDL")
    for i, (_, ins) in enumerate(code):
        if re.search(r"\b(STL|LDL)\b", ins):
            print(f"    {i:5d} {ins.strip()[:60]:60s} after: {code[i - 1][1].strip()[:50]}")
    print("  " + ", ".join(f"{op} {n}" for op, n in ops.most_common(16)))
    if full:
        for i, (_, ins) in enumerate(code):
            print(f"  {i:5d} {ins.strip()}")
PY
