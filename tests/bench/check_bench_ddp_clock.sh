#!/usr/bin/env bash
# tests/bench/check_bench_ddp_clock.sh BIN_DIR — bench_ddp times the DDP users run.
# bench_ddp reads the end of backward compute with an identity node on the loss (Note
# [Backward clock], bench/bench_ddp.cpp). On 2 ranks (ResNet18 at 32x32, 2 timed steps),
# in ddp and no-overlap modes:
#  1. DDP's gradient sinks placed the gradients (gradients_placed > 0): the clock does
#     not turn them off, as a post-accumulate-grad hook of the benchmark's own would;
#  2. the clock fired inside backward: comm_wait_ms > 0 (it is 0 when no callback read
#     the clock) and bwd_ms + comm_wait_ms is at most the iteration.
# Read before: bench/bench_ddp.cpp.
set -euo pipefail
bin="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for mode in ddp no-overlap; do
  "$bin/lockstep-run" --nproc-per-node 2 -- "$bin/bench_ddp" --model resnet18 --image 32 --batch 2 \
    --iters 2 --mode "$mode" > "$work/$mode.log" 2>&1 \
    || { echo "FAIL: bench_ddp --mode $mode failed"; cat "$work/$mode.log"; exit 1; }
  grep -o '{"bench":"ddp","summary".*' "$work/$mode.log" > "$work/$mode.json" \
    || { echo "FAIL: no summary line from --mode $mode"; cat "$work/$mode.log"; exit 1; }
  /usr/bin/python3 - "$mode" "$work/$mode.json" <<'PY'
import json, sys
mode, path = sys.argv[1], sys.argv[2]
s = json.load(open(path))
placed, comm, bwd, it = s["gradients_placed"], s["comm_wait_ms"], s["bwd_ms"], s["iter_ms"]
print(f"{mode}: gradients_placed {placed}, bwd_ms {bwd}, comm_wait_ms {comm}, iter_ms {it}")
if placed <= 0:
    sys.exit(f"FAIL: {mode}: DDP's gradient sinks placed no gradient (the benchmark turned them off)")
if comm <= 0:
    sys.exit(f"FAIL: {mode}: comm_wait_ms is {comm}: the backward clock did not fire before DDP's finalize")
if bwd + comm > it:
    sys.exit(f"FAIL: {mode}: bwd_ms + comm_wait_ms ({bwd} + {comm}) exceeds the iteration ({it})")
PY
done
echo "PASS"
