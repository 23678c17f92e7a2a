#!/usr/bin/env bash
# bench/compare_overlap.sh — DDP on one machine with every mode INTERLEAVED in one process:
# ours (bench_overlap: local, flat, no-overlap, ddp) against PyTorch's (bench/torch/ddp_overlap.py:
# local, flat, ddp), the two frameworks alternating ROUNDS times (the one that goes first swaps
# every round). Where bench/compare_ddp.sh starts a process per mode (so a host whose speed
# drifts between runs moves one mode and not another), here each cycle runs one iteration of
# every mode seconds apart, and the ratios are taken within a cycle: ddp/local, no-overlap/local,
# and hidden = (flat - ddp) / (flat - local). Prints each run's summary, then per framework the
# medians over all cycles of all rounds, and a JSON summary line.
#
#   bench/compare_overlap.sh [MODEL] [BATCH] [ROUNDS] [CYCLES]
#       MODEL resnet50|resnet18|bert|bert-tiny (default resnet50), BATCH per rank 4, ROUNDS 2, CYCLES 6
#   env: BUILD=build, THREADS=1 (per rank), AMP=off|bf16, BUCKET_MB=25, IMAGE=224, TORCH_PY,
#        MODES (ours; default local,flat,no-overlap,ddp; add ddp-view for gradient_as_bucket_view,
#        ddp-copy for the plain copies of LOCKSTEP_DDP_COPY_OUT_BY_REFERENCE=0, ddp-nosink for
#        ddp without its gradient sinks, LOCKSTEP_DDP_GRAD_SINKS=0, ddp-nochecks / ddp-nocollchecks
#        for ddp without its default checks / its collective checks: bench/collective_checks.sh)
# Memory: one replica per mode and rank (BERT-base, 4 modes, 2 ranks: ~12 GB).
# Read before: bench/bench_overlap.cpp, bench/torch/ddp_overlap.py, bench/compare_ddp.sh.
# Read next: docs/results/evaluation.md.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/.."
model=${1:-resnet50} batch=${2:-4} rounds=${3:-2} cycles=${4:-6}
build=${BUILD:-build} threads=${THREADS:-1} amp=${AMP:-off} bucket=${BUCKET_MB:-25}
image=${IMAGE:-224} modes=${MODES:-local,flat,no-overlap,ddp}
source "$HERE/compare_setup.sh"
compare_setup compare_overlap bench_overlap batch rounds cycles threads image

ours() {
  "$build/bin/lockstep-run" --nproc-per-node 2 --master-port $((29700 + RANDOM % 500)) -- \
    "$build/bin/bench_overlap" --model "$model" --batch "$batch" --image "$image" --cycles "$cycles" \
    --threads "$threads" --modes "$modes" --bucket-mb "$bucket" --amp "$amp" >"$out/log" 2>&1 ||
    { tail -n 20 "$out/log" >&2; die "bench_overlap failed"; }
}
theirs() {
  "$TORCH_PY" "$HERE/torch/ddp_overlap.py" "$model" --world 2 --batch "$batch" --image "$image" \
    --cycles "$cycles" --threads "$threads" --bucket-mb "$bucket" --amp "$amp" \
    --port $((29700 + RANDOM % 500)) >"$out/log" 2>&1 ||
    { tail -n 20 "$out/log" >&2; die "ddp_overlap.py failed"; }
}

echo "# compare_overlap: $model batch/rank=$batch world=2 threads/rank=$threads rounds=$rounds cycles=$cycles amp=$amp bucket_mb=$bucket torch=$("$TORCH_PY" -c 'import torch; print(torch.__version__)') load: $(cut -d' ' -f1-3 /proc/loadavg)"
machine_line
for ((r = 1; r <= rounds; ++r)); do
  sides=(ours theirs)
  ((r % 2 == 0)) && sides=(theirs ours)
  for side in "${sides[@]}"; do
    $side
    sed -i 's/^\[rank [0-9]*\] //' "$out/log"  # lockstep-run's prefix
    grep '"summary": *true' "$out/log" | sed "s/^/round $r $side /"
    grep -v '"summary": *true' "$out/log" | grep '"warmup": *false' | sed "s/^/$side $r /" >>"$out/iters"
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out/iters" <<'EOF'
import collections, json, statistics, sys
runs = collections.defaultdict(lambda: collections.defaultdict(dict))  # side -> (round, cycle) -> mode -> ms
for line in open(sys.argv[1]):
    side, rnd, rec = line.split(" ", 2)
    r = json.loads(rec)
    runs[side][(rnd, r["cycle"])][r["mode"]] = r["iter_ms"]
summary = {"bench": "compare_overlap", "summary": True}
print("# medians over every cycle of every round (ms; ratios within a cycle)")
for side, name in (("ours", "lockstep"), ("theirs", "pytorch")):
    cycles = list(runs[side].values())
    modes = sorted({m for c in cycles for m in c}, key=["local", "flat", "no-overlap", "ddp", "ddp-view", "ddp-copy", "ddp-nosink",
                                                             "ddp-nochecks", "ddp-nocollchecks"].index)
    row = {m: statistics.median(c[m] for c in cycles) for m in modes}
    ratios = {m: statistics.median(c[m] / c["local"] for c in cycles) for m in modes if m != "local"}
    hid = [(c["flat"] - c["ddp"]) / (c["flat"] - c["local"]) for c in cycles if c["flat"] > c["local"]]
    hidden = statistics.median(hid) if hid else float("nan")
    print("%-9s %s | %s | hidden %.0f%% (%d of %d cycles with flat > local)" % (
        name, " ".join("%s %.0f" % (m, row[m]) for m in modes),
        " ".join("%s/local %.3f" % (m, ratios[m]) for m in ratios), 100 * hidden, len(hid), len(cycles)))
    for m in modes:
        summary["%s_%s_ms" % (name, m)] = round(row[m], 1)
    for m in ratios:
        summary["%s_%s_over_local" % (name, m)] = round(ratios[m], 4)
    summary[name + "_hidden"] = round(hidden, 4)
    summary[name + "_cycles"] = len(cycles)
summary["ddp_ratio"] = round(summary["lockstep_ddp_ms"] / summary["pytorch_ddp_ms"], 3)
print("ddp iteration ours / pytorch: %.3f" % summary["ddp_ratio"])
print(json.dumps(summary))
EOF
