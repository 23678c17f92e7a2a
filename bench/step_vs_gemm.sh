#!/usr/bin/env bash
# bench/step_vs_gemm.sh — a training step's GFLOP/s as a share of the machine's GEMM rate,
# measured in interleaved pairs (the CPU-speed target: "≥ 85% of the single-core GEMM GFLOP/s").
#
# Each pair runs bench_gemm (its summary: the median GFLOP/s over its 18 shapes, for one
# backend) and then bench_step (the step's median ms over ITERS timed steps after one
# warm-up), so every step has a GEMM rate from the same minute: on a shared machine both
# move by 10-15% between minutes, and a ratio of numbers taken at different times mostly
# measures that. Prints one line per pair, then a JSON summary with
#   pooled_ratio    step GFLOP/s at the median step ms / the median GEMM GFLOP/s,
#   pair_ratio      the median of the per-pair ratios (and their min and max).
# The step's GFLOP/s is bench_step's train_gflop (3 x the nominal forward FLOPs) over its ms.
#
#   bench/step_vs_gemm.sh [PAIRS] [ITERS] [MODEL] [BATCH] [THREADS]
#       PAIRS 8, ITERS 8, MODEL resnet50 (any bench_step model), BATCH 8, THREADS 1
#   env: BUILD=build (where bin/bench_gemm and bin/bench_step are), BACKEND=onednn
# Quote it from a quiet machine; PAIRS 12 takes about 4 minutes for ResNet50 at batch 8.
#
# Read before: bench/bench_gemm.cpp, bench/bench_step.cpp. Read next: docs/results/cpu_step.md.
set -euo pipefail

PAIRS=${1:-8}
ITERS=${2:-8}
MODEL=${3:-resnet50}
BATCH=${4:-8}
THREADS=${5:-1}
BUILD=${BUILD:-build}
BACKEND=${BACKEND:-onednn}

for bin in bench_gemm bench_step; do
  if [[ ! -x "$BUILD/bin/$bin" ]]; then
    echo "step_vs_gemm: $BUILD/bin/$bin not found; build it with cmake --build $BUILD" \
         "--target $bin (or set BUILD=<build dir>)" >&2
    exit 1
  fi
done
if ! [[ "$PAIRS" =~ ^[1-9][0-9]*$ && "$ITERS" =~ ^[1-9][0-9]*$ ]]; then
  echo "step_vs_gemm: PAIRS and ITERS must be positive whole numbers, got '$PAIRS' '$ITERS'" >&2
  exit 2
fi

# The value of "key": in a JSON line (numbers only).
field() { grep -o "\"$1\":{\?\"\?[a-z]*\"\?:\?[0-9.]*" | grep -o '[0-9.]*$'; }

gemms=() steps=() gflops=()
for ((i = 1; i <= PAIRS; i++)); do
  g=$("$BUILD/bin/bench_gemm" --threads "$THREADS" --backend "$BACKEND" | tail -1 |
      field median_gflops)
  summary=$("$BUILD/bin/bench_step" --model "$MODEL" --batch "$BATCH" --iters "$ITERS" \
            --threads "$THREADS" | tail -1)
  s=$(field step_ms <<< "$summary")
  f=$(field train_gflop <<< "$summary")
  echo "pair $i $(date +%H:%M:%S): gemm ${g} GFLOP/s, $MODEL step ${s} ms" \
       "($(awk -v f="$f" -v s="$s" -v g="$g" 'BEGIN { printf "%.1f GFLOP/s, %.1f%%", f / s * 1e3, 100 * f / s * 1e3 / g }'))"
  gemms+=("$g") steps+=("$s") gflops+=("$f")
done

python3 - "$MODEL" "$BATCH" "$THREADS" "$ITERS" "${gflops[0]}" "${gemms[*]}" "${steps[*]}" <<'EOF'
import json, statistics, sys
model, batch, threads, iters, gflop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
gemm = [float(v) for v in sys.argv[6].split()]
step = [float(v) for v in sys.argv[7].split()]
pairs = [gflop / (s * 1e-3) / g for g, s in zip(gemm, step)]
rate = gflop / (statistics.median(step) * 1e-3)
print(json.dumps({"bench": "step_vs_gemm", "summary": True, "model": model, "batch": batch,
                  "threads": threads, "iters": iters, "pairs": len(pairs),
                  "gemm_median_gflops": round(statistics.median(gemm), 2),
                  "step_median_ms": round(statistics.median(step), 2),
                  "step_gflops": round(rate, 2),
                  "pooled_ratio": round(rate / statistics.median(gemm), 4),
                  "pair_ratio": round(statistics.median(pairs), 4),
                  "pair_ratio_min": round(min(pairs), 4), "pair_ratio_max": round(max(pairs), 4)}))
EOF
