#!/usr/bin/env bash
# Runs ON the GPU machine: COMMAND over the programs that scripts/device-pack.sh packed into .run/
# (carried with the call), with no build. Unpacks them and their Debian libraries (into /tmp/deps,
# never into /), finds CUDA's, cuDNN's and NCCL's libraries as scripts/device-check.sh does, and runs
# COMMAND in .run/ with the programs on PATH and $OUT as the device tool sets it.
# Usage: scripts/device-run.sh 'COMMAND'
set -uo pipefail
cd "$(dirname "$0")/../.run" || { echo "device-run: no .run: pack with scripts/device-pack.sh and carry .run"; exit 1; }
begin=$(date +%s)
deps=/tmp/deps
lib=$deps/usr/lib/x86_64-linux-gnu
mkdir -p $deps
for f in debs/*.deb; do dpkg -x "$f" $deps || { echo "device-run: dpkg -x $f failed"; exit 1; }; done
for f in *.gz; do [ -e "$f" ] && gunzip -f "$f"; done
python_lib() { python3 -c "import $1 as m; print(list(m.__path__)[0] + '/lib')" 2>/dev/null; }
cuda_lib=$(dirname "$(find /usr/local/cuda/ -name 'libcublasLt.so.13' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread:$(python_lib nvidia.cudnn):$(python_lib nvidia.nccl):$cuda_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$PWD:$PATH OUT=${OUT:-/tmp/out} NCCL_NVLS_ENABLE=0
mkdir -p "$OUT"
echo "device-run: $(nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm --format=csv,noheader | head -1); set up in $(( $(date +%s) - begin )) s"
bash -c "$1"
status=$?
echo "device-run: $(( $(date +%s) - begin )) s, exit $status"
exit $status
