#!/usr/bin/env bash
# bench/compare_ddp.sh — DDP on one machine, ours (bench_ddp) vs PyTorch (bench/torch/ddp.py).
#
# Runs 2 ranks of each, ALTERNATELY, ROUNDS times (the one that goes first swaps every
# round), in three modes each (ours in four): local (no communication: the compute-only baseline), flat
# (one AllReduce of every gradient after backward: nothing overlapped) and ddp (bucketed
# AllReduce overlapped with backward); ours also in no-overlap (the same buckets, every one
# launched when backward ends: DDPOptions().overlap(false); PyTorch has no such switch). Same model, batch per rank, threads per rank, Gloo
# over loopback, timed iterations after one warm-up. AMP=bf16 runs both under autocast
# (bench_ddp --amp bf16; ddp.py --amp bf16, i.e. torch.autocast + channels_last). Prints
# each run, then per framework the medians over rounds: local, flat and ddp ms per
# iteration, ddp/local (the cost of data parallelism) and "hidden", the share of flat's
# communication time that ddp's overlap hides, (flat - ddp) / (flat - local); then ours /
# PyTorch for the ddp iteration, and a JSON summary line.
#
#   bench/compare_ddp.sh [MODEL] [BATCH] [ROUNDS] [ITERS]
#       MODEL resnet50|resnet18|bert|bert-tiny (default resnet50), BATCH per rank 4, ROUNDS 3, ITERS 3
#   env: BUILD=build, THREADS=1 (per rank), AMP=off|bf16 (default off), BUCKET_MB=25,
#        IMAGE=224 (ResNet input size), TORCH_PY, VIEW=1 (ours also in ddp-view: ddp with
#        DDPOptions().gradient_as_bucket_view(true), i.e. bench_ddp --bucket-view 1)
# With 2 ranks of 1 thread the run takes both cores of a 2-core machine: other work on it
# shows in every number (the load is printed).
# Read before: bench/bench_ddp.cpp, bench/torch/ddp.py. Read next: docs/results/bf16.md.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/.."
model=${1:-resnet50} batch=${2:-4} rounds=${3:-3} iters=${4:-3}
build=${BUILD:-build} threads=${THREADS:-1} amp=${AMP:-off} bucket=${BUCKET_MB:-25}
image=${IMAGE:-224} view=${VIEW:-0}
source "$HERE/compare_setup.sh"
compare_setup compare_ddp bench_ddp batch rounds iters threads image
[[ $view == 0 || $view == 1 ]] || die "VIEW must be 0 or 1, got '$view'"

ours() {  # mode -> ms (ddp-view: ddp with gradients as bucket views)
  local mode=$1 extra=()
  [[ $mode == ddp-view ]] && mode=ddp extra=(--bucket-view 1)
  "$build/bin/lockstep-run" --nproc-per-node 2 --master-port $((29700 + RANDOM % 500)) -- \
    "$build/bin/bench_ddp" --model "$model" --batch "$batch" --image "$image" --iters "$iters" --threads "$threads" \
    --mode "$mode" "${extra[@]}" --bucket-mb "$bucket" --amp "$amp" >"$out/log" 2>&1 ||
    { tail -n 20 "$out/log" >&2; die "bench_ddp --mode $1 failed"; }
  grep -o '"summary":true.*' "$out/log" | grep -o '"iter_ms":[0-9.]*' | head -n1 | cut -d: -f2
}
theirs() {  # mode -> ms
  "$TORCH_PY" "$HERE/torch/ddp.py" "$model" --world 2 --batch "$batch" --image "$image" --iters "$iters" \
    --threads "$threads" --mode "$1" --bucket-mb "$bucket" --amp "$amp" \
    --port $((29700 + RANDOM % 500)) >"$out/log" 2>&1 ||
    { tail -n 20 "$out/log" >&2; die "ddp.py --mode $1 failed"; }
  grep -o 'iter_ms=[0-9.]*' "$out/log" | cut -d= -f2
}

echo "# compare_ddp: $model batch/rank=$batch world=2 threads/rank=$threads rounds=$rounds iters=$iters amp=$amp bucket_mb=$bucket torch=$("$TORCH_PY" -c 'import torch; print(torch.__version__)') load: $(cut -d' ' -f1-3 /proc/loadavg)"
machine_line
for ((r = 1; r <= rounds; ++r)); do
  sides=(ours theirs)
  ((r % 2 == 0)) && sides=(theirs ours)
  for side in "${sides[@]}"; do
    modes=(local flat ddp)
    [[ $side == ours ]] && modes=(local flat no-overlap ddp)
    [[ $side == ours && $view == 1 ]] && modes+=(ddp-view)
    for mode in "${modes[@]}"; do
      ms=$($side "$mode")
      echo "round $r $side $mode iter_ms=$ms"
      echo "$side $mode $ms" >>"$out/rows"
    done
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out/rows" "$model" "$batch" "$amp" <<'EOF'
import json, statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {(s, m): statistics.median(float(v) for s2, m2, v in rows if (s2, m2) == (s, m))
       for s in ("ours", "theirs") for m in ("local", "flat", "ddp")}
print("# medians over rounds, ms per iteration")
print("%-9s %8s %8s %8s %8s %10s %7s" % ("", "local", "flat", "no-ovl", "ddp", "ddp/local", "hidden"))
summary = {"bench": "compare_ddp", "summary": True, "model": sys.argv[2], "batch": int(sys.argv[3]),
           "world": 2, "amp": sys.argv[4]}
for side, name in (("ours", "lockstep"), ("theirs", "pytorch")):
    l, f, d = med[(side, "local")], med[(side, "flat")], med[(side, "ddp")]
    hidden = (f - d) / (f - l) if f > l else float("nan")
    n = [float(v) for s2, m2, v in rows if (s2, m2) == (side, "no-overlap")]
    no = statistics.median(n) if n else float("nan")
    print("%-9s %8.0f %8.0f %8s %8.0f %10.3f %6.0f%%" % (name, l, f, "%.0f" % no if n else "-", d, d / l,
                                                         100 * hidden))
    if n:
        summary[name + "_no_overlap_ms"] = no
    v = [float(x) for s2, m2, x in rows if (s2, m2) == (side, "ddp-view")]
    if v:
        dv = statistics.median(v)
        print("%-9s ddp-view (gradient_as_bucket_view) %.0f ms, /local %.3f, hidden %.0f%%"
              % (name, dv, dv / l, 100 * (f - dv) / (f - l) if f > l else float("nan")))
        summary.update({name + "_ddp_view_ms": dv, name + "_ddp_view_over_local": round(dv / l, 3)})
    summary.update({name + "_local_ms": l, name + "_flat_ms": f, name + "_ddp_ms": d,
                    name + "_ddp_over_local": round(d / l, 3), name + "_hidden": round(hidden, 3)})
summary["ddp_ratio"] = round(med[("ours", "ddp")] / med[("theirs", "ddp")], 3)
print("ddp iteration ours / pytorch: %.3f" % summary["ddp_ratio"])
print(json.dumps(summary))
EOF
