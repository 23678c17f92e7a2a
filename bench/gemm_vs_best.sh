#!/usr/bin/env bash
# bench/gemm_vs_best.sh — every bf16 GEMM pass of the BERT-base and ResNet50 steps beside
# oneDNN's best configuration for its shape on this machine (the matrix-unit targets' table): the CPU
# line, then bench_gemm_best's JSON lines, then a table (pass, lockstep GFLOP/s, oneDNN
# with B plain, with B packed, a batch as one oneDNN call, lockstep's rate / the best
# rate; >= 0.8 is the target). Where oneDNN has no bf16 matmul (a CPU without AVX-512),
# its columns are its float32 matmul, which lockstep's bf16 GEMMs run through there.
#
#   bench/gemm_vs_best.sh [THREADS] [REPS] [MODEL]      THREADS 1, REPS 10, MODEL all
#   env: BUILD=build (where bin/bench_gemm_best is)
# Run it under the machine-wide benchmark lock on a shared machine:
#   flock /work/.bench.lock bench/gemm_vs_best.sh
#
# Read before: bench/bench_gemm_best.cpp. Read next: docs/results/bf16.md.
set -euo pipefail

THREADS=${1:-1}
REPS=${2:-10}
MODEL=${3:-all}
BUILD=${BUILD:-build}
here=$(cd "$(dirname "$0")" && pwd)

if [[ ! -x "$BUILD/bin/bench_gemm_best" ]]; then
  echo "gemm_vs_best.sh: $BUILD/bin/bench_gemm_best not found; build it first:" \
       "cmake --build $BUILD --target bench_gemm_best" >&2
  exit 2
fi
source "$here/machine.sh"
machine_line
out=$("$BUILD/bin/bench_gemm_best" --threads "$THREADS" --reps "$REPS" --model "$MODEL")
echo "$out"
echo "$out" | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
passes = [r for r in rows if not r.get("summary")]
if passes and passes[0].get("onednn_dtype") == "f32":
    print("oneDNN has no bf16 matmul on this CPU: its columns are its float32 matmul on float32 copies")
print("| pass (M x N x K) | lockstep | oneDNN B plain | oneDNN B packed | oneDNN one batched call | lockstep / best |")
print("|---|---|---|---|---|---|")
for r in rows:
    if r.get("summary"):
        print("worst ratio: %.2f (threads %d)" % (r["worst_ratio"], r["threads"]))
        continue
    shape = "%d x %d x %d%s" % (r["m"], r["n"], r["k"], " x %d" % r["batch"] if r["batch"] > 1 else "")
    batched = "%d" % r["batched_gflops"] if r.get("batched_gflops") else "-"
    print("| %s %s | %d | %d | %d | %s | %.2f |" % (r["pass"], shape, r["lockstep_gflops"],
          r["plain_gflops"], r["packed_gflops"], batched, r["lockstep_over_best"]))
'
