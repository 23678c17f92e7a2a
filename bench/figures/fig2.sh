#!/usr/bin/env bash
# bench/figures/fig2.sh — the paper's Figure 2: total time to AllReduce a fixed number of
# floats when it is split into calls of a given size (all calls issued asynchronously,
# then waited for, as DDP's buckets are). Small calls show per-call overhead, large ones
# bandwidth; this is why DDP buckets gradients.
#
# Runs, alternating, ROUNDS times: lockstep's bench_allreduce over Gloo (lockstep-run),
# the same over MPI (mpirun; MPI=0 skips it), and PyTorch's Gloo group
# (bench/torch/allreduce.py --async). Each point is the median over rounds.
#   default: WORLD=2 TOTAL=10000000 (40 MB) SIZES=1000,10000,100000,1000000,10000000
#   full (the paper's 60M floats): TOTAL=60000000 SIZES=1000,10000,100000,1000000,10000000,60000000
# Writes OUT/fig2.jsonl, fig2.csv, fig2.png (OUT default docs/results/figures).
#
#   bench/figures/fig2.sh              env: BUILD=build ROUNDS=1 ITERS=3 WORLD TOTAL SIZES MPI=1
#
# Read before: bench/bench_allreduce.cpp, bench/figures/common.sh.
source "$(dirname "$0")/common.sh"
WORLD=${WORLD:-2}
TOTAL=${TOTAL:-10000000}
SIZES=${SIZES:-1000,10000,100000,1000000,10000000}
ITERS=${ITERS:-3}
MPI=${MPI:-1}
need_bin bench_allreduce lockstep-run
file="$OUT/fig2.jsonl"
begin_figure "$file"

# bench_allreduce's per-size JSON lines -> fig2 records (seconds per run of all calls).
ours_records() {  # IMPL
  sed 's/^\[rank 0\] //' | grep '^{"bench":"allreduce"' |
    "$PY" -c '
import json, sys
impl, total, load = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
for line in sys.stdin:
    d = json.loads(line)
    print(json.dumps(dict(fig="2", impl=impl, framework="lockstep", world=d["world"], total=total,
                          per_call=d["per_call"], calls=d["calls"], total_s=d["median_ms"] / 1e3, load=load)))
' "$1" "$TOTAL" "$(load1)" >> "$file"
}

for round in $(seq 1 "$ROUNDS"); do
  echo "fig2: round $round/$ROUNDS: lockstep gloo" >&2
  next_port
  "$BUILD/bin/lockstep-run" --nproc-per-node "$WORLD" --master-port "$PORT" -- \
    "$BUILD/bin/bench_allreduce" --backend gloo --total "$TOTAL" --sizes "$SIZES" --iters "$ITERS" |
    ours_records lockstep-gloo
  if [[ "$MPI" == 1 ]]; then
    echo "fig2: round $round/$ROUNDS: lockstep mpi" >&2
    mpirun --allow-run-as-root --oversubscribe -np "$WORLD" \
      "$BUILD/bin/bench_allreduce" --backend mpi --total "$TOTAL" --sizes "$SIZES" --iters "$ITERS" |
      ours_records lockstep-mpi
  fi
  echo "fig2: round $round/$ROUNDS: pytorch gloo" >&2
  next_port
  torch_python
  "$TORCH_PY" "$REPO/bench/torch/allreduce.py" --world "$WORLD" --total "$TOTAL" --sizes "$SIZES" --async \
    --port "$PORT" 2>/dev/null |
    "$PY" -c '
import json, re, sys
total, world, load = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
for line in sys.stdin:
    m = re.search(r"per_call=(\d+) calls=(\d+) total_s=([\d.]+)", line)
    if m:
        print(json.dumps(dict(fig="2", impl="pytorch-gloo", framework="pytorch", world=world, total=total,
                              per_call=int(m.group(1)), calls=int(m.group(2)), total_s=float(m.group(3)), load=load)))
' "$TOTAL" "$WORLD" "$(load1)" >> "$file"
done
"$PY" "$FIG_DIR/plot.py" fig2 "$OUT"
