#!/usr/bin/env bash
# bench/figures/fig9_10.sh — the paper's Figure 9 (scalability: throughput against the
# number of processes) and Figure 10 (skipping synchronization: DDP.no_sync for S-1 of
# every S iterations, S = 1, 2, 4, 8), lockstep and PyTorch DDP side by side.
#
# Figure 9 here: world sizes 1, 2, 4 as processes on THIS machine (2 cores: 4 ranks share
# them, so throughput cannot scale; the curve shows what DDP costs on top, and the paper's
# many-machine regime is left to a scaling model). Each point: examples/s over all ranks
# (world x batch x iterations / the slowest rank's total time).
# Figure 10: mean ms per iteration over whole cycles of S (ITERS10 = 8 timed iterations).
#   default: ResNet18 64x64 batch 4/rank, WORLDS="1 2 4", SYNCS="1 2 4 8", WORLD=2 for Fig. 10
#   FULL=1: ResNet50 224x224 batch 4/rank
# Writes OUT/fig9_10.jsonl, fig9_10.csv, fig9_10.png.
#
#   bench/figures/fig9_10.sh       env: BUILD=build MODEL='flags' ROUNDS=1 ITERS=4 ITERS10=8 WORLDS SYNCS FULL=0
#
# Read before: bench/bench_ddp.cpp (--sync-every), bench/figures/common.sh.
source "$(dirname "$0")/common.sh"
WORLD=${WORLD:-2}
ITERS=${ITERS:-4}
ITERS10=${ITERS10:-8}
WORLDS=${WORLDS:-1 2 4}
SYNCS=${SYNCS:-1 2 4 8}
if [[ -n "${MODEL:-}" ]]; then  # e.g. MODEL="--model bert-tiny --batch 4"
  :
elif [[ "${FULL:-0}" == 1 ]]; then
  MODEL="--model resnet50 --image 224 --batch 4"
else
  MODEL="--model resnet18 --image 64 --batch 4"
fi
need_bin bench_ddp lockstep-run
file="$OUT/fig9_10.jsonl"
begin_figure "$file"
for round in $(seq 1 "$ROUNDS"); do
  for w in $WORLDS; do
    # shellcheck disable=SC2086
    ours_ddp "$file" '"fig":"9","part":"world"' "$w" $MODEL --iters "$ITERS" --mode ddp
    torch_ddp "$file" '"fig":"9","part":"world"' "$w" $MODEL --iters "$ITERS" --mode ddp
  done
  for s in $SYNCS; do
    # shellcheck disable=SC2086
    ours_ddp "$file" '"fig":"10","part":"sync"' "$WORLD" $MODEL --iters "$ITERS10" --mode ddp --sync-every "$s"
    torch_ddp "$file" '"fig":"10","part":"sync"' "$WORLD" $MODEL --iters "$ITERS10" --mode ddp --sync-every "$s"
  done
done
"$PY" "$FIG_DIR/plot.py" fig9_10 "$OUT"
