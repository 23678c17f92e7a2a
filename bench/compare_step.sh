#!/usr/bin/env bash
# bench/compare_step.sh — a training step, ours (bench_step) vs PyTorch (shared/ref/torch_step.py).
#
# Runs bench_step and /usr/bin/python3 shared/ref/torch_step.py ALTERNATELY, ROUNDS
# times (the one that goes first swaps every round), same model, batch, image size /
# sequence length, threads (OMP_NUM_THREADS and OPENBLAS_NUM_THREADS too) and number of
# timed iterations (each side also runs one untimed warm-up step). Both run under
# /usr/bin/time -v, whose
# "Maximum resident set size" is the peak memory compared. Prints one line per round
# and side, then the medians over rounds, the ratios ours / PyTorch for step time and
# peak memory (below 1.0: we are faster / smaller), and a JSON summary line.
# Installs python3-torch, python3-torchvision and time (/usr/bin/time) when missing.
#
#   bench/compare_step.sh [MODEL] [BATCH] [THREADS] [ROUNDS] [ITERS]
#       MODEL resnet50|bert (default resnet50), BATCH 8, THREADS 1, ROUNDS 3, ITERS 3
#   env: BUILD=build (where bin/bench_step is), IMAGE=224, SEQ=128, LAYERS=12 (BERT depth),
#        REF=<repo>/../shared/ref (where torch_step.py is), CLOCK=wall|cpu (default wall)
# CLOCK=cpu compares process CPU time per step instead of wall time: ours reports it
# (bench_step's cpu_ms); torch_step.py is run unchanged except that time.perf_counter
# is replaced by time.process_time, so its step_ms becomes CPU ms. On a machine that
# other work keeps busy, CPU time is the steadier 1-thread number (with more threads it
# also counts the time threads spin waiting for each other), but it is not load-proof:
# a loaded machine also slows the CPU time of memory-bound code, and of OpenBLAS (which
# PyTorch's linear layers use) far more than of our GEMMs (see docs/results/gemm.md).
# Quote ratios from a quiet machine.
# Only the models torch_models.py builds can be compared: resnet50 and bert (BERT-base
# shapes, LAYERS encoder layers). Steps take seconds: ITERS 2 and ROUNDS 1 already
# take about a minute for ResNet50 batch 8 on one thread.
#
# Read before: bench/bench_step.cpp. Read next: docs/results/cpu_step.md.
set -euo pipefail

MODEL=${1:-resnet50}
BATCH=${2:-8}
THREADS=${3:-1}
ROUNDS=${4:-3}
ITERS=${5:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=${BUILD:-build}
IMAGE=${IMAGE:-224}
SEQ=${SEQ:-128}
LAYERS=${LAYERS:-12}
REF=${REF:-$HERE/../../shared/ref}
BENCH="$BUILD/bin/bench_step"
PY=/usr/bin/python3
CLOCK=${CLOCK:-wall}
source "$HERE/openblas_coretype.sh"  # PyTorch's OpenBLAS at its best kernels

case "$CLOCK" in
  wall) STEP_KEY=step_ms ;;
  cpu) STEP_KEY=cpu_ms ;;
  *) echo "compare_step: CLOCK must be wall or cpu, got '$CLOCK'" >&2; exit 2 ;;
esac
case "$MODEL" in
  resnet50|bert) ;;
  *) echo "compare_step: MODEL must be resnet50 or bert (the models shared/ref/torch_models.py" \
          "builds), got '$MODEL'" >&2; exit 2 ;;
esac
if [[ ! -x "$BENCH" ]]; then
  echo "compare_step: $BENCH not found; build it with cmake --build $BUILD --target bench_step" \
       "(or set BUILD=<build dir>)" >&2
  exit 1
fi
if [[ ! -f "$REF/torch_step.py" ]]; then
  echo "compare_step: $REF/torch_step.py not found; set REF to the shared/ref folder" >&2
  exit 1
fi

# Installs Debian packages that are missing; runs apt-get update only if the first try fails.
ensure_packages() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  echo "compare_step: installing ${missing[*]}" >&2
  apt-get install -y "${missing[@]}" >&2 ||
    { apt-get update >&2 && apt-get install -y "${missing[@]}" >&2; }
}
ensure_packages python3-torch python3-torchvision time

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Runs torch_step.py unchanged as a script (its folder first on sys.path); with
# CLOCK=cpu its time.perf_counter reads process CPU time instead.
cat > "$work/run_torch_step.py" <<'EOF'
import os, runpy, sys, time
ref = sys.argv[1]
if os.environ["COMPARE_CLOCK"] == "cpu":
    time.perf_counter = time.process_time
sys.path.insert(0, ref)
sys.argv = [os.path.join(ref, "torch_step.py")] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
EOF
# PyTorch's BLAS is Debian's libblas.so.3 (OpenBLAS when installed): its own thread knobs too.
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS

# One side of one round: "<side> <round> <step_ms> <peak_rss_mb>" appended to results.
run_ours() {
  /usr/bin/time -v -o "$work/time.txt" "$BENCH" --model "$MODEL" --batch "$BATCH" \
    --image "$IMAGE" --seq "$SEQ" --layers "$LAYERS" --threads "$THREADS" --iters "$ITERS" \
    --warmup 1 > "$work/ours.jsonl"
  local step rss
  step=$(grep '"summary"' "$work/ours.jsonl" | sed -n "s/.*\"$STEP_KEY\":\([0-9.]*\).*/\1/p")
  rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.1f", $2 / 1024}' "$work/time.txt")
  echo "ours $1 $step $rss" >> "$work/results.txt"
  echo "round $1 ours:    $CLOCK step_ms=$step peak_rss_mb=$rss" \
       "($(grep summary "$work/ours.jsonl"))"
}
run_torch() {
  COMPARE_CLOCK=$CLOCK /usr/bin/time -v -o "$work/time.txt" "$PY" "$work/run_torch_step.py" \
    "$REF" "$MODEL" --batch "$BATCH" --size "$IMAGE" --seq "$SEQ" --layers "$LAYERS" \
    --threads "$THREADS" --iters "$ITERS" > "$work/torch.txt"
  local step rss
  step=$(sed -n 's/.*step_ms=\([0-9.]*\).*/\1/p' "$work/torch.txt")
  rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.1f", $2 / 1024}' "$work/time.txt")
  echo "torch $1 $step $rss" >> "$work/results.txt"
  echo "round $1 pytorch: $CLOCK step_ms=$step peak_rss_mb=$rss  ($(cat "$work/torch.txt"))"
}

echo "# compare_step: $MODEL batch=$BATCH image=$IMAGE seq=$SEQ layers=$LAYERS" \
     "threads=$THREADS rounds=$ROUNDS iters=$ITERS clock=$CLOCK" \
     "load: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$ROUNDS"); do
  if (( round % 2 )); then
    run_ours "$round"; run_torch "$round"
  else
    run_torch "$round"; run_ours "$round"
  fi
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"

# Medians over rounds, ratios ours / PyTorch (median of the per-round ratios), summary line.
"$PY" - "$work/results.txt" "$MODEL" "$BATCH" "$THREADS" "$ROUNDS" "$ITERS" "$CLOCK" <<'EOF'
import json, statistics, sys
path, model, batch, threads, rounds, iters, clock = sys.argv[1:]
rows = [l.split() for l in open(path)]
ours = {int(r[1]): (float(r[2]), float(r[3])) for r in rows if r[0] == "ours"}
torch = {int(r[1]): (float(r[2]), float(r[3])) for r in rows if r[0] == "torch"}
ratio = [statistics.median(ours[k][i] / torch[k][i] for k in ours) for i in (0, 1)]
med = lambda side, i: round(statistics.median(v[i] for v in side.values()), 1)
print(f"# medians over {rounds} round(s)        ours    pytorch   ours/pytorch")
for i, what in enumerate([f"step_ms ({clock})", "peak_rss_mb"]):
    print(f"{what:24s} {med(ours, i):10.1f} {med(torch, i):10.1f}   {ratio[i]:.3f}")
print(json.dumps({"bench": "compare_step", "summary": True, "model": model,
                  "batch": int(batch), "threads": int(threads), "rounds": int(rounds),
                  "iters": int(iters), "clock": clock,
                  "ours_step_ms": med(ours, 0), "torch_step_ms": med(torch, 0),
                  "ours_peak_rss_mb": med(ours, 1), "torch_peak_rss_mb": med(torch, 1),
                  "time_ratio": round(ratio[0], 3), "memory_ratio": round(ratio[1], 3)}))
EOF
