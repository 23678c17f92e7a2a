#!/usr/bin/env bash
# bench/figures/fig11.sh — the paper's Figure 11: convergence when DDP synchronizes only
# every S iterations (no_sync with gradient accumulation), S = 1, 2, 4, 8, on real data:
# Fashion-MNIST with the small CNN, at a small and a large batch per rank. Training loss
# (rank 0's batch, 10-iteration moving mean) against iterations; a step happens every S
# iterations on the mean gradient of S x world x batch examples (see the header of
# bench/bench_nosync_convergence.cpp). PyTorch DDP's no_sync runs the same schedule
# (torch_nosync_convergence.py: same CNN, lr, momentum, seed; its own data shuffle).
#   default: WORLD=2, SMALL=32 for ITERS_SMALL=240 iterations, LARGE=256 for
#            ITERS_LARGE=48 (multiples of 8 so every S ends on a step)
#   FULL=1: ITERS_SMALL=1872 (one epoch of 60000 over 2 ranks x 32) and ITERS_LARGE=232
# Summaries (test accuracy, seconds, steps) are records with "summary": true.
# Writes OUT/fig11.jsonl, fig11.csv, fig11.png (left: small batch, right: large).
#
#   bench/figures/fig11.sh         env: BUILD=build WORLD=2 SMALL LARGE ITERS_SMALL ITERS_LARGE SYNCS=1,2,4,8
#
# Read before: bench/bench_nosync_convergence.cpp, bench/figures/common.sh.
source "$(dirname "$0")/common.sh"
WORLD=${WORLD:-2}
SMALL=${SMALL:-32}
LARGE=${LARGE:-256}
if [[ "${FULL:-0}" == 1 ]]; then
  ITERS_SMALL=${ITERS_SMALL:-1872}
  ITERS_LARGE=${ITERS_LARGE:-232}
else
  ITERS_SMALL=${ITERS_SMALL:-240}
  ITERS_LARGE=${ITERS_LARGE:-48}
fi
SYNCS=${SYNCS:-1,2,4,8}
need_bin bench_nosync_convergence lockstep-run
file="$OUT/fig11.jsonl"
begin_figure "$file"

# JSON lines of one run (either framework) -> fig11 records tagged with framework, batch, world.
tag() {  # FRAMEWORK BATCH
  sed 's/^\[rank 0\] //' | grep '^{"bench": *"nosync"' |
    "$PY" -c '
import json, sys
fw, batch, world, load = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
for line in sys.stdin:
    d = json.loads(line)
    d.update(fig="11", framework=fw, batch=batch, world=world, load=load)
    if d.get("summary"):
        print(json.dumps(d), file=sys.stderr)
    print(json.dumps(d))
' "$1" "$2" "$WORLD" "$(load1)" >> "$file"
}

for pair in "$SMALL:$ITERS_SMALL" "$LARGE:$ITERS_LARGE"; do
  batch=${pair%%:*} iters=${pair##*:}
  echo "fig11: lockstep batch $batch, $iters iterations, sync every $SYNCS" >&2
  next_port
  "$BUILD/bin/lockstep-run" --nproc-per-node "$WORLD" --master-port "$PORT" -- \
    "$BUILD/bin/bench_nosync_convergence" --batch "$batch" --iters "$iters" --sync-every "$SYNCS" |
    tag lockstep "$batch"
  echo "fig11: pytorch batch $batch, $iters iterations, sync every $SYNCS" >&2
  next_port
  torch_python
  "$TORCH_PY" "$FIG_DIR/torch_nosync_convergence.py" --world "$WORLD" --batch "$batch" --iters "$iters" \
    --sync-every "$SYNCS" --port "$PORT" 2>/dev/null | tag pytorch "$batch"
done
"$PY" "$FIG_DIR/plot.py" fig11 "$OUT"
