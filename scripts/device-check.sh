#!/usr/bin/env bash
# Runs ON the GPU machine (through the device tool, carrying .deps): unpacks the Debian packages of
# scripts/device-deps.sh into /tmp/deps (never into /), builds with the CUDA backend for sm_90a,
# runs the GPU tests (and the CPU suite), then the GEMM and quantize benchmarks.
# Writes summary.txt and logs to $OUT (default /tmp/out). Usage: scripts/device-check.sh [ctest -R regex]
#   scripts/device-check.sh model: all GPU tests, then the seed model's epoch benchmark per precision
#   (bench_cuda_seed_epoch), the attention kernels' (bench_cuda_attention), one Linear's
#   (bench_cuda_linear) and cuDNN's SDPA (bench_cuda_sdpa) instead of the GEMM/quantize benchmarks
#   and the CPU suite.
#   scripts/device-check.sh train: builds everything; `fp8kit train --device cuda --compare bf16,fp8
#   --epochs 3 --seed 1` on IMDB; every test (GPU and CPU); `fp8kit bench gemm`; seeds 2 and 3 as time
#   allows (the device call has about 9 minutes). Needs data/aclImdb_v1.tar.gz (carry "data");
#   data/imdb-vocab.txt, when there, saves learning the vocabulary.
#   scripts/device-check.sh lm [regex]: the GPU tests (or those matching regex), cuDNN's SDPA
#   benchmark, the Llama training step's throughput (bench_cuda_lm_step, bf16 vs FP8, at the
#   LM_BENCH configurations), per-kernel times with PROFILE="preset:batch:seq:precision" (ncu) and, when
#   data/aclImdb_v1.tar.gz is carried, `fp8kit lm train` of the 25m model on IMDB, bf16 then FP8
#   (LM_STEPS steps each, default 300).
#   scripts/device-check.sh infer [regex]: the GPU tests (or those matching regex; "none" skips
#   them), the inference benchmarks (decode GEMMs, decode attention, and `fp8kit lm bench` of bf16 vs
#   FP8 at Llama-3-8B's shapes with INFER_BENCH's arguments; INFER_BENCH=0 skips it) and, with
#   INFER_QUALITY=1 and the data, the pipeline on IMDB text: the 25m LM trained in bf16 (LM_STEPS,
#   default 2000), calibrated, packed per tensor and per channel, its perplexity through the runtime
#   in bf16, FP8 and FP8 with the FP8 KV cache, and greedy agreement with bf16 (per-tensor and
#   per-channel weights with static or per-token activations, 128 x 128 blocks, 1 x 128 groups, bf16
#   with the FP8 KV cache).
#   scripts/device-check.sh gemv: the GEMM and matmul GPU tests (gemv's and the op table's rows), then
#   the decode GEMMs of Llama-3-8B on gemv and cuBLASLt (bench_cuda_gemv): the copy bandwidth and the
#   m = 1 lines in the summary, the whole table (m = 1, 4, 8, 16, 64) in bench-gemv.txt.
#   scripts/device-check.sh lab [regex]: the GPU tests (or those matching regex; "none" skips them),
#   then `fp8kit lab --device cuda` (the page and its CSV files in $OUT/lab, the training and inference
#   tables in the summary), bench_cuda_lab_mlp, and the health statistics' cost (bench_cuda_lm_step,
#   FP8, gpt2-small and 1b, a recording every 50 steps); LAB_PROFILE=rows: each kernel's time and DRAM
#   bytes of bench_cuda_lab_mlp at that size (ncu, ncu-lab.csv); LAB_PAGE=0 skips the page and the
#   health statistics' cost.
#   scripts/device-check.sh gpt-layer [regex]: the GPU tests matching regex (default: the GPT layer's, the Llama's
#   and LayerNorm's; "none" skips them), then one GPT layer's forward + backward at Transformer
#   Engine's getting-started configuration, bf16 vs FP8 (bench_cuda_gpt_layer, with GPT_LAYER_BENCH as
#   its arguments when set: "runs hidden heads seq batch ffn precision"); GPT_LAYER_PROFILE="bf16 fp8" adds
#   per-kernel times (ncu) of those precisions' steps; BASELINE=<source dir> (model and gpt-layer modes:
#   a `git archive` of an earlier commit, untracked in this tree) builds the benchmark from it too and
#   runs the two in turns.
#   scripts/device-check.sh sanitize [regex]: every GPU test (or those matching regex) under
#   compute-sanitizer's memcheck, racecheck and synccheck, the three side by side; each must be clean.
set -uo pipefail
cd "$(dirname "$0")/.."
begin=$(date +%s)
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

deps=/tmp/deps
lib=$deps/usr/lib/x86_64-linux-gnu
mkdir -p "$deps"
for f in .deps/*.deb; do dpkg -x "$f" "$deps" || { note "FAIL: dpkg -x $f"; exit 1; }; done
export CMAKE_PREFIX_PATH=$deps/usr
export CPATH=$deps/usr/include:$deps/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}
export LIBRARY_PATH=$lib:$lib/openblas-pthread${LIBRARY_PATH:+:$LIBRARY_PATH}
# Only the unpacked .pc files, with their /usr paths moved under /tmp/deps.
export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$deps/usr/share/pkgconfig
export PKG_CONFIG_SYSROOT_DIR=$deps
pkg_config=$(command -v pkg-config || echo "$deps/usr/bin/pkgconf")
runtime_path=$lib:$lib/openblas-pthread
export PATH=$PATH:/usr/local/cuda/bin
# cuDNN 9 comes from PyTorch's Python packages here (nvidia/cudnn: include/, and lib/ with only
# libcudnn*.so.9): CMake gets it as CUDNN_ROOT, the programs load it from there. Without it CMake
# looks in CUDA's folders. cudnn-frontend's headers travel in .deps (scripts/bootstrap.sh puts them there).
cudnn_root=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null)
[ -n "$cudnn_root" ] && runtime_path=$runtime_path:$cudnn_root/lib
# NCCL likewise (nvidia/nccl: include/nccl.h, lib/libnccl.so.2) as NCCL_ROOT; without it CMake looks
# in CUDA's folders, and without NCCL the nccl backend is left out (its tests skip).
nccl_root=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
[ -n "$nccl_root" ] && runtime_path=$runtime_path:$nccl_root/lib
[ -f .deps/cudnn-frontend/include/cudnn_frontend.h ] ||
  { note "FAIL: no .deps/cudnn-frontend/include: run scripts/bootstrap.sh where nvcc is, and carry .deps"; exit 1; }
export CUBLASLT_LOG_LEVEL=1  # cuBLASLt explains its refusals (errors only)

note "device: $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | head -1)"
note "nvcc: $(nvcc --version | tail -1); cmake: $(cmake --version | head -1); gcc: $(gcc -dumpfullversion)"

# This tree's cudnn-frontend headers, for a BASELINE tree too (a `git archive` has no .deps).
frontend=$PWD/.deps/cudnn-frontend/include
configure() {  # source dir, build dir
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP8KIT_CUDA=ON -DCUDNN_FRONTEND_INCLUDE_DIR="$frontend" \
    -DPKG_CONFIG_EXECUTABLE="$pkg_config" -DCMAKE_LIBRARY_PATH="$lib/openblas-pthread" \
    -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$lib -Wl,-rpath-link,$lib/openblas-pthread" \
    ${cudnn_root:+-DCUDNN_ROOT="$cudnn_root"} ${nccl_root:+-DNCCL_ROOT="$nccl_root"}
}
build=build-device
start=$(date +%s)
if ! configure . $build >"$OUT/configure.log" 2>&1; then
  note "FAIL: configure (configure.log)"; tail -30 "$OUT/configure.log"; exit 1
fi
# The GPU targets first, so that a broken CPU test elsewhere cannot block them.
mode=${1:-}
targets="test_cuda fp8kit_cli"
[ "$mode" = sanitize ] && targets="test_cuda"
[ "$mode" = model ] && targets="$targets bench_cuda_seed_epoch bench_cuda_attention bench_cuda_linear bench_cuda_sdpa"
[ "$mode" = train ] && targets="all"
[ "$mode" = lm ] && targets="$targets bench_cuda_sdpa bench_cuda_lm_step"
[ "$mode" = infer ] && targets="$targets bench_cuda_gemv bench_cuda_decode_attention"
[ "$mode" = gemv ] && targets="test_cuda bench_cuda_gemv"
[ "$mode" = lab ] && targets="$targets bench_cuda_lab_mlp bench_cuda_lm_step"
[ "$mode" = gpt-layer ] && targets="test_cuda bench_cuda_gpt_layer"
if ! cmake --build $build -j16 --target $targets >"$OUT/build.log" 2>&1; then
  note "FAIL: build (build.log)"; grep -m20 -B2 -A8 "error" "$OUT/build.log" | head -80; exit 1
fi
note "build: $(( $(date +%s) - start )) s"

export LD_LIBRARY_PATH=$runtime_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
cd $build
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
# The GPU time per kernel name in an ncu CSV (--metrics gpu__time_duration.sum --csv --page raw) of
# `steps` steps: the total per step, then the 40 largest.
# BASELINE=<source dir> (e.g. a `git archive` of the commit before a change, untracked in this tree):
# benchmark $1 built from it as well, and the two run in turns, twice (arguments $2, the output lines
# matching $3 into the summary), for a ratio in one call. Runs in the build folder.
baseline_rounds() {  # target, arguments, line filter
  [ -n "${BASELINE:-}" ] || return 0
  if ! (configure "../$BASELINE" "../$BASELINE/build-device" &&
        cmake --build "../$BASELINE/build-device" -j16 --target "$1") >"$OUT/baseline-build.log" 2>&1; then
    note "FAIL: baseline build (baseline-build.log)"
    return 0
  fi
  for round in 1 2; do
    note "baseline ($BASELINE), round $round:"
    "../$BASELINE/build-device/bench/$1" $2 2>&1 | grep -E "$3" | tee -a "$summary"
    note "this tree, round $round:"
    "./bench/$1" $2 2>&1 | grep -E "$3" | tee -a "$summary"
  done
}
ncu_summary() {  # csv, steps ("first": the launches up to the first step's AdamW, inclusive)
  python3 - "$1" "$2" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 5]
first = sys.argv[2] == "first"
steps = 1 if first else int(sys.argv[2])
head = rows[0]; name = head.index("Kernel Name"); t = head.index("gpu__time_duration.sum")
total = collections.Counter(); count = collections.Counter(); adam = False; launches = 0
for r in rows[2:]:
    is_adam = "adam" in r[name].lower()
    if first and adam and not is_adam: break
    adam = adam or is_adam
    launches += 1
    try: total[r[name][:90]] += float(r[t].replace(",", "")); count[r[name][:90]] += 1  # ncu writes 53,600
    except ValueError: pass
all_ns = sum(total.values())
print(f"ncu: {all_ns / steps / 1e6:.2f} ms of kernels per step ({launches} launches in {steps} steps)")
for k, v in total.most_common(40): print(f"{v / steps / 1e6:8.3f} ms/step {count[k] // steps:4d}x {k}")
PY
}
filter=${1:+-R $1}
if [ "$mode" = train ]; then
  vocab=""
  [ -f ../data/imdb-vocab.txt ] && vocab="--vocab ../data/imdb-vocab.txt"
  train_seed() {  # the IMDB run of seed $1 on the GPU, its table and epoch events into the summary
    local start=$(date +%s)
    OMP_WAIT_POLICY=passive timeout 200 ./fp8kit train --device cuda --compare bf16,fp8 --epochs 3 --seed $1 \
      --data ../data/aclImdb_v1.tar.gz $vocab --out "$OUT/gpu-seed$1" >"$OUT/train-seed$1.log" 2>&1 ||
      note "FAIL: train seed $1 (train-seed$1.log)"
    note "seed $1 ($(( $(date +%s) - start )) s):"
    grep -A3 "^precision " "$OUT/train-seed$1.log" | tee -a "$summary"
    grep '"event":"epoch"' "$OUT/gpu-seed$1/metrics.jsonl" >>"$summary"
  }
  train_seed 1
  start=$(date +%s)
  timeout 200 ctest -L gpu -V -j4 --timeout 180 >"$OUT/gpu-tests.log" 2>&1
  note "gpu tests ($(( $(date +%s) - start )) s): $(grep -E 'tests passed|tests failed' "$OUT/gpu-tests.log")"
  grep -E "^\s*[0-9]+ - .*(Failed|Timeout|Exception|Not Run)|^[0-9]+: .*(Failure|error:)" "$OUT/gpu-tests.log" | head -40 | tee -a "$summary"
  grep -E "epoch loss|GPU resumed|GPU's weights" "$OUT/gpu-tests.log" | sed 's/^[0-9]*: //' | tee -a "$summary"
  start=$(date +%s)
  timeout 120 ctest -LE gpu -j16 --timeout 100 >"$OUT/cpu-tests.log" 2>&1
  note "cpu tests ($(( $(date +%s) - start )) s): $(grep -E 'tests passed|tests failed' "$OUT/cpu-tests.log")"
  grep -E "^\s*[0-9]+ - .*(Failed|Timeout|Exception|Not Run)" "$OUT/cpu-tests.log" | head -20 | tee -a "$summary"
  ./fp8kit device >>"$summary" 2>&1
  timeout 60 ./fp8kit bench gemm >"$OUT/bench-gemm.txt" 2>&1 || note "FAIL: bench gemm"
  cat "$OUT/bench-gemm.txt" >>"$summary"
  for seed in 2 3; do
    if [ $(( $(date +%s) - begin )) -lt 440 ]; then train_seed $seed; else note "seed $seed: skipped (time)"; fi
  done
  cat "$summary"
  exit 0
fi
if [ "$mode" = lm ]; then
  start=$(date +%s)
  timeout 240 ctest -L gpu -V -j4 --timeout 200 ${2:+-R $2} >"$OUT/gpu-tests.log" 2>&1
  note "gpu tests ($(( $(date +%s) - start )) s): $(grep -E 'tests passed|tests failed' "$OUT/gpu-tests.log")"
  grep -E "^\s*[0-9]+ - .*(Failed|Timeout|Exception|Not Run)|^[0-9]+: .*(Failure|error:)" "$OUT/gpu-tests.log" | head -40 | tee -a "$summary"
  grep -E "losses .*gradients .*update" "$OUT/gpu-tests.log" | sed 's/^[0-9]*: //' | tee -a "$summary"
  ./bench/bench_cuda_sdpa >"$OUT/bench-sdpa.txt" 2>&1 || note "FAIL: bench_cuda_sdpa"
  grep -E "^sdpa" "$OUT/bench-sdpa.txt" >>"$summary"
  note "sdpa, FP8KIT_SDPA_DETERMINISTIC=0 (cuDNN's default backward, as PyTorch runs it):"
  FP8KIT_SDPA_DETERMINISTIC=0 ./bench/bench_cuda_sdpa --benchmark_filter=backward 2>&1 | grep -E "^sdpa" >>"$summary"
  # LM_BENCH: "preset:batch:seq[:memory]" configurations of bench_cuda_lm_step (empty: none).
  # A fourth field chooses the memory options: chunked (default), whole or recompute; a fifth the
  # precisions (bench_cuda_lm_step's: both (default), bf16, fp8, fp8-block or fp8-attention).
  for c in ${LM_BENCH-gpt2-small:16:1024 1b:2:2048}; do
    IFS=: read -r preset batch seq memory which <<<"$c"
    timeout 200 ./bench/bench_cuda_lm_step "$preset" "$batch" "$seq" 5 8192 "${which:-both}" 50 "${memory:-chunked}" 2>&1 |
      tee -a "$summary"
  done
  # PROFILE="preset:batch:seq:precision ...": per-kernel GPU times (ncu) of one precision's first step
  # (eager, before the graph; launches up to its AdamW), summed by kernel name, the 40 largest.
  # PROFILE_LAUNCHES (default 2500) must cover a step: ncu replays each launch, about 0.1 s apiece.
  for profile in ${PROFILE:-}; do
    IFS=: read -r preset batch seq precision <<<"$profile"
    note "profile $profile:"
    timeout 330 "${ncu:-ncu}" --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
      --launch-count "${PROFILE_LAUNCHES:-2500}" \
      ./bench/bench_cuda_lm_step "$preset" "$batch" "$seq" 1 8192 "$precision" 0 >"$OUT/ncu.csv" 2>"$OUT/ncu.log" ||
      note "FAIL: ncu (ncu.log)"
    ncu_summary "$OUT/ncu.csv" first | tee -a "$summary"
  done
  # LM_QUALITY=1 (with the data): the 25m model on IMDB text for 3 seeds in bf16 and each FP8 recipe
  # (LM_RUNS, "precision:recipe[:formats] ..."; LM_STEPS steps each, the same data order per seed), then
  # `fp8kit lm compare`'s table and curves (lm-quality.svg).
  if [ "${LM_QUALITY:-0}" = 1 ] && [ -f ../data/aclImdb_v1.tar.gz ]; then
    runs=""
    mkdir -p "$OUT/quality"
    for seed in 1 2 3; do
      for run in ${LM_RUNS:-bf16:delayed fp8:delayed fp8:current fp8:block}; do
        IFS=: read -r p recipe formats <<<"$run"
        dir="$OUT/quality/$p-$recipe${formats:+-$formats}-seed$seed"
        OMP_WAIT_POLICY=passive timeout 120 ./fp8kit lm train --device cuda --config 25m --precision $p --recipe $recipe \
          --formats ${formats:-hybrid} \
          --steps ${LM_STEPS:-2000} --seq 256 --batch 32 --warmup 100 --eval-every 250 --eval-batches 40 --seed $seed \
          --data ../data/aclImdb_v1.tar.gz --tokenizer "$OUT/quality/tokenizer.json" --out "$dir" >"$dir.log" 2>&1 ||
          note "FAIL: $dir.log"
        note "$p $recipe ${formats:-hybrid} seed $seed: $(grep -E '^Validation' "$dir.log")"
        rm -rf "$dir"/checkpoint-* "$dir"/model-*
        runs="$runs $dir"
      done
    done
    ./fp8kit lm compare $runs --svg "$OUT/lm-quality.svg" 2>&1 | tee -a "$summary"
    cat "$summary"
    exit 0
  fi
  if [ -f ../data/aclImdb_v1.tar.gz ]; then
    for p in bf16 fp8; do
      start=$(date +%s)
      OMP_WAIT_POLICY=passive timeout 150 ./fp8kit lm train --device cuda --config 25m --precision $p \
        --steps ${LM_STEPS:-300} --seq 256 --batch 32 --warmup 30 --eval-batches 40 --data ../data/aclImdb_v1.tar.gz \
        --tokenizer "$OUT/lm/tokenizer.json" --out "$OUT/lm" >"$OUT/lm-$p.log" 2>&1 || note "FAIL: lm train $p (lm-$p.log)"
      note "lm train 25m $p ($(( $(date +%s) - start )) s): $(grep -E '^Validation' "$OUT/lm-$p.log")"
    done
  fi
  cat "$summary"
  exit 0
fi
if [ "$mode" = lab ]; then
  start=$(date +%s)
  if [ "${2:-}" != none ]; then
    timeout 300 ctest -L gpu -j4 --timeout 200 --output-on-failure ${2:+-R $2} >"$OUT/gpu-tests.log" 2>&1
    note "gpu tests ($(( $(date +%s) - start )) s): $(grep -E 'tests passed|tests failed' "$OUT/gpu-tests.log")"
    grep -E "^\s*[0-9]+ - .*(Failed|Timeout|Exception|Not Run)" "$OUT/gpu-tests.log" | head -20 | tee -a "$summary"
  fi
  if [ "${LAB_PAGE:-1}" = 1 ]; then
    timeout 300 ./fp8kit lab --device cuda --out "$OUT/lab" >"$OUT/lab.log" 2>&1 || note "FAIL: fp8kit lab (lab.log)"
    tail -3 "$OUT/lab.log" >>"$summary"
    for f in lab_training lab_inference; do [ -f "$OUT/lab/$f.csv" ] && cat "$OUT/lab/$f.csv" >>"$summary"; done
  fi
  timeout 200 ./bench/bench_cuda_lab_mlp >"$OUT/bench-lab-mlp.txt" 2>&1 || note "FAIL: bench_cuda_lab_mlp"
  cat "$OUT/bench-lab-mlp.txt" >>"$summary"
  # LAB_PROFILE=rows: every kernel launch of bench_cuda_lab_mlp at that size, in order (ncu), into ncu-lab.csv.
  if [ -n "${LAB_PROFILE:-}" ]; then
    timeout 300 "${ncu:-ncu}" --clock-control none --metrics gpu__time_duration.sum,dram__bytes.sum --csv --page raw \
      ./bench/bench_cuda_lab_mlp 1 "$LAB_PROFILE" >"$OUT/ncu-lab.csv" 2>"$OUT/ncu.log" || note "FAIL: ncu (ncu.log)"
  fi
  if [ "${LAB_PAGE:-1}" = 1 ]; then
    for p in "gpt2-small 16 1024 10 8192 fp8 50" "1b 4 2048 5 8192 fp8 50"; do
      timeout 150 ./bench/bench_cuda_lm_step $p 2>&1 | grep -E "health|rror" >>"$summary"
    done
  fi
  cat "$summary"
  exit 0
fi
if [ "$mode" = gpt-layer ]; then
  start=$(date +%s)
  regex=${2:-GptLayer|LlamaGpu|LayerNorm|layer_norm}
  if [ "$regex" != none ]; then
    timeout 300 ctest -L gpu -V -j4 --timeout 200 -R "$regex" >"$OUT/gpu-tests.log" 2>&1
    note "gpu tests ($(( $(date +%s) - start )) s): $(grep -E 'tests passed|tests failed' "$OUT/gpu-tests.log")"
    grep -E "^\s*[0-9]+ - .*(Failed|Timeout|Exception|Not Run)|^[0-9]+: .*(Failure|error:)" "$OUT/gpu-tests.log" | head -40 | tee -a "$summary"
    grep -E "gpt_layer [a-z0-9]+: y " "$OUT/gpu-tests.log" | sed 's/^[0-9]*: //' | tee -a "$summary"
  fi
  timeout 300 ./bench/bench_cuda_gpt_layer ${GPT_LAYER_BENCH:-} >"$OUT/bench-gpt-layer.txt" 2>&1 ||
    note "FAIL: bench_cuda_gpt_layer (bench-gpt-layer.txt)"
  grep -E "^gpt_layer|rror" "$OUT/bench-gpt-layer.txt" | tee -a "$summary"
  baseline_rounds bench_cuda_gpt_layer "${GPT_LAYER_BENCH:-}" "forward \+ backward|rror"
  # GPT_LAYER_PROFILE="bf16 fp8": per-kernel GPU times (ncu) of each precision's steps at the default
  # configuration (6 steps: the eager one, the captured one, 4 replays), summed by kernel name.
  for precision in ${GPT_LAYER_PROFILE:-}; do
    note "profile gpt_layer $precision:"
    timeout 300 "${ncu:-ncu}" --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
      ./bench/bench_cuda_gpt_layer 1 4096 32 2048 8 16384 "$precision" 0 >"$OUT/ncu-$precision.csv" 2>"$OUT/ncu.log" ||
      note "FAIL: ncu (ncu.log)"
    ncu_summary "$OUT/ncu-$precision.csv" 6 | tee -a "$summary"
  done
  cat "$summary"
  exit 0
fi
if [ "$mode" = infer ]; then
  start=$(date +%s)
  if [ "${2:-}" != none ]; then
    timeout 240 ctest -L gpu -V -j4 --timeout 200 ${2:+-R $2} >"$OUT/gpu-tests.log" 2>&1
    note "gpu tests ($(( $(date +%s) - start )) s): $(grep -E 'tests passed|tests failed' "$OUT/gpu-tests.log")"
    grep -E "^\s*[0-9]+ - .*(Failed|Timeout|Exception|Not Run)|^[0-9]+: .*(Failure|error:)" "$OUT/gpu-tests.log" | head -40 | tee -a "$summary"
  fi
  for b in bench/bench_cuda_gemv bench/bench_cuda_decode_attention; do
    timeout 120 $b >"$OUT/$(basename $b).txt" 2>&1 || note "FAIL: $b"
    grep -E "copy D2D|m=1 |GB/s|error" "$OUT/$(basename $b).txt" | head -20 >>"$summary"
  done
  if [ "${INFER_BENCH:-}" != 0 ]; then
    timeout 400 ./fp8kit lm bench --device cuda ${INFER_BENCH:-} 2>&1 | tee -a "$summary"
  fi
  # INFER_PROFILE="lm bench arguments": GPU time per kernel name of that run (nsys, else ncu), the 25 largest.
  if [ -n "${INFER_PROFILE:-}" ]; then
    nsys=$(command -v nsys || ls /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/bin/nsys 2>/dev/null | head -1)
    if [ -n "$nsys" ]; then
      timeout 300 "$nsys" profile --cuda-graph-trace=node -o /tmp/infer-profile --force-overwrite true \
        ./fp8kit lm bench --device cuda $INFER_PROFILE >"$OUT/profile.log" 2>&1
      "$nsys" stats --report cuda_gpu_kern_sum --format csv /tmp/infer-profile.nsys-rep 2>/dev/null |
        python3 -c 'import csv,sys
rows=[r for r in csv.reader(sys.stdin) if len(r)>8]
h=rows[0]; t=h.index("Total Time (ns)"); n=h.index("Instances"); k=h.index("Name")
for r in rows[1:26]: print(f"{float(r[t])/1e6:9.3f} ms {int(r[n]):6d}x {r[k][:100]}")' | tee -a "$summary"
    elif [ -n "$ncu" ]; then
      timeout 400 "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
        ./fp8kit lm bench --device cuda $INFER_PROFILE >"$OUT/ncu.csv" 2>"$OUT/ncu.log" || note "FAIL: ncu (ncu.log)"
      python3 -c 'import csv,sys,collections
rows=[r for r in csv.reader(open(sys.argv[1])) if len(r)>5]
h=rows[0]; k=h.index("Kernel Name"); t=h.index("gpu__time_duration.sum")
tot=collections.Counter(); cnt=collections.Counter()
for r in rows[2:]:
  try: tot[r[k][:100]]+=float(r[t]); cnt[r[k][:100]]+=1
  except ValueError: pass
for name,v in tot.most_common(25): print(f"{v/1e6:9.3f} ms {cnt[name]:6d}x {name}")' "$OUT/ncu.csv" | tee -a "$summary"
    else
      note "no nsys or ncu for INFER_PROFILE"
    fi
  fi
  if [ "${INFER_QUALITY:-0}" = 1 ] && [ -f ../data/aclImdb_v1.tar.gz ]; then
    q=/tmp/quality data="--data ../data/aclImdb_v1.tar.gz"
    mkdir -p $q
    OMP_WAIT_POLICY=passive timeout 200 ./fp8kit lm train --device cuda --config 25m --precision bf16 \
      --steps ${LM_STEPS:-2000} --seq 256 --batch 32 --warmup 100 --eval-batches 40 --seed 1 $data \
      --out $q/run >"$OUT/quality-train.log" 2>&1 || note "FAIL: lm train (quality-train.log)"
    note "trained: $(grep -E '^Validation' "$OUT/quality-train.log")"
    m=$q/run/model-bf16
    ./fp8kit lm calibrate --device cuda --model $m --out $q/calibration.safetensors --prompts 512 $data 2>&1 | tee -a "$summary"
    for w in tensor channel; do
      ./fp8kit lm pack --model $m --out $q/fp8-$w --calibration $q/calibration.safetensors --weights $w \
        --activations static --kv-cache fp8 2>&1 | tail -3 | tee -a "$summary"
    done
    ev() { ./fp8kit lm eval --device cuda --seq 256 --batch 16 --batches 40 $data "$@" 2>&1 | tail -1 | tee -a "$summary"; }
    ev --model $m --runtime
    ev --model $m --runtime --kv-cache fp8
    ev --model $q/fp8-tensor
    ev --model $q/fp8-channel
    ev --model $q/fp8-tensor --kv-cache fp8
    ev --model $q/fp8-channel --kv-cache fp8
    ev --model $q/fp8-tensor --activations dynamic
    for w in block group; do  # finer scales: 128 x 128 or 1 x 128 weights, activations per 1 x 128 group
      ./fp8kit lm pack --model $m --out $q/fp8-$w --weights $w --group 128 --activations dynamic 2>&1 | tail -1 >/dev/null
    done
    agree() { ./fp8kit lm agreement --device cuda --reference $m $data "$@" 2>&1 | tail -1 | tee -a "$summary"; }
    agree --model $q/fp8-tensor
    agree --model $q/fp8-channel
    agree --model $q/fp8-tensor --kv-cache fp8
    agree --model $q/fp8-channel --activations dynamic
    agree --model $q/fp8-block
    agree --model $q/fp8-group
    agree --model $m --kv-cache fp8
    du -sb $m $q/fp8-tensor $q/fp8-channel | tee -a "$summary"
  fi
  cat "$summary"
  exit 0
fi
if [ "$mode" = gemv ]; then
  start=$(date +%s)
  timeout 240 ctest -L gpu -j4 --timeout 200 -R "Gemv|Gemm|Matmul|matmul" --output-on-failure >"$OUT/gpu-tests.log" 2>&1
  note "gpu tests ($(( $(date +%s) - start )) s): $(grep -E 'tests passed|tests failed' "$OUT/gpu-tests.log")"
  grep -E "^\s*[0-9]+ - .*(Failed|Timeout|Exception|Not Run)|Failure|gpu .* cpu .* tolerance" "$OUT/gpu-tests.log" | head -20 | tee -a "$summary"
  timeout 300 ./bench/bench_cuda_gemv >"$OUT/bench-gemv.txt" 2>&1 || note "FAIL: bench_cuda_gemv (bench-gemv.txt)"
  grep -E "copy D2D|m=1 |error" "$OUT/bench-gemv.txt" | tee -a "$summary"
  cat "$summary"
  exit 0
fi
if [ "$mode" = sanitize ]; then
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  gtest_filter=${2:+--gtest_filter=*$2*}
  # memcheck: the tests provoke out-of-memory and invalid-device errors on purpose (and check our
  # messages), so failed API calls are not reports; memory errors and leaks are.
  # racecheck: cuBLASLt's Hopper kernels (nvjet_*) synchronize through mbarriers, which racecheck
  # does not model (false WAR hazards), and leaving them uninstrumented (--kernel-name-exclude) makes
  # the tool fault. So every kernel is checked, and a hazard fails the run unless both of its
  # accesses are in cuBLASLt's kernels. The slowest tool: 6 gtest shards beside the others.
  run_tool() {  # tool, log name, shard index or "", extra flags...
    local tool=$1 name=$2 shard=$3; shift 3
    GTEST_TOTAL_SHARDS=${shard:+6} GTEST_SHARD_INDEX=$shard timeout ${SANITIZE_TIMEOUT:-400} "$sanitizer" \
      --tool $tool --error-exitcode 86 "$@" ./tests/test_cuda $gtest_filter >"$OUT/$name.log" 2>&1
    echo $? >"$OUT/$name.rc"
  }
  run_tool memcheck memcheck "" --print-limit 20 --leak-check full --report-api-errors no &
  run_tool synccheck synccheck "" --print-limit 20 &
  for i in 0 1 2 3 4 5; do
    # The autotuning test times dozens of cuBLASLt algorithms per shape: racecheck finds 265,000
    # hazard accesses there, all in nvjet kernels, and it alone outlasts the call; our code is in
    # the other GEMM tests.
    GTEST_FILTER="${2:+*$2*}-CudaGemm.AutotunedGemmsStayWithinTolerancesAndAreCached" \
      run_tool racecheck racecheck-$i $i --racecheck-report hazard --print-limit 0 --show-backtrace no &
  done
  wait
  for name in memcheck synccheck racecheck-{0..5}; do
    log="$OUT/$name.log" rc=$(cat "$OUT/$name.rc")
    if [ "${name%-*}" = racecheck ]; then
      # Each hazard names its two accesses' kernels ("Read Thread (x,y,z) at KERNEL+0x..."); ours are
      # any but cuBLASLt's nvjet_*. The run is clean when the tests passed and every access is theirs.
      accesses=$(grep -E "^=========  +(Read|Write) Thread .* at [^ ]+\+0x" "$log")
      ours=$(echo "$accesses" | grep -v " at nvjet_" | grep -c " at ")
      if [ "$rc" = 86 ] && [ -n "$accesses" ] && [ "$ours" = 0 ] && grep -q '^\[  PASSED  \]' "$log" &&
          ! grep -q '^\[  FAILED  \]' "$log"; then
        rc="0 (hazards only in cuBLASLt's mbarrier kernels: $(echo "$accesses" | wc -l) accesses)"
      fi
      echo "$accesses" | grep -v " at nvjet_" | grep -o " at [^ ]*+0x" | sort | uniq -c | head -10 | tee -a "$summary"
    else
      grep -m10 -E "^=========  *(Invalid|Race|Barrier|Leaked|Program hit|Error|Uninit|Potential|Internal)" "$log" | tee -a "$summary"
    fi
    note "$name: exit $rc, $(grep -m1 -E '^\[  PASSED  \]' "$log") $(grep -m1 -E '^\[  FAILED  \]' "$log") $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log")"
    rm -f "$OUT/$name.rc"
  done
  cat "$OUT"/racecheck-*.log | gzip >"$OUT/racecheck.log.gz" && rm -f "$OUT"/racecheck-*.log  # the tool's 8-file limit
  cat "$summary"
  exit 0
fi
[ "$mode" = model ] && filter=""
start=$(date +%s)
# TESTS=0 (model mode): benchmarks only, for a second look at a tree whose tests have passed.
[ "${TESTS:-1}" = 0 ] && filter="-R ^$"
ctest -L gpu -V -j4 --timeout 300 $filter >"$OUT/gpu-tests.log" 2>&1
note "gpu tests ($(( $(date +%s) - start )) s): $(grep -E 'tests passed|tests failed' "$OUT/gpu-tests.log")"
grep -E "^\s*[0-9]+ - .*(Failed|Timeout|Exception|Not Run)|^[0-9]+: .*(Failure|error:|mismatch|gpu 0x)" "$OUT/gpu-tests.log" | head -40 | tee -a "$summary"
grep -o "measured error.*" "$OUT/gpu-tests.log" | sort -u >"$OUT/gemm-errors.txt"
./fp8kit device >>"$summary" 2>&1
if [ "$mode" = model ]; then
  grep -o "measured error.*\|[a-z0-9_]* step [0-9]:.*\|attention .*measured.*" "$OUT/gpu-tests.log" | sort -u >"$OUT/model-errors.txt"
  ./bench/bench_cuda_seed_epoch >"$OUT/bench-seed-epoch.txt" 2>&1 || note "FAIL: bench_cuda_seed_epoch"
  cat "$OUT/bench-seed-epoch.txt" >>"$summary"
  baseline_rounds bench_cuda_seed_epoch "" .
  ./bench/bench_cuda_attention --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
    >"$OUT/bench-attention.txt" 2>&1 || note "FAIL: bench_cuda_attention"
  grep -E "median" "$OUT/bench-attention.txt" >>"$summary"
  ./bench/bench_cuda_linear --benchmark_repetitions=3 --benchmark_report_aggregates_only=true 2>&1 |
    grep -E "median" >>"$summary" || note "FAIL: bench_cuda_linear"
  ./bench/bench_cuda_sdpa >"$OUT/bench-sdpa.txt" 2>&1 || note "FAIL: bench_cuda_sdpa"
  grep -E "^sdpa" "$OUT/bench-sdpa.txt" >>"$summary"
  note "sdpa, FP8KIT_SDPA_DETERMINISTIC=0 (cuDNN's default backward, as PyTorch runs it):"
  FP8KIT_SDPA_DETERMINISTIC=0 ./bench/bench_cuda_sdpa --benchmark_filter=backward 2>&1 | grep -E "^sdpa" >>"$summary"
  # With NCU=1: per-kernel GPU times of one step (4 replays of a 1-step epoch), for finding slow kernels
  # (with BASELINE set, of both trees: scripts/ncu_compare.py NEW BASELINE lists the differences).
  [ "${NCU:-0}" = 1 ] && for p in bf16 "fp8 (te"; do
    for tree in . ${BASELINE:+"../$BASELINE/build-device"}; do
      name=ncu-${p%% *}$([ "$tree" = . ] || echo -baseline).txt
      timeout 120 "${ncu:-ncu}" --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
        "$tree/bench/bench_cuda_seed_epoch" 1 "$p" >"$OUT/$name" 2>&1 || note "ncu $p ($tree): failed or timed out"
    done
  done
  cat "$summary"
  exit 0
fi
./fp8kit bench gemm >"$OUT/bench-gemm.txt" 2>&1 || note "FAIL: bench gemm"
cat "$OUT/bench-gemm.txt" >>"$summary"
./fp8kit bench quantize >"$OUT/bench-quantize.txt" 2>&1 || note "FAIL: bench quantize"
cat "$OUT/bench-quantize.txt" >>"$summary"
if [ -z "${1:-}" ]; then
  # The CPU suite last, bounded: it must not eat the GPU results' time.
  start=$(date +%s)
  (timeout 150 cmake --build . -j16 -- -k 0 >/tmp/build-all.log 2>&1; timeout 120 ctest -LE gpu -j16 --timeout 100 >"$OUT/cpu-tests.log" 2>&1)
  note "cpu tests ($(( $(date +%s) - start )) s): $(grep -E 'tests passed|tests failed' "$OUT/cpu-tests.log")"
  grep -E "^\s*[0-9]+ - .*(Failed|Timeout|Exception|Not Run)" "$OUT/cpu-tests.log" | head -10 | tee -a "$summary"
fi
cat "$summary"
