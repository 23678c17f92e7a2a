# bench/figures/common.sh — sourced by every figure script: paths, and one function per
# way of running a benchmark, each appending its summary JSON line (tagged with the
# figure's own fields and the machine's load) to a JSON-lines file that plot.py reads.
#
#   ours_ddp  OUT.jsonl TAGS WORLD bench_ddp-flags...   lockstep: bench_ddp under lockstep-run
#   torch_ddp OUT.jsonl TAGS WORLD torch_ddp_bench-flags...   PyTorch: torch_ddp_bench.py
# TAGS is a JSON fragment merged into the record, e.g. '"fig":"7","label":"ours"'.
# Every run gets a fresh rendezvous port below Linux's ephemeral range (32768+), so neither
# TIME_WAIT of the previous run nor another program's outgoing connection holds it.
# A run that fails or exceeds RUN_TIMEOUT seconds (default 900) is retried once with a new
# port (a shared machine can kill or starve a rank), then the script stops.
# Environment: BUILD (default build), OUT (default docs/results/figures), ROUNDS (1),
# PY (/usr/bin/python3, Debian's, with python3-matplotlib: plots and JSON), TORCH_PY (PyTorch's
# runs: the newest PyTorch from PyPI in the venv of bench/torch/venv.sh, made on first use),
# RUN_TIMEOUT.
#
# Read before: bench/bench_ddp.cpp, bench/figures/torch_ddp_bench.py.
# Read next: bench/figures/plot.py, any bench/figures/fig*.sh.
set -euo pipefail

FIG_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$FIG_DIR/../.." && pwd)
BUILD=${BUILD:-$REPO/build}
[[ "$BUILD" = /* ]] || BUILD="$REPO/$BUILD"
OUT=${OUT:-$REPO/docs/results/figures}
ROUNDS=${ROUNDS:-1}
PY=${PY:-/usr/bin/python3}
TORCH_BENCH="$FIG_DIR/torch_ddp_bench.py"
export OMP_NUM_THREADS=1
source "$FIG_DIR/../openblas_coretype.sh"  # a PyTorch linked to OpenBLAS: its best kernels
source "$FIG_DIR/../torch/venv.sh"         # torch_python sets TORCH_PY
mkdir -p "$OUT"
RUN_TIMEOUT=${RUN_TIMEOUT:-900}
_port=$((20000 + RANDOM % 10000))

need_bin() {
  for b in "$@"; do
    [[ -x "$BUILD/bin/$b" ]] || {
      echo "figures: $BUILD/bin/$b not found; build it: cmake --build $BUILD --target $*" >&2
      exit 1
    }
  done
}

# Sets PORT to a fresh port (call it directly, not in $(...): a subshell would not advance it).
next_port() {
  _port=$((_port + 3))
  ((_port < 32000)) || _port=$((20000 + RANDOM % 1000))
  PORT=$_port
}

load1() { cut -d' ' -f1 /proc/loadavg; }

# Appends {TAGS, "load":L, <summary fields>} to FILE; the summary line is the one with
# "summary":true (a launcher may prefix it with "[rank 0] ").
_record() {
  local file=$1 tags=$2 log=$3
  local line
  line=$(grep -a '"summary": *true' "$log" | tail -1 | sed 's/^\[rank 0\] //') || true
  if [[ -z "$line" ]]; then
    echo "figures: no summary line; output was:" >&2
    tail -20 "$log" >&2
    return 1
  fi
  echo "{${tags},\"load\":$(load1),${line#\{}" >> "$file"
  echo "  $(echo "$line" | cut -c1-220)" >&2
}

# Runs "$@" with a time limit, output to LOG; one retry. The command line is rebuilt for the
# retry by the caller-supplied function, so it gets a new port.
_run_logged() {  # LOG FUNCTION ARGS... (FUNCTION prints nothing; it runs the benchmark)
  local log=$1
  shift
  local try
  for try in 1 2; do
    if "$@" > "$log" 2>&1; then return 0; fi
    echo "figures: run failed or timed out (try $try/2); its output ends with:" >&2
    tail -8 "$log" >&2
  done
  return 1
}

_ours() {  # WORLD bench_ddp-flags...
  local world=$1
  shift
  if [[ "$world" == 1 ]]; then
    timeout "$RUN_TIMEOUT" "$BUILD/bin/bench_ddp" "$@"
  else
    next_port
    timeout "$RUN_TIMEOUT" "$BUILD/bin/lockstep-run" --nproc-per-node "$world" \
      --master-port "$PORT" -- "$BUILD/bin/bench_ddp" "$@"
  fi
}

_torch() {  # WORLD torch_ddp_bench-flags...
  local world=$1
  shift
  next_port
  torch_python
  timeout "$RUN_TIMEOUT" "$TORCH_PY" "$TORCH_BENCH" --world "$world" --port "$PORT" "$@"
}

ours_ddp() {
  local file=$1 tags=$2 world=$3
  shift 3
  local log
  log=$(mktemp)
  echo "figures: lockstep world=$world $*" >&2
  _run_logged "$log" _ours "$world" "$@" || { rm -f "$log"; return 1; }
  _record "$file" "$tags" "$log"
  rm -f "$log"
}

torch_ddp() {
  local file=$1 tags=$2 world=$3
  shift 3
  local log
  log=$(mktemp)
  echo "figures: pytorch world=$world $*" >&2
  _run_logged "$log" _torch "$world" "$@" || { rm -f "$log"; return 1; }
  _record "$file" "$tags" "$log"
  rm -f "$log"
}

# Starts a figure: a fresh FILE (the previous run's records are replaced).
# select_models: sets the array MODELS to the bench_ddp model flag lists a DDP figure sweeps:
# $MODELS if given (';'-separated, e.g. MODELS="--model resnet18 --image 32 --batch 2;--model
# bert-tiny"), the paper's ResNet50 224 and 12-layer BERT-base with FULL=1, else the 2-core
# defaults (ResNet18 64x64, BERT-base widths with 2 layers).
select_models() {
  if [[ -n "${MODELS:-}" ]]; then
    IFS=';' read -ra MODELS <<< "$MODELS"
  elif [[ "${FULL:-0}" == 1 ]]; then
    MODELS=("--model resnet50 --image 224 --batch 4" "--model bert --layers 12 --seq 128 --batch 2")
  else
    MODELS=("--model resnet18 --image 64 --batch 4" "--model bert --layers 2 --seq 32 --batch 2")
  fi
}

begin_figure() {
  local file=$1
  : > "$file"
  echo "figures: writing $file (load $(load1), $(getconf _NPROCESSORS_ONLN) cores)" >&2
}
