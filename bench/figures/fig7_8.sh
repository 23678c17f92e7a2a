#!/usr/bin/env bash
# bench/figures/fig7_8.sh — the paper's Figures 7 and 8: per-iteration latency against the
# DDP bucket size (bucket_cap_mb 0, 1, 5, 10, 25, 50, 100, 200 MB; 0 = one bucket per
# parameter), a ResNet (Figure 7) and a BERT (Figure 8), lockstep and PyTorch DDP side by
# side (bucket_cap_mb is a knob of both; the first bucket stays at 1 MB in both).
#   default (2-core machine): WORLD=2 ITERS=3, ResNet18 64x64 batch 4/rank and BERT-base
#            widths with 2 layers, seq 32, batch 2/rank
#   FULL=1: ResNet50 224x224 batch 4/rank and BERT-base 12 layers seq 128 batch 2/rank
#   BUCKETS="0 1 5 10 25 50 100 200" to choose the sizes.
# Each point: median iteration ms over ITERS timed iterations (median over ROUNDS rounds).
# Writes OUT/fig7_8.jsonl, fig7_8.csv, fig7_8.png (left: ResNet, right: BERT).
#
#   bench/figures/fig7_8.sh        env: BUILD=build MODELS='flags;flags' ROUNDS=1 ITERS=3 WORLD=2 FULL=0 BUCKETS
#
# Read before: bench/bench_ddp.cpp, distributed/ddp/bucket_assignment.h, bench/figures/common.sh.
source "$(dirname "$0")/common.sh"
WORLD=${WORLD:-2}
ITERS=${ITERS:-3}
BUCKETS=${BUCKETS:-0 1 5 10 25 50 100 200}
select_models  # MODELS: one bench_ddp flag list per model (common.sh)
need_bin bench_ddp lockstep-run
file="$OUT/fig7_8.jsonl"
begin_figure "$file"
for round in $(seq 1 "$ROUNDS"); do
  for model in "${MODELS[@]}"; do
    for mb in $BUCKETS; do
      # shellcheck disable=SC2086
      ours_ddp "$file" '"fig":"7_8"' "$WORLD" $model --iters "$ITERS" --mode ddp --bucket-mb "$mb"
      torch_ddp "$file" '"fig":"7_8"' "$WORLD" $model --iters "$ITERS" --mode ddp --bucket-mb "$mb"
    done
  done
done
"$PY" "$FIG_DIR/plot.py" fig7_8 "$OUT"
