#!/usr/bin/env bash
# bench/figures/zero.sh — ZeroRedundancyOptimizer (docs/ddp.md section 14): BERT-base and ResNet50 with
# AdamW under DDP at 1, 2 and 4 ranks: plain (--zero 0), sharded state (--zero 1), sharded
# state overlapped with DDP's backward (--zero 1 --zero-overlap 1) and sharded gradients too
# (ZeRO-2, --zero 2), interleaved per world size. The overlapped modes split the parameters
# above 32 MB across the ranks (their default; Note [ZeRO split parameters]); SPLIT=1 adds
# them with every parameter whole (--zero-split-mb 0, labels zero-overlap-whole, zero2-whole).
# The overlapped modes broadcast on a second Gloo group and hand each bucket over piece by
# piece as it is reduced (the defaults; Note [ZeRO broadcast group]). SHARED=1 adds them on
# the shared group, whole (--zero-broadcast-group 0, labels zero-overlap-shared,
# zero2-shared: how they ran before) and in pieces (--zero-pieces 1, labels
# zero-overlap-shared-pieces, zero2-shared-pieces). Every mode's step() leaves the parameters
# to wait for their broadcasts in the next forward (Note [ZeRO broadcasts overlap the next
# forward]); WAIT=1 adds the three ZeRO modes with step() waiting for them (--zero-defer 0,
# labels zero-wait, zero-overlap-wait, zero2-wait).
# Left: optimizer state per rank (MB, the AdamW moments this rank holds) and the largest peak
# RSS of any rank; right: median iteration time; one row of panels per model. On this shared
# 2-core machine 4 ranks oversubscribe the cores (lockstep-run starts them anyway): times
# there measure contention as much as the optimizer, memory does not depend on load.
#   default: MODELS="bert resnet50" SEQ=64 BATCH=2 (BERT-base, 133M parameters)
#            RBATCH=4 (ResNet50, 25.6M parameters) ITERS=3 WARMUP=1 WORLDS="1 2 4" SPLIT=0 SHARED=0 WAIT=0
# Writes OUT/zero.jsonl (one summary record per run), zero.csv, zero.png.
#
#   bench/figures/zero.sh        env: BUILD=build OUT=docs/results/figures MODELS SEQ BATCH RBATCH ITERS WARMUP WORLDS SPLIT SHARED WAIT
#
# Read before: bench/bench_ddp.cpp, bench/bench_optimizer.h, distributed/zero/zero_redundancy_optimizer.h.
# Read next: docs/results/zero.md.
source "$(dirname "$0")/common.sh"
MODELS=${MODELS:-bert resnet50}
SEQ=${SEQ:-64}
BATCH=${BATCH:-2}
RBATCH=${RBATCH:-4}
ITERS=${ITERS:-3}
WARMUP=${WARMUP:-1}
WORLDS=${WORLDS:-1 2 4}
SPLIT=${SPLIT:-0}
SHARED=${SHARED:-0}
WAIT=${WAIT:-0}
# label:zero stage:overlap:split MB:pieces (-1 default, 0, 1):own broadcast group:defer waits
# (split -1: the optimizer's default, 32 MB with the overlap, 0 without)
configs=("plain:0:0:-1:-1:1:1" "zero:1:0:-1:-1:1:1" "zero-overlap:1:1:-1:-1:1:1" "zero2:2:0:-1:-1:1:1")
if [ "$WAIT" = 1 ]; then configs+=("zero-wait:1:0:-1:-1:1:0" "zero-overlap-wait:1:1:-1:-1:1:0" "zero2-wait:2:0:-1:-1:1:0"); fi
if [ "$SPLIT" = 1 ]; then configs+=("zero-overlap-whole:1:1:0:-1:1:1" "zero2-whole:2:0:0:-1:1:1"); fi
if [ "$SHARED" = 1 ]; then
  configs+=("zero-overlap-shared:1:1:0:-1:0:1" "zero2-shared:2:0:0:-1:0:1"
            "zero-overlap-shared-pieces:1:1:0:1:0:1" "zero2-shared-pieces:2:0:0:1:0:1")
fi
need_bin bench_ddp lockstep-run
file="$OUT/zero.jsonl"
begin_figure "$file"
for model in $MODELS; do
  if [ "$model" = bert ]; then shape=(--seq "$SEQ" --batch "$BATCH"); else shape=(--batch "$RBATCH"); fi
  for world in $WORLDS; do
    for cfg in "${configs[@]}"; do
      IFS=: read -r label zero overlap split pieces group defer <<< "$cfg"
      # bench_ddp refuses the --zero-* tuning flags without --zero (plain AdamW).
      tuning=()
      if [ "$zero" != 0 ]; then
        tuning=(--zero-overlap "$overlap" --zero-split-mb "$split" --zero-pieces "$pieces"
                --zero-broadcast-group "$group" --zero-defer "$defer")
      fi
      ours_ddp "$file" "\"fig\":\"zero\",\"label\":\"$label\"" "$world" --model "$model" "${shape[@]}" \
        --iters "$ITERS" --warmup "$WARMUP" --optimizer adamw --zero "$zero" "${tuning[@]}"
    done
  done
done
# The table of docs/results/zero.md (no matplotlib needed), then the figure.
"$PY" - "$file" <<'PYEOF'
import json, sys
print("| model | ranks | optimizer | iteration ms | fwd | bwd compute | comm wait | opt step | opt after last bucket (its shard step) | AdamW state MB per rank | peak RSS MB per rank | load |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for line in open(sys.argv[1]):
    d = json.loads(line)
    print(f"| {d['model']} | {d['world']} | {d['label']} | {d['iter_ms']:.0f} | {d['fwd_ms']:.0f} | {d['bwd_ms']:.0f} | {d['comm_wait_ms']:.0f} "
          f"| {d['opt_ms']:.0f} | {d['opt_tail_ms']:.0f} ({d.get('opt_tail_step_ms', d['opt_tail_ms']):.0f}) | {', '.join(f'{v:.0f}' for v in d['opt_state_mb_per_rank'])} "
          f"| {', '.join(f'{v:.0f}' for v in d['peak_rss_mb_per_rank'])} | {d['load']} |")
PYEOF
if "$PY" -c "import matplotlib" 2> /dev/null; then
  "$PY" "$FIG_DIR/plot.py" zero "$OUT"
else
  echo "zero: no matplotlib for $PY (apt install python3-matplotlib): table only, no zero.png" >&2
fi
