#!/usr/bin/env bash
# bench/hosts.sh — simulated hosts on one machine: N network namespaces joined through a
# bridge, every link capped by tc tbf at a chosen rate, one rank per namespace. This is
# the paper's cross-machine regime (communication limited by the network, not by memory
# copies).
#
#   bench/hosts.sh up N RATE             create the hosts (RATE as tc says it: 1gbit, 2gbit, 10gbit)
#   bench/hosts.sh down                  remove them
#   bench/hosts.sh run N RATE -- CMD...  create, run CMD once in every host, remove
#   bench/hosts.sh anchor [RATE] [ITERS] [ROUNDS]   the issue's overlap anchor (below)
#
# Topology: namespace ${P}sw holds bridge br0; host i (0..N-1) is namespace ${P}h$i with
# interface h$i (address 198.18.0.(i+1)/24; 198.18.0.0/15 is reserved for benchmarks)
# joined by a veth pair to port p$i on the bridge. Both ends of every pair get
# `tbf rate RATE burst 1mb latency 100ms`, so each host sends and receives at most RATE.
# P is $HOSTS_PREFIX (default lsx). `run` and `anchor` remove everything on exit (trap),
# also on Ctrl-C or an error; `up` refuses when hosts with the prefix already exist.
#
# In host i, CMD runs with RANK=i WORLD_SIZE=N MASTER_ADDR=198.18.0.1 MASTER_PORT=29600
# (override with MASTER_PORT), LOCKSTEP_SOCKET_IFNAME=h$i (lockstep's Gloo group) and
# GLOO_SOCKET_IFNAME=h$i (PyTorch's), OMP_NUM_THREADS=1. Rank 0's output goes to stdout,
# the others' to files whose tail is shown if they fail.
#
# anchor: the issue's measurement. ResNet50 (224x224), batch 4 per rank, 2 hosts at RATE
# (default 2gbit), modes local / flat / ddp, lockstep's bench_ddp and PyTorch's
# bench/torch/ddp.py --env alternating, ROUNDS rounds (default 1) of 1 warm-up + ITERS
# (default 2) timed iterations each; prints per mode the median iteration ms, then
# DDP/local and the share of communication hidden = (flat - ddp) / (flat - local), and
# appends the records to $OUT/anchor.jsonl (OUT default docs/results/figures). BUCKET_MB
# (default 25, DDP's default) sets bucket_cap_mb for both frameworks. lockstep's records also
# carry the measured breakdown (comm_wait_ms: communication left exposed after backward).
# Needs root (ip netns, tc). Env: BUILD (default build), PY (/usr/bin/python3, for the summary),
# TORCH_PY (default: the venv of bench/torch/venv.sh).
#
# Read before: bench/netns.sh (the namespaces), bench/bench_ddp.cpp, bench/torch/ddp.py.
# Read next: docs/results/evaluation.md.
set -euo pipefail

P=${HOSTS_PREFIX:-lsx}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
BUILD=${BUILD:-$REPO/build}
[[ "$BUILD" = /* ]] || BUILD="$REPO/$BUILD"
PY=${PY:-/usr/bin/python3}
source "$HERE/torch/venv.sh"
source "$HERE/netns.sh"  # netns_up / netns_down: the namespaces and veths
OUT=${OUT:-$REPO/docs/results/figures}

die() { echo "hosts.sh: $*" >&2; exit 1; }

existing() { netns_list "$P"; }

hosts_up() {  # N RATE
  local n=$1 rate=$2
  [[ "$n" =~ ^[0-9]+$ && "$n" -ge 1 && "$n" -le 200 ]] || die "N must be 1..200, got '$n'"
  [[ -z "$(existing)" ]] || die "namespaces with prefix '$P' exist already (another run?): $(existing | tr '\n' ' ') — run 'bench/hosts.sh down' or set HOSTS_PREFIX"
  netns_up "$P" "$n" "$rate" || die "could not make the hosts (see above)"
  echo "hosts.sh: $n hosts ${P}h0..${P}h$((n - 1)) (198.18.0.1..$n) through ${P}sw at $rate" >&2
}

hosts_down() { netns_down "$P"; }

RANK_PIDS=()
LOGDIR=""
cleanup() {
  local pid
  for pid in "${RANK_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  hosts_down
  [[ -n "$LOGDIR" ]] && rm -rf "$LOGDIR"
  return 0
}

# Runs CMD in hosts 0..N-1 (created already); returns rank 0's status, or the first
# failing rank's.
run_ranks() {  # N CMD...
  local n=$1
  shift
  local port=${MASTER_PORT:-29600} status=0 i pid
  LOGDIR=${LOGDIR:-$(mktemp -d)}
  RANK_PIDS=()
  rank_env() {
    echo RANK="$1" WORLD_SIZE="$n" MASTER_ADDR=198.18.0.1 MASTER_PORT="$port" \
      LOCKSTEP_SOCKET_IFNAME="h$1" GLOO_SOCKET_IFNAME="h$1" OMP_NUM_THREADS=1
  }
  for ((i = 1; i < n; ++i)); do
    # shellcheck disable=SC2046  # rank_env prints VAR=value words
    ip netns exec "${P}h$i" env $(rank_env "$i") "$@" > "$LOGDIR/rank$i.log" 2>&1 &
    RANK_PIDS+=($!)
  done
  # shellcheck disable=SC2046
  ip netns exec "${P}h0" env $(rank_env 0) "$@" || status=$?
  for ((i = 1; i < n; ++i)); do
    pid=${RANK_PIDS[$((i - 1))]}
    if ! wait "$pid"; then
      echo "hosts.sh: rank $i failed; its output ends with:" >&2
      tail -15 "$LOGDIR/rank$i.log" >&2
      [[ $status != 0 ]] || status=1
    fi
  done
  RANK_PIDS=()
  return $status
}

anchor() {  # RATE ITERS ROUNDS
  local rate=${1:-2gbit} iters=${2:-2} rounds=${3:-1}
  [[ -x "$BUILD/bin/bench_ddp" ]] || die "$BUILD/bin/bench_ddp not found; build target bench_ddp"
  torch_python || die "no Python with torch (bench/torch/venv.sh)"
  mkdir -p "$OUT"
  local file="$OUT/anchor.jsonl" log line ms bucket=${BUCKET_MB:-25}
  LOGDIR=$(mktemp -d)
  hosts_up 2 "$rate"
  log="$LOGDIR/run.log"
  for ((round = 1; round <= rounds; ++round)); do
    for mode in local flat ddp; do
      echo "hosts.sh: anchor round $round/$rounds: lockstep $mode (load $(cut -d' ' -f1 /proc/loadavg))" >&2
      MASTER_PORT=$((29600 + RANDOM % 1000)) run_ranks 2 "$BUILD/bin/bench_ddp" --model resnet50 \
        --image 224 --batch 4 --warmup 1 --iters "$iters" --mode "$mode" --bucket-mb "$bucket" > "$log" 2>&1 ||
        { tail -20 "$log" >&2; die "lockstep $mode failed"; }
      line=$(grep '"summary":true' "$log")
      echo "{\"anchor\":true,\"rate\":\"$rate\",\"round\":$round,\"load\":$(cut -d' ' -f1 /proc/loadavg),${line#\{}" >> "$file"
      echo "  $line" | cut -c1-200 >&2
      echo "hosts.sh: anchor round $round/$rounds: pytorch $mode" >&2
      MASTER_PORT=$((29600 + RANDOM % 1000)) run_ranks 2 "$TORCH_PY" "$HERE/torch/ddp.py" resnet50 --env \
        --mode "$mode" --batch 4 --iters "$iters" --bucket-mb "$bucket" > "$log" 2>&1 ||
        { tail -20 "$log" >&2; die "pytorch $mode failed"; }
      ms=$(grep -o 'iter_ms=[0-9.]*' "$log" | cut -d= -f2)
      echo "{\"anchor\":true,\"rate\":\"$rate\",\"round\":$round,\"load\":$(cut -d' ' -f1 /proc/loadavg),\"framework\":\"pytorch\",\"model\":\"resnet50\",\"image\":224,\"batch\":4,\"mode\":\"$mode\",\"world\":2,\"bucket_mb\":$bucket,\"iters\":$iters,\"iter_ms\":$ms}" >> "$file"
      echo "  pytorch $mode iter_ms=$ms" >&2
    done
  done
  # The summary over this run's records (the file may hold earlier runs: take the last ones).
  "$PY" - "$file" "$((rounds * 6))" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()][-int(sys.argv[2]):]
print("ResNet50 batch 4/rank, 2 hosts at %s, bucket_cap_mb %g, medians over %d round(s)"
      % (rows[0]["rate"], rows[0]["bucket_mb"], len(rows) // 6))
print("%-10s %8s %8s %8s %10s %7s" % ("", "local", "flat", "ddp", "ddp/local", "hidden"))
for fw in ("lockstep", "pytorch"):
    m = {mode: statistics.median(r["iter_ms"] for r in rows if r.get("framework") == fw and r["mode"] == mode)
         for mode in ("local", "flat", "ddp")}
    hidden = (m["flat"] - m["ddp"]) / (m["flat"] - m["local"]) if m["flat"] != m["local"] else float("nan")
    print("%-10s %8.0f %8.0f %8.0f %10.3f %6.0f%%" % (fw, m["local"], m["flat"], m["ddp"], m["ddp"] / m["local"], 100 * hidden))
# lockstep's direct measure: communication exposed after backward (comm_wait_ms), ddp vs flat.
w = {mode: statistics.median(r["comm_wait_ms"] for r in rows if r.get("framework") == "lockstep" and r["mode"] == mode)
     for mode in ("flat", "ddp")}
print("lockstep comm_wait_ms: flat %.0f, ddp %.0f -> %.0f%% of the wait hidden by overlap"
      % (w["flat"], w["ddp"], 100 * (1 - w["ddp"] / w["flat"])))
PYEOF
}

case "${1:-}" in
up)
  [[ $# -eq 3 ]] || die "usage: hosts.sh up N RATE"
  hosts_up "$2" "$3" ;;
down) hosts_down ;;
run)
  [[ $# -ge 5 && "$4" == "--" ]] || die "usage: hosts.sh run N RATE -- CMD..."
  n=$2 rate=$3
  shift 4
  trap cleanup EXIT INT TERM
  hosts_up "$n" "$rate"
  run_ranks "$n" "$@" ;;
anchor)
  shift
  trap cleanup EXIT INT TERM
  anchor "$@" ;;
*) die "usage: hosts.sh up N RATE | down | run N RATE -- CMD... | anchor [RATE] [ITERS] [ROUNDS]" ;;
esac
