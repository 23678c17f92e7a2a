#!/usr/bin/env bash
# bench/figures/hooks.sh — communication hooks on real data (docs/ddp.md section 7): Fashion-MNIST with the
# small CNN under 2-rank DDP, trained once per hook from the same seed and data order:
#   none (DDP's own AllReduce), allreduce (the hook form of it: its curve must coincide),
#   fp16, bf16, powersgd rank 1 and rank 4 (plain AllReduce for the first START iterations).
# Left: training loss (rank 0's batch, 20-iteration moving mean) against iterations.
# Right: final test accuracy (10,000 images) per hook, labelled with the bytes each rank sends
# per synced iteration relative to the float32 AllReduce (wire_ratio, computed from the
# gradient shapes: see wire_ratio() in bench/bench_nosync_convergence.cpp).
# Loss curves do not depend on machine load (same seed, same data, same arithmetic), so they
# are trustworthy on this shared machine; the seconds in the summaries are not.
#   default: WORLD=2 BATCH=32 ITERS=480 START=10 (SGD lr 0.05 momentum 0.9, as fig11)
#   FULL=1: ITERS=1872 (one epoch of 60000 over 2 ranks x 32); ~2 min by default, ~6 min FULL
# Writes OUT/hooks.jsonl (per-iteration records and "summary": true ones), hooks.csv, hooks.png.
#
#   bench/figures/hooks.sh        env: BUILD=build OUT=docs/results/figures WORLD BATCH ITERS START HOOKS
#
# Read before: bench/bench_nosync_convergence.cpp, distributed/ddp/comm_hook.h,
# bench/figures/fig11.sh.
# Read next: docs/results/beyond_ddp.md.
source "$(dirname "$0")/common.sh"
WORLD=${WORLD:-2}
BATCH=${BATCH:-32}
if [[ "${FULL:-0}" == 1 ]]; then ITERS=${ITERS:-1872}; else ITERS=${ITERS:-480}; fi
START=${START:-10}
HOOKS=${HOOKS:-none allreduce fp16 bf16 powersgd:1 powersgd:4}
need_bin bench_nosync_convergence lockstep-run
file="$OUT/hooks.jsonl"
begin_figure "$file"

for spec in $HOOKS; do
  hook=${spec%%:*} rank=1 label=$hook
  if [[ "$spec" == *:* ]]; then rank=${spec##*:} label="$hook rank $rank"; fi
  echo "hooks: $label, batch $BATCH, $ITERS iterations" >&2
  log=$(mktemp)
  ok=0
  for try in 1 2; do  # one retry with a new port (see common.sh)
    next_port
    if timeout "$RUN_TIMEOUT" "$BUILD/bin/lockstep-run" --nproc-per-node "$WORLD" --master-port "$PORT" -- \
        "$BUILD/bin/bench_nosync_convergence" --batch "$BATCH" --iters "$ITERS" --comm-hook "$hook" \
        --powersgd-rank "$rank" --start-powersgd-iter "$START" > "$log" 2>&1; then ok=1; break; fi
    echo "hooks: run failed (try $try/2):" >&2
    tail -5 "$log" >&2
  done
  ((ok)) || { rm -f "$log"; exit 1; }
  sed 's/^\[rank 0\] //' "$log" | grep '^{"bench": *"nosync"' |
    "$PY" -c '
import json, sys
label, world, load = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
for line in sys.stdin:
    d = json.loads(line)
    d.update(fig="hooks", label=label, world=world, load=load)
    if d.get("summary"):
        print(json.dumps(d), file=sys.stderr)
    print(json.dumps(d))
' "$label" "$WORLD" "$(load1)" >> "$file"
  rm -f "$log"
done
# allreduce_hook is documented as bitwise DDP's own reduction: its losses must equal none's.
"$PY" - "$file" <<'PYEOF'
import json, sys
loss = {}
for line in open(sys.argv[1]):
    d = json.loads(line)
    if not d.get("summary"):
        loss.setdefault(d["label"], []).append(d["loss"])
if "none" in loss and "allreduce" in loss:
    same = loss["none"] == loss["allreduce"]
    print(f"hooks: allreduce hook losses {'equal' if same else 'DIFFER from'} no hook's, bitwise", file=sys.stderr)
    sys.exit(0 if same else 1)
PYEOF
"$PY" "$FIG_DIR/plot.py" hooks "$OUT"
