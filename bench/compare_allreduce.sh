#!/usr/bin/env bash
# bench/compare_allreduce.sh — the paper's Figure 2: our AllReduce (Gloo, and
# MPI) vs PyTorch's Gloo ProcessGroup, same machine, same sizes.
#
# Each round runs, one after the other: bench_allreduce --backend gloo under
# lockstep-run, bench/torch/allreduce.py --async (PyTorch's Gloo group, mp.spawn; the
# newest PyTorch from PyPI, in the venv of bench/torch/venv.sh, or TORCH_PY), and bench_allreduce --backend mpi under mpirun.
# The ranks share this host, so lockstep's Gloo group moves allreduces through shared memory
# (Note [Shared memory on one host]); TCP=1 also runs it with LOCKSTEP_SHM=0 (Gloo over TCP
# loopback, the tcp_s column). After ROUNDS rounds
# it prints per per-call size the median total seconds of each, the ratio
# ours/PyTorch (< 1 means faster than PyTorch), the ms per call and GB/s.
# Alternating whole runs keeps the comparison fair on a noisy machine.
#
#   bench/compare_allreduce.sh            env: BUILD=build ROUNDS=3 ITERS=3 WORLD=2
#                                              TOTAL=60000000 SIZES=10000,...,60000000 MPI=1 TCP=1
#
# Read before: bench/bench_allreduce.cpp, bench/torch/allreduce.py.
# Read next: docs/results/allreduce.md.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
ROUNDS=${ROUNDS:-3}
ITERS=${ITERS:-3}
WORLD=${WORLD:-2}
TOTAL=${TOTAL:-60000000}
SIZES=${SIZES:-10000,100000,1000000,10000000,60000000}
MPI=${MPI:-1}
TCP=${TCP:-1}
source "$here/bench/torch/venv.sh"
REF="$here/bench/torch/allreduce.py"
BENCH="$BUILD/bin/bench_allreduce"
RUN="$BUILD/bin/lockstep-run"

for f in "$BENCH" "$RUN"; do
  [[ -x "$f" ]] || { echo "compare_allreduce: $f not found; build targets bench_allreduce lockstep-run in $BUILD" >&2; exit 1; }
done
torch_python
PY=$TORCH_PY

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
port=$((29600 + RANDOM % 2000))

for round in $(seq 1 "$ROUNDS"); do
  echo "compare_allreduce: round $round/$ROUNDS" >&2
  port=$((port + 7))
  OMP_NUM_THREADS=1 "$RUN" --nproc-per-node "$WORLD" --master-port "$port" -- \
    "$BENCH" --backend gloo --total "$TOTAL" --sizes "$SIZES" --iters "$ITERS" \
    | sed -n 's/^\[rank 0\] //p' >> "$work/gloo.jsonl"
  if [[ "$TCP" == 1 ]]; then
    port=$((port + 7))
    LOCKSTEP_SHM=0 OMP_NUM_THREADS=1 "$RUN" --nproc-per-node "$WORLD" --master-port "$port" -- \
      "$BENCH" --backend gloo --total "$TOTAL" --sizes "$SIZES" --iters "$ITERS" \
      | sed -n 's/^\[rank 0\] //p' >> "$work/tcp.jsonl"
  fi
  port=$((port + 7))
  OMP_NUM_THREADS=1 "$PY" "$REF" --world "$WORLD" --total "$TOTAL" --sizes "$SIZES" --async --port "$port" \
    >> "$work/torch.txt"
  if [[ "$MPI" == 1 ]]; then
    OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np "$WORLD" \
      "$BENCH" --backend mpi --total "$TOTAL" --sizes "$SIZES" --iters "$ITERS" \
      | grep '^{' >> "$work/mpi.jsonl"
  fi
done

"$PY" - "$work" "$TOTAL" <<'PYEOF'
import json, os, re, statistics, sys
work = sys.argv[1]
def ours(name):
    out = {}
    path = os.path.join(work, name)
    if not os.path.exists(path): return out
    for line in open(path):
        d = json.loads(line)
        if d.get("summary"): continue
        out.setdefault(d["per_call"], []).append(d["median_ms"] / 1e3)
    return out
gloo, mpi, tcp = ours("gloo.jsonl"), ours("mpi.jsonl"), ours("tcp.jsonl")
torch = {}
for line in open(os.path.join(work, "torch.txt")):
    m = re.search(r"per_call=(\d+) calls=(\d+) total_s=([\d.]+)", line)
    if m: torch.setdefault(int(m.group(1)), []).append(float(m.group(3)))
med = lambda v: statistics.median(v) if v else float("nan")
print(f"{'per_call':>10} {'calls':>6} {'torch_s':>8} {'gloo_s':>8} {'gloo/torch':>10} {'gloo_ms/call':>12} "
      f"{'gloo_GB/s':>9} {'mpi_s':>8} {'mpi/torch':>9} {'tcp_s':>8} {'tcp/torch':>9}")
for per in sorted(torch):
    calls = max(1, int(sys.argv[2]) // per)
    t, g, m, c = med(torch[per]), med(gloo.get(per, [])), med(mpi.get(per, [])), med(tcp.get(per, []))
    gbps = 4 * per * calls / g / 1e9 if g == g else float("nan")
    print(f"{per:>10} {calls:>6} {t:>8.3f} {g:>8.3f} {g / t:>10.2f} {g / calls * 1e3:>12.4f} "
          f"{gbps:>9.2f} {m:>8.3f} {m / t:>9.2f} {c:>8.3f} {c / t:>9.2f}")
PYEOF
