#!/usr/bin/env bash
# bench/figures/fig6.sh — the paper's Figure 6: where an iteration's time goes (forward,
# backward compute, backward communication left exposed, optimizer) with and without
# overlapping communication with backward, for a ResNet and a BERT.
#
# lockstep (bench_ddp): modes local, ddp (overlap), no-overlap (DDPOptions().overlap(false):
# every bucket launched at the end of backward) and flat (one AllReduce after backward).
# PyTorch (torch_ddp_bench.py): local, ddp, flat (it has no no-overlap switch; flat is the
# paper's "AllReduce after backward" baseline). Same world, model, batch and bucket size
# (25 MB); the bars are medians over ITERS timed iterations (and ROUNDS rounds).
#   default (2-core machine): WORLD=2 ITERS=4, ResNet18 64x64 batch 4/rank and BERT-base
#            widths with 2 layers, seq 32, batch 2/rank
#   FULL=1 (the paper's models): ResNet50 224x224 batch 4/rank and BERT-base 12 layers,
#            seq 128, batch 2/rank (minutes per iteration on 2 cores)
# Writes OUT/fig6.jsonl, fig6.csv, fig6.png.
#
#   bench/figures/fig6.sh          env: BUILD=build MODELS='flags;flags' ROUNDS=1 ITERS=4 WORLD=2 FULL=0
#
# Read before: bench/bench_ddp.cpp (what each time measures), bench/figures/common.sh.
source "$(dirname "$0")/common.sh"
WORLD=${WORLD:-2}
ITERS=${ITERS:-4}
select_models  # MODELS: one bench_ddp flag list per model (common.sh)
need_bin bench_ddp lockstep-run
file="$OUT/fig6.jsonl"
begin_figure "$file"
for round in $(seq 1 "$ROUNDS"); do
  for model in "${MODELS[@]}"; do
    for mode in local ddp no-overlap flat; do
      # shellcheck disable=SC2086  # $model is a list of flags
      ours_ddp "$file" '"fig":"6"' "$WORLD" $model --iters "$ITERS" --mode "$mode"
      if [[ "$mode" != no-overlap ]]; then
        torch_ddp "$file" '"fig":"6"' "$WORLD" $model --iters "$ITERS" --mode "$mode"
      fi
    done
  done
done
"$PY" "$FIG_DIR/plot.py" fig6 "$OUT"
