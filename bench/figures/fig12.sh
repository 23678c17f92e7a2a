#!/usr/bin/env bash
# bench/figures/fig12.sh — the paper's Figure 12: round-robin process groups. DDP's
# AllReduces go to K process groups in turn (rr1 / rr3 / rr5), so K buckets can be in
# flight at once. lockstep: bench_ddp --rr K (ProcessGroupRoundRobin over K Gloo groups);
# PyTorch: torch.distributed._round_robin_process_groups over K Gloo groups (1.13 still
# has it, deprecated), given to DDP as its process_group.
#   default (2-core machine): WORLD=2 ITERS=4, ResNet18 64x64 batch 4/rank and BERT-base
#            widths with 2 layers, seq 32, batch 2/rank; RRS="1 3 5"
#   FULL=1: ResNet50 224x224 batch 4/rank and BERT-base 12 layers seq 128 batch 2/rank
# Each point: median iteration ms (median over ROUNDS rounds).
# Writes OUT/fig12.jsonl, fig12.csv, fig12.png.
#
#   bench/figures/fig12.sh         env: BUILD=build MODELS='flags;flags' ROUNDS=1 ITERS=4 WORLD=2 RRS FULL=0
#
# Read before: distributed/process_group/process_group_round_robin.h, bench/figures/common.sh.
source "$(dirname "$0")/common.sh"
WORLD=${WORLD:-2}
ITERS=${ITERS:-4}
RRS=${RRS:-1 3 5}
select_models  # MODELS: one bench_ddp flag list per model (common.sh)
need_bin bench_ddp lockstep-run
file="$OUT/fig12.jsonl"
begin_figure "$file"
for round in $(seq 1 "$ROUNDS"); do
  for model in "${MODELS[@]}"; do
    for k in $RRS; do
      # shellcheck disable=SC2086
      ours_ddp "$file" '"fig":"12"' "$WORLD" $model --iters "$ITERS" --mode ddp --rr "$k"
      torch_ddp "$file" '"fig":"12"' "$WORLD" $model --iters "$ITERS" --mode ddp --rr "$k"
    done
  done
done
"$PY" "$FIG_DIR/plot.py" fig12 "$OUT"
