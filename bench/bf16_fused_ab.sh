#!/usr/bin/env bash
# bench/bf16_fused_ab.sh — the bf16 step with the fused paths of docs/results/bf16.md
# (Note [float32 ops reading bfloat16 in place], [linear + GELU in one node], [linear's
# input gradient summed in place], [dropout writing the bf16 copy], [dropout + residual add
# in one pass], [linear + GELU + dropout in one node], [dropout + residual add + LayerNorm
# in one pass], [bf16 copies written by the op that made the activation], [ReLU mask in bits],
# [Downsample batch norm folded], the q/k/v unbind
# of nn/attention.cpp) off ("before": every switch 0) and
# on ("after": the defaults), alternating in one run so both see the same minutes of the
# machine.
#
#   bench/bf16_fused_ab.sh [MODEL] [ROUNDS] [ITERS] [THREADS]
#       MODEL bert (any bench_step model), ROUNDS 3, ITERS 3, THREADS 1
#   env: BUILD=build (where bin/bench_step is); OFF_SWITCHES="A=0 B=0" sets only these
#        for "before" (e.g. the newest fusions alone), instead of every switch 0
# Prints each run's bench_step summary line prefixed with before/after; compare the
# medians of step_ms and cpu_ms. Hold the machine's benchmark lock around it.
#
# Read before: bench/bench_step.cpp. Read next: docs/results/bf16.md.
set -euo pipefail
MODEL=${1:-bert}
ROUNDS=${2:-3}
ITERS=${3:-3}
THREADS=${4:-1}
BUILD=${BUILD:-build}
if [[ -n "${OFF_SWITCHES:-}" ]]; then
  read -r -a OFF <<<"$OFF_SWITCHES"
else
  OFF=(LOCKSTEP_BF16_FUSED_CASTS=0 LOCKSTEP_QKV_UNBIND=0 LOCKSTEP_BF16_LINEAR_GELU=0 LOCKSTEP_BF16_DROPOUT_ADD=0
       LOCKSTEP_BF16_LINEAR_SUM_DX=0 LOCKSTEP_BF16_DROPOUT_CAST=0 LOCKSTEP_BF16_RELU_BITS=0 LOCKSTEP_BF16_DROPOUT_ADD_NORM=0
       LOCKSTEP_BF16_GELU_DROPOUT=0 LOCKSTEP_BF16_NORM_WRITES_CAST=0 LOCKSTEP_BF16_BN_PAIR=0
       LOCKSTEP_BF16_BN_POOL=0)
fi
# run ENV... : one bench_step with those variables set, its summary line.
run() {
  env "$@" "$BUILD/bin/bench_step" --model "$MODEL" --amp bf16 --iters "$ITERS" --warmup 1 \
    --threads "$THREADS" | grep '"summary":true'
}
for ((r = 1; r <= ROUNDS; r++)); do
  echo "before $(run "${OFF[@]}")"
  echo "after $(run)"
done
