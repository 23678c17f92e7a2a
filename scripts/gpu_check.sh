#!/usr/bin/env bash
# scripts/gpu_check.sh — the ONE prepared script for a machine with a GPU (issue #8):
# build lockstep with CUDA, run the gpu-labelled tests, time ResNet50 and BERT-base
# training steps on the GPU beside the same models in the machine's PyTorch, print a
# short table of ratios. Sized for < 8 minutes on 16 cores so it can be rerun inside a
# 15-minute GPU slot: every stage runs under `timeout`, and a stage that runs out of
# time or fails is reported and the script goes on with what it can still do.
#
#   scripts/gpu_check.sh                 # writes under $OUT if set, else out/gpu_check
#   BUILD_DIR=build-gpu JOBS=16 ITERS=5 PYTHON=python3 GPU_CHECK_BF16=1 scripts/gpu_check.sh
#
# Stages (limits in seconds): nvidia-smi (20), configure (60), build test_cuda +
# test_distributed + bench_step + bench_ddp (240), ctest -L gpu -j 8 (100), then per
# model (resnet50 b64 224, bert b32x128): bench_step --device cuda (50) and
# bench/torch_step_cuda.py (50); with GPU_CHECK_BF16=1 also PyTorch under bf16 autocast
# (lockstep's CUDA autocast is tested by ctest -L gpu, test_cuda_autocast.cpp, but not timed
# here, so that row has no lockstep number). Finally bench_ddp
# --backend nccl, world 1 (45). Over everything a budget (BUDGET, default 465 s): a stage
# gets at most what is left of it, and one that would get under 15 s is skipped, so the
# script ends inside 8 minutes whatever hangs. A rerun reuses BUILD_DIR (incremental).
# Output in $OUT: gpu_check.log (everything), nvidia-smi.txt, ctest.log, *.jsonl (each
# benchmark's JSON lines), summary.md (the table). Exit status: 0 if the build and the gpu
# tests passed, 1 otherwise (the benchmarks only report).
# Read before: bench/bench_step.cpp, bench/torch_step_cuda.py, tests/cuda/main.cpp.
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

# 1. Configure and build only what this script runs.
launcher=()
if command -v ccache > /dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
built=0
if stage configure 60 cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DLOCKSTEP_CUDA=ON "${launcher[@]}"; then
  if stage build 240 cmake --build "$BUILD_DIR" -j "$JOBS" --target test_cuda test_distributed bench_step bench_ddp; then
    built=1
  else
    # A partial build may still have produced the benchmark; the tests need test_cuda.
    stage build-bench 45 cmake --build "$BUILD_DIR" -j "$JOBS" --target bench_step || true
  fi
fi
[ $built -eq 1 ] || status=1
BIN=$BUILD_DIR/bin

# 2. The gpu-labelled tests (each doctest case is its own CTest test and process).
if [ -x "$BIN/test_cuda" ]; then
  if ! stage ctest-gpu 100 ctest --test-dir "$BUILD_DIR" -L gpu -j 8 --timeout 60 --output-on-failure; then
    status=1
  fi
  grep -E "tests passed|tests failed|Skipped|\*\*\*Failed|Timeout" "$LOG" | tail -25 > "$OUT/ctest.log"
  # The NCCL init test of test_distributed (a CPU-tensor allreduce through NCCL).
  stage nccl-init 20 "$BIN/test_distributed" "-tc=init_process_group*nccl*" || status=1
else
  say "skipped: ctest -L gpu (test_cuda was not built)"
  skipped+=("gpu tests (not built)")
fi

# 3. Training steps: lockstep then PyTorch, per model.
bench_pair() {
  local name=$1
  shift
  local args=("$@")
  if [ -x "$BIN/bench_step" ]; then
    stage "lockstep-$name" 50 bash -c "'$BIN/bench_step' --device cuda ${args[*]} --iters $ITERS --warmup $WARMUP > '$OUT/lockstep_$name.jsonl'" || true
  else
    skipped+=("lockstep $name (bench_step not built)")
  fi
  local targs=("${args[@]}")
  stage "pytorch-$name" 50 bash -c "$PYTHON '$ROOT/bench/torch_step_cuda.py' ${targs[*]} --iters $ITERS --warmup $WARMUP > '$OUT/pytorch_$name.jsonl'" || true
  if [ "${GPU_CHECK_BF16:-0}" = "1" ]; then
    stage "pytorch-$name-bf16" 40 bash -c "$PYTHON '$ROOT/bench/torch_step_cuda.py' ${targs[*]} --dtype bf16 --iters $ITERS --warmup $WARMUP > '$OUT/pytorch_${name}_bf16.jsonl'" || true
  fi
}
bench_pair resnet50 --model resnet50 --batch 64 --image 224
bench_pair bert --model bert --batch 32 --seq 128
[ "${GPU_CHECK_BF16:-0}" = "1" ] || skipped+=("PyTorch bf16 autocast rows (set GPU_CHECK_BF16=1)")

# 4. DDP over NCCL, world size 1 (one GPU): the reducer's device path end to end.
if [ -x "$BIN/bench_ddp" ]; then
  stage ddp-nccl 45 bash -c "'$BIN/bench_ddp' --backend nccl --model resnet50 --batch 32 --image 224 --iters 3 --warmup 1 > '$OUT/lockstep_ddp_nccl.jsonl'" || true
fi

# 5. The table (medians; ratio = PyTorch ms / lockstep ms, > 1 means lockstep is faster).
"$PYTHON" - "$OUT" << 'EOF' | tee "$OUT/summary.md" | tee -a "$LOG"
import json, os, sys
out = sys.argv[1]
def summary(name):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return None
    rows = [json.loads(l) for l in open(path) if l.strip().startswith("{")]
    rows = [r for r in rows if r.get("summary")]
    return rows[-1] if rows else None
print("| model | lockstep step ms | PyTorch step ms | PyTorch / lockstep | lockstep fwd/bwd/opt ms | PyTorch fwd/bwd/opt ms | lockstep / PyTorch peak MB |")
print("|---|---|---|---|---|---|---|")
for name, label in (("resnet50", "ResNet50 b64 224 fp32"), ("bert", "BERT-base b32x128 fp32")):
    l, t = summary(f"lockstep_{name}.jsonl"), summary(f"pytorch_{name}.jsonl")
    f = lambda r, k: f"{r[k]:.1f}" if r and k in r else "-"
    ratio = f"{t['step_ms'] / l['step_ms']:.2f}" if l and t else "-"
    parts = lambda r: "/".join(f(r, k) for k in ("fwd_ms", "bwd_ms", "opt_ms")) if r else "-"
    print(f"| {label} | {f(l, 'step_ms')} | {f(t, 'step_ms')} | {ratio} | {parts(l)} | {parts(t)} | {f(l, 'cuda_peak_mb')} / {f(t, 'cuda_peak_mb')} |")
    b = summary(f"pytorch_{name}_bf16.jsonl")
    if b:
        print(f"| {label.replace('fp32', 'bf16 autocast')} | - | {f(b, 'step_ms')} | - | - | {parts(b)} | - / {f(b, 'cuda_peak_mb')} |")
d = summary("lockstep_ddp_nccl.jsonl")
if d:
    print(f"\nDDP over NCCL, world 1, ResNet50 b32: iter {d['iter_ms']:.1f} ms, comm_wait {d['comm_wait_ms']:.1f} ms, "
          f"replicas_equal {d['replicas_equal']}, cuda_peak_mb {d.get('cuda_peak_mb', '-')}")
t = summary("pytorch_resnet50.jsonl") or summary("pytorch_bert.jsonl")
if t:
    print(f"\nPyTorch {t['torch']} on {t['gpu']}; allow_tf32 matmul={t['allow_tf32_matmul']} cudnn={t['allow_tf32_cudnn']}")
EOF

say "total $((SECONDS - START)) s; exit status $status"
if [ ${#skipped[@]} -gt 0 ]; then
  for s in "${skipped[@]}"; do say "skipped: $s"; done
fi
exit $status
