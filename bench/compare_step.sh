#!/usr/bin/env bash
# bench/compare_step.sh — a training step, ours (bench_step) vs PyTorch (bench/torch/step.py).
#
# Runs bench_step and bench/torch/step.py ALTERNATELY, ROUNDS times (the one that goes first
# swaps every round), same model, batch, image size / sequence length, threads
# (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and MKL_NUM_THREADS too) and number of timed
# iterations (each side also runs one untimed warm-up step). PyTorch is the newest from PyPI,
# in the venv of bench/torch/venv.sh (created on first use; TORCH_PY=<python> uses another).
# PyTorch gets its faster layout: for ResNet in fp32 every round runs it twice, NCHW and
# channels_last, and the ratios are taken against the layout whose median step is lower
# (both are printed); BERT has one layout. AMP=bf16 runs ours with --amp bf16 and PyTorch
# under torch.autocast("cpu", dtype=torch.bfloat16), ResNet in channels_last.
# Both run under /usr/bin/time -v, whose "Maximum resident set size" is the peak memory
# compared. Prints one line per round and side, then the medians over rounds, the ratios
# ours / PyTorch for step time and peak memory (below 1.0: we are faster / smaller), and a
# JSON summary line. It also measures PyTorch's peak RSS for `import torch, torchvision`
# alone (torch_import_rss_mb): PyPI's Linux wheel is the CUDA build, whose libraries take
# ~840 MB resident before any tensor exists (Debian's CPU-only 1.13 took far less), so read
# the memory ratio next to it. Installs the Debian package time (/usr/bin/time) when missing.
#
#   bench/compare_step.sh [MODEL] [BATCH] [THREADS] [ROUNDS] [ITERS]
#       MODEL resnet50|bert (default resnet50), BATCH 8, THREADS 1, ROUNDS 3, ITERS 3
#   env: BUILD=build (where bin/bench_step is), IMAGE=224, SEQ=128, LAYERS=12 (BERT depth),
#        CLOCK=wall|cpu (default wall), AMP=none|bf16 (default none),
#        LAYOUTS="nchw channels_last" (PyTorch's fp32 ResNet layouts to try), TORCH_PY,
#        COMPILE=1 (also run PyTorch's model under torch.compile: the pseudo-layout
#        "compiled", channels_last for a ResNet; the ours / PyTorch ratio is printed
#        against every layout, the summary's against the fastest)
# CLOCK=cpu compares process CPU time per step instead of wall time: ours reports it
# (bench_step's cpu_ms), step.py measures it with --clock cpu (time.process_time). On a
# machine that other work keeps busy, CPU time is the steadier 1-thread number (with more
# threads it also counts the time threads spin waiting for each other), but it is not
# load-proof: a loaded machine also slows the CPU time of memory-bound code, and of some
# BLAS libraries far more than of our GEMMs (see docs/results/gemm.md).
# Quote ratios from a quiet machine.
# Only the models both sides build can be compared: resnet50 and bert (BERT-base shapes,
# LAYERS encoder layers). Steps take seconds: ITERS 2 and ROUNDS 1 already take about a
# minute for ResNet50 batch 8 on one thread (two minutes with both PyTorch layouts).
#
# Read before: bench/bench_step.cpp, bench/torch/step.py. Read next: docs/results/cpu_step.md.
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
BENCH="$BUILD/bin/bench_step"
CLOCK=${CLOCK:-wall}
AMP=${AMP:-none}
source "$HERE/openblas_coretype.sh"  # a PyTorch linked to OpenBLAS: its best kernels
source "$HERE/torch/venv.sh"
source "$HERE/machine.sh"

case "$CLOCK" in
  wall) STEP_KEY=step_ms ;;
  cpu) STEP_KEY=cpu_ms ;;
  *) echo "compare_step: CLOCK must be wall or cpu, got '$CLOCK'" >&2; exit 2 ;;
esac
case "$MODEL" in
  resnet50) LAYOUTS=${LAYOUTS:-nchw channels_last} ;;
  bert) LAYOUTS=default ;;  # one layout: no channels_last for a transformer
  *) echo "compare_step: MODEL must be resnet50 or bert (the models both sides build)," \
          "got '$MODEL'" >&2; exit 2 ;;
esac
OURS_AMP=()
case "$AMP" in
  none) ;;
  bf16) OURS_AMP=(--amp bf16); [[ "$MODEL" == resnet50 ]] && LAYOUTS=channels_last ;;
  *) echo "compare_step: AMP must be none or bf16, got '$AMP'" >&2; exit 2 ;;
esac
[[ "${COMPILE:-0}" == 1 ]] && LAYOUTS="$LAYOUTS compiled"
if [[ ! -x "$BENCH" ]]; then
  echo "compare_step: $BENCH not found; build it with cmake --build $BUILD --target bench_step" \
       "(or set BUILD=<build dir>)" >&2
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
ensure_packages time
torch_python  # sets TORCH_PY (bench/torch/venv.sh)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS

# One side of one round: "<side> <round> <step_ms> <peak_rss_mb>" appended to results.
run_ours() {
  /usr/bin/time -v -o "$work/time.txt" "$BENCH" --model "$MODEL" --batch "$BATCH" \
    --image "$IMAGE" --seq "$SEQ" --layers "$LAYERS" --threads "$THREADS" --iters "$ITERS" \
    --warmup 1 "${OURS_AMP[@]}" > "$work/ours.jsonl"
  local step rss
  step=$(grep '"summary"' "$work/ours.jsonl" | sed -n "s/.*\"$STEP_KEY\":\([0-9.]*\).*/\1/p")
  rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.1f", $2 / 1024}' "$work/time.txt")
  echo "ours $1 $step $rss" >> "$work/results.txt"
  echo "round $1 ours:    $CLOCK step_ms=$step peak_rss_mb=$rss" \
       "($(grep summary "$work/ours.jsonl"))"
}
run_torch() {  # ROUND LAYOUT
  local flags=(--amp "$AMP" --clock "$CLOCK")
  [[ "$2" == channels_last ]] && flags+=(--channels-last)
  [[ "$2" == compiled ]] && flags+=(--compile)
  [[ "$2" == compiled && "$MODEL" == resnet50 ]] && flags+=(--channels-last)
  /usr/bin/time -v -o "$work/time.txt" "$TORCH_PY" "$HERE/torch/step.py" "$MODEL" \
    --batch "$BATCH" --image "$IMAGE" --seq "$SEQ" --layers "$LAYERS" --threads "$THREADS" \
    --iters "$ITERS" --warmup 1 "${flags[@]}" > "$work/torch.txt"
  local step rss
  step=$(sed -n 's/.*step_ms=\([0-9.]*\).*/\1/p' "$work/torch.txt")
  rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.1f", $2 / 1024}' "$work/time.txt")
  echo "torch:$2 $1 $step $rss" >> "$work/results.txt"
  echo "round $1 pytorch $2: $CLOCK step_ms=$step peak_rss_mb=$rss  ($(cat "$work/torch.txt"))"
}
run_torch_layouts() {
  local layout
  for layout in $LAYOUTS; do run_torch "$1" "$layout"; done
}

echo "# compare_step: $MODEL batch=$BATCH image=$IMAGE seq=$SEQ layers=$LAYERS" \
     "threads=$THREADS rounds=$ROUNDS iters=$ITERS clock=$CLOCK amp=$AMP" \
     "torch=$("$TORCH_PY" -c 'import torch; print(torch.__version__)') layouts: $LAYOUTS" \
     "load: $(cut -d' ' -f1-3 /proc/loadavg)"
machine_line
for round in $(seq 1 "$ROUNDS"); do
  if (( round % 2 )); then
    run_ours "$round"; run_torch_layouts "$round"
  else
    run_torch_layouts "$round"; run_ours "$round"
  fi
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/time -v -o "$work/time.txt" "$TORCH_PY" -c "import torch, torchvision"
IMPORT_RSS=$(awk -F': ' '/Maximum resident set size/ {printf "%.1f", $2 / 1024}' "$work/time.txt")

# Medians over rounds; PyTorch's layout is the one with the lower median step; the ratios
# ours / PyTorch are medians of the per-round ratios against it; then the summary line.
"$TORCH_PY" - "$work/results.txt" "$MODEL" "$BATCH" "$THREADS" "$ROUNDS" "$ITERS" "$CLOCK" "$AMP" \
  "$IMPORT_RSS" <<'PYEOF'
import json, statistics, sys
path, model, batch, threads, rounds, iters, clock, amp, import_rss = sys.argv[1:]
sides = {}
for side, rnd, step, rss in (line.split() for line in open(path)):
    sides.setdefault(side, {})[int(rnd)] = (float(step), float(rss))
med = lambda side, i: round(statistics.median(v[i] for v in side.values()), 1)
layouts = {k.split(":")[1]: v for k, v in sides.items() if k.startswith("torch:")}
best = min(layouts, key=lambda k: med(layouts[k], 0))
ours, torch = sides["ours"], layouts[best]
ratio = [statistics.median(ours[k][i] / torch[k][i] for k in ours) for i in (0, 1)]
for name, side in layouts.items():
    r = statistics.median(ours[k][0] / side[k][0] for k in ours)
    print(f"# pytorch {name}: median step_ms {med(side, 0)}, peak_rss_mb {med(side, 1)}, "
          f"ours / it {r:.3f}" + ("  <- the faster: compared" if name == best else ""))
print(f"# medians over {rounds} round(s)        ours    pytorch   ours/pytorch")
for i, what in enumerate([f"step_ms ({clock})", "peak_rss_mb"]):
    print(f"{what:24s} {med(ours, i):10.1f} {med(torch, i):10.1f}   {ratio[i]:.3f}")
print(f"# pytorch's peak_rss_mb for the import alone: {import_rss}")
print(json.dumps({"bench": "compare_step", "summary": True, "model": model,
                  "batch": int(batch), "threads": int(threads), "rounds": int(rounds),
                  "iters": int(iters), "clock": clock, "amp": amp, "torch_layout": best,
                  "ours_step_ms": med(ours, 0), "torch_step_ms": med(torch, 0),
                  "ours_peak_rss_mb": med(ours, 1), "torch_peak_rss_mb": med(torch, 1),
                  "time_ratio": round(ratio[0], 3), "memory_ratio": round(ratio[1], 3),
                  "torch_import_rss_mb": float(import_rss)}))
PYEOF
