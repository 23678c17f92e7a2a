#!/usr/bin/env bash
# scripts/gpu_check.sh — the ONE prepared script for a machine with a GPU (docs/cuda.md):
# run the gpu tests, time ResNet50 and BERT-base training steps on the GPU beside the same
# models in the machine's PyTorch, profile one step of each, run DDP on the GPU, and print a
# short table of ratios. Sized for a 15-minute GPU lease that must fit a rerun: every stage
# runs under `timeout`, and a stage that runs out of time or fails is reported and the
# script goes on with what it can still do.
#
#   scripts/gpu_bundle.sh               # here, on the CPU machine: makes gpu-bundle/
#   scripts/gpu_check.sh                # there: writes under $OUT if set, else out/gpu_check
#   ITERS=5 PYTHON=python3 DTYPES="fp32 bf16 tf32" BUDGET=400 scripts/gpu_check.sh
#
# The programs come from gpu-bundle/ (Note [GPU bundle] in scripts/gpu_bundle.sh): unpacked
# to /tmp, every library checked with ldd (ldd.txt), cuDNN/NCCL/cuBLAS taken from the
# PyTorch wheels. Without a bundle, or with GPU_CHECK_BUILD=1, it configures and builds
# (needs lockstep's Debian packages, which a bare GPU machine lacks).
# Stages (limits in seconds): nvidia-smi (20); unpack (60) or configure (60) + build (240);
# the gpu tests (150: each test_cuda case in its own process, 4 at a time, gpu_tests.txt;
# or ctest -L gpu when built here) and test_distributed's NCCL case (20); per model
# (ResNet50 b64 224, BERT-base b32x128) and precision (fp32 with TF32 off on both sides,
# bf16 autocast, tf32) bench_step --device cuda and bench/torch_step_cuda.py (45 each); one
# profiled step per model under CUDA_LAUNCH_BLOCKING=1 (40); bench_ddp over NCCL at world 1
# (45) and over Gloo with 2 ranks on the one GPU (60). Over everything a budget (BUDGET,
# default 465 s): a stage gets at most what is left of it, and one that would get under
# 15 s is skipped, so the script ends inside the budget whatever hangs.
# Output in $OUT: gpu_check.log (everything), nvidia-smi.txt, ldd.txt, gpu_tests.txt,
# failed_cases.log, *.jsonl (each benchmark's JSON lines), profile_*.txt, summary.md (the
# table). Exit status: 0 if the programs and the gpu tests passed, 1 otherwise (the
# benchmarks only report).
# Read before: scripts/gpu_bundle.sh, bench/bench_step.cpp, bench/torch_step_cuda.py,
# tests/cuda/main.cpp.
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/out/gpu_check}
BUILD_DIR=${BUILD_DIR:-$ROOT/build-gpu}
JOBS=${JOBS:-16}
ITERS=${ITERS:-5}
WARMUP=${WARMUP:-2}
PYTHON=${PYTHON:-python3}
BUDGET=${BUDGET:-465}
mkdir -p "$OUT"
LOG=$OUT/gpu_check.log
: > "$LOG"
START=$SECONDS
status=0
skipped=()

say() { echo "[gpu_check +$((SECONDS - START))s] $*" | tee -a "$LOG"; }
# stage NAME SECONDS CMD...: runs CMD under timeout, output to the log; returns its status.
stage() {
  local name=$1 limit=$2
  shift 2
  local remain=$((BUDGET - (SECONDS - START)))
  if [ $remain -lt 15 ]; then
    say "stage $name: SKIPPED (${remain}s of the ${BUDGET}s budget left)"
    skipped+=("$name (out of time)")
    return 125
  fi
  [ "$limit" -gt $remain ] && limit=$remain
  say "stage $name (limit ${limit}s): $*"
  timeout --kill-after=10 "$limit" "$@" >> "$LOG" 2>&1
  local rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    say "stage $name: TIMED OUT after ${limit}s"
    skipped+=("$name (timed out)")
  elif [ $rc -ne 0 ]; then
    say "stage $name: FAILED (exit $rc)"
  else
    say "stage $name: ok"
  fi
  return $rc
}

# 0. The GPU.
if timeout 20 nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1; then
  say "GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)"
else
  say "nvidia-smi failed or is missing (see nvidia-smi.txt); continuing, the tests will tell"
fi

# 1. The programs: from the bundle made on the CPU machine (Note [GPU bundle] in
# scripts/gpu_bundle.sh), else configured and built here (GPU_CHECK_BUILD=1 forces that).
BUNDLE=${BUNDLE:-$ROOT/gpu-bundle}
built=0
bundled=0
if [ -f "$BUNDLE/bundle.tar.xz" ] && [ "${GPU_CHECK_BUILD:-0}" != "1" ]; then
  UNPACKED=${UNPACKED:-/tmp/lockstep-gpu-bundle}
  rm -rf "$UNPACKED" && mkdir -p "$UNPACKED"
  if stage unpack 60 tar -C "$UNPACKED" -xJf "$BUNDLE/bundle.tar.xz"; then
    bundled=1
    BIN=$UNPACKED/bin
    # cuDNN, NCCL and cuBLAS from the PyTorch wheels (site-packages/nvidia/*/lib).
    nvidia_dirs=$("$PYTHON" -c 'import site; print("\n".join(site.getsitepackages()))' 2> /dev/null |
      while read -r d; do [ -d "$d/nvidia" ] && find "$d/nvidia" -name 'lib*.so*' -printf '%h\n'; done | sort -u | tr '\n' ':')
    export LD_LIBRARY_PATH="$UNPACKED/lib:${nvidia_dirs}${LD_LIBRARY_PATH:-}"
    say "bundle: $(tr '\n' ';' < "$BUNDLE/MANIFEST")"
    now=$(scripts/gpu_bundle.sh --hash)
    if grep -q "^sources $now\$" "$BUNDLE/MANIFEST"; then
      say "bundle matches this tree's sources ($now)"
    else
      say "WARNING: the bundle is STALE (this tree's sources hash to $now); rerun scripts/gpu_bundle.sh, or GPU_CHECK_BUILD=1"
    fi
    say "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    # Every library and symbol every program needs must resolve (ldd -r: the machine's
    # NCCL or cuDNN may be older than the toolkit's we linked); libcublas is opened at
    # first use, so it is looked for by name.
    for p in "$BIN"/*; do ldd -r "$p" 2>&1 | sed "s|^|$(basename "$p"): |"; done > "$OUT/ldd.txt"
    for lib in libcublas.so.13 libcublasLt.so.13; do
      found=$(echo "$LD_LIBRARY_PATH" | tr ':' '\n' | while read -r d; do [ -n "$d" ] && [ -e "$d/$lib" ] && echo "$d/$lib"; done | head -1)
      echo "dlopen target $lib => ${found:-not found}" >> "$OUT/ldd.txt"
    done
    if grep -q -E "not found|undefined symbol" "$OUT/ldd.txt"; then
      say "ldd: MISSING: $(grep -E 'not found|undefined symbol' "$OUT/ldd.txt" | sort -u | head -20 | tr '\n' ';')"
      status=1
    else
      say "ldd: every library resolves (ldd.txt)"
      built=1
    fi
  fi
else
  BIN=$BUILD_DIR/bin
  launcher=()
  if command -v ccache > /dev/null; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  fi
  if stage configure 60 cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DLOCKSTEP_CUDA=ON "${launcher[@]}"; then
    if stage build 240 cmake --build "$BUILD_DIR" -j "$JOBS" --target test_cuda test_distributed bench_step bench_ddp lockstep-run; then
      built=1
    else
      # A partial build may still have produced the benchmark; the tests need test_cuda.
      stage build-bench 45 cmake --build "$BUILD_DIR" -j "$JOBS" --target bench_step || true
    fi
  fi
fi
[ $built -eq 1 ] || status=1

# 2. The gpu tests: each case of test_cuda alone (its own process, 60 s), 4 at a time, by
# its index in doctest's file order (names may hold doctest's filter characters); exit 77
# is a skip (Note [Skipping gpu tests]). Then the NCCL init case of test_distributed.
run_gpu_cases() {
  local n
  n=$("$BIN/test_cuda" --count | sed -n 's/.*unskipped test cases passing the current filters: \([0-9]*\).*/\1/p')
  mkdir -p "$OUT/cases"
  seq 1 "$n" | xargs -P 4 -I{} bash -c '
    timeout --kill-after=5 60 "$0" --order-by=file --first={} --last={} > "$1/cases/{}.log" 2>&1
    echo "{} $?" >> "$1/cases/status"' "$BIN/test_cuda" "$OUT"
  local failed=0 passed=0 skipped_cases=0 i rc name
  while read -r i rc; do
    name=$("$BIN/test_cuda" --order-by=file --first="$i" --last="$i" --list-test-cases --no-version | grep -v -E '^(=+|\[doctest\].*)$' | head -1)
    case $rc in
      0) passed=$((passed + 1)); echo "PASS    $name" ;;
      77) skipped_cases=$((skipped_cases + 1)); echo "SKIP    $name" ;;
      124|137) failed=$((failed + 1)); echo "TIMEOUT $name (cases/$i.log)" ;;
      *) failed=$((failed + 1)); echo "FAIL    $name (exit $rc, cases/$i.log)" ;;
    esac
  done < <(sort -n "$OUT/cases/status") > "$OUT/gpu_tests.txt"
  echo "test_cuda: $passed passed, $failed failed, $skipped_cases skipped of $n" | tee -a "$OUT/gpu_tests.txt"
  # Keep only the logs of the cases that did not pass (few files come back).
  grep -E '^(FAIL|TIMEOUT)' "$OUT/gpu_tests.txt" | sed 's/.*cases\/\([0-9]*\)\.log.*/\1/' | while read -r i; do
    { echo "=== case $i"; cat "$OUT/cases/$i.log"; } >> "$OUT/failed_cases.log"
  done
  rm -rf "$OUT/cases"
  [ "$failed" -eq 0 ] && [ "$skipped_cases" -eq 0 ]
}
if [ -x "$BIN/test_cuda" ]; then
  if [ $bundled -eq 1 ]; then
    export -f run_gpu_cases
    export BIN OUT
    stage gpu-tests 150 bash -c run_gpu_cases || status=1
    cat "$OUT/gpu_tests.txt" >> "$LOG" 2> /dev/null
  else
    if ! stage ctest-gpu 100 ctest --test-dir "$BUILD_DIR" -L gpu -j 8 --timeout 60 --output-on-failure; then
      status=1
    fi
    grep -E "tests passed|tests failed|Skipped|\*\*\*Failed|Timeout" "$LOG" | tail -25 > "$OUT/ctest.log"
  fi
  # The NCCL init test of test_distributed (a CPU-tensor allreduce through NCCL).
  stage nccl-init 20 "$BIN/test_distributed" "-tc=init_process_group*nccl*" || status=1
else
  say "skipped: the gpu tests (test_cuda was not built)"
  skipped+=("gpu tests (not built)")
fi

# 3. Training steps: lockstep then PyTorch, per model and precision: fp32 (no TF32 on
# either side), tf32 (LOCKSTEP_CUDA_TF32=1; PyTorch's allow_tf32 on), bf16 (autocast).
# Then one profiled lockstep step per model with CUDA_LAUNCH_BLOCKING=1, so that each op's
# host-timed scope holds its kernels' time (the per-op table, profile_*.txt).
bench_pair() {
  local name=$1 dt=$2
  shift 2
  local args=("$@") env=() amp=off
  [ "$dt" = tf32 ] && env=(LOCKSTEP_CUDA_TF32=1)
  [ "$dt" = bf16 ] && amp=bf16
  if [ -x "$BIN/bench_step" ]; then
    stage "lockstep-$name-$dt" 45 env "${env[@]}" bash -c "'$BIN/bench_step' --device cuda --amp $amp ${args[*]} --iters $ITERS --warmup $WARMUP > '$OUT/lockstep_${name}_$dt.jsonl'" || true
  else
    skipped+=("lockstep $name $dt (bench_step not built)")
  fi
  stage "pytorch-$name-$dt" 45 bash -c "$PYTHON '$ROOT/bench/torch_step_cuda.py' ${args[*]} --dtype $dt --iters $ITERS --warmup $WARMUP > '$OUT/pytorch_${name}_$dt.jsonl'" || true
}
RESNET=(--model resnet50 --batch 64 --image 224)
BERT=(--model bert --batch 32 --seq 128)
for dt in ${DTYPES:-fp32 bf16 tf32}; do
  bench_pair resnet50 "$dt" "${RESNET[@]}"
  bench_pair bert "$dt" "${BERT[@]}"
done
if [ -x "$BIN/bench_step" ]; then
  for m in resnet50 bert; do
    if [ $m = resnet50 ]; then args=("${RESNET[@]}"); else args=("${BERT[@]}"); fi
    stage "profile-$m" 40 bash -c "CUDA_LAUNCH_BLOCKING=1 '$BIN/bench_step' --device cuda ${args[*]} --iters 2 --warmup 1 --profile 1 > /dev/null 2> '$OUT/profile_$m.txt'" || true
  done
fi

# 4. DDP: over NCCL at world size 1 (the reducer's device path end to end), and 2 ranks on
# the one GPU over Gloo with CUDA tensors (lockstep-run starts them).
if [ -x "$BIN/bench_ddp" ]; then
  stage ddp-nccl 45 bash -c "'$BIN/bench_ddp' --backend nccl --model resnet50 --batch 32 --image 224 --iters 3 --warmup 1 > '$OUT/lockstep_ddp_nccl.jsonl'" || true
  stage ddp-gloo-cuda 60 bash -c "'$BIN/lockstep-run' --nproc-per-node 2 -- '$BIN/bench_ddp' --backend gloo --device cuda --model resnet50 --batch 16 --image 224 --iters 3 --warmup 1 > '$OUT/lockstep_ddp_gloo_cuda.jsonl'" || true
fi

# 5. The table (medians; ratio = PyTorch ms / lockstep ms, > 1 means lockstep is faster).
"$PYTHON" - "$OUT" << 'EOF' | tee "$OUT/summary.md" | tee -a "$LOG"
import json, os, sys
out = sys.argv[1]
def summary(name):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return None
    rows = []
    for line in open(path):
        line = line.strip()
        if line.startswith("[rank"):
            line = line.split("] ", 1)[-1]
        if line.startswith("{"):
            rows.append(json.loads(line))
    rows = [r for r in rows if r.get("summary")]
    return rows[-1] if rows else None
print("| model | precision | lockstep step ms | PyTorch step ms | PyTorch / lockstep | lockstep fwd/bwd/opt ms | PyTorch fwd/bwd/opt ms | lockstep / PyTorch peak MB |")
print("|---|---|---|---|---|---|---|---|")
for name, label in (("resnet50", "ResNet50 b64 224"), ("bert", "BERT-base b32x128")):
    for dt in ("fp32", "tf32", "bf16"):
        l, t = summary(f"lockstep_{name}_{dt}.jsonl"), summary(f"pytorch_{name}_{dt}.jsonl")
        if not l and not t:
            continue
        f = lambda r, k: f"{r[k]:.1f}" if r and k in r else "-"
        ratio = f"{t['step_ms'] / l['step_ms']:.2f}" if l and t else "-"
        parts = lambda r: "/".join(f(r, k) for k in ("fwd_ms", "bwd_ms", "opt_ms")) if r else "-"
        print(f"| {label} | {dt} | {f(l, 'step_ms')} | {f(t, 'step_ms')} | {ratio} | {parts(l)} | {parts(t)} | {f(l, 'cuda_peak_mb')} / {f(t, 'cuda_peak_mb')} |")
for name, label in (("lockstep_ddp_nccl.jsonl", "DDP over NCCL, world 1, ResNet50 b32"),
                    ("lockstep_ddp_gloo_cuda.jsonl", "DDP over Gloo, 2 ranks on one GPU, ResNet50 b16")):
    d = summary(name)
    if d:
        print(f"\n{label}: iter {d['iter_ms']:.1f} ms, comm_wait {d['comm_wait_ms']:.1f} ms, "
              f"replicas_equal {d['replicas_equal']}, cuda_peak_mb {d.get('cuda_peak_mb', '-')}")
t = summary("pytorch_resnet50_fp32.jsonl") or summary("pytorch_bert_fp32.jsonl")
if t:
    print(f"\nPyTorch {t['torch']} on {t['gpu']}")
EOF

say "total $((SECONDS - START)) s; exit status $status"
if [ ${#skipped[@]} -gt 0 ]; then
  for s in "${skipped[@]}"; do say "skipped: $s"; done
fi
exit $status
