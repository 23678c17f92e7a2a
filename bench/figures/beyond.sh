#!/usr/bin/env bash
# bench/figures/beyond.sh — cost and benefit of the DDP features beyond the paper (README's
# "Beyond PyTorch DDP", docs/ddp.md sections 5-12), measured with bench_ddp under lockstep-run, one figure per part:
#   view     gradient_as_bucket_view: peak RSS and iteration time, copy vs view,
#            ResNet50 (IMAGE) and BERT-base widths with LAYERS layers, WORLD ranks
#   det      deterministic reduction (AllGather + rank-ordered sum) vs AllReduce, 2 and 4 ranks
#   autotune bucket_cap_mb chosen by autotune_buckets vs fixed 1, 5, 25, 100 MB (ResNet50)
#   syncbn   SyncBatchNorm (convert_sync_batchnorm) vs local BatchNorm (ResNet50)
#   static   find_unused_parameters off / on / on + static_graph (ResNet50)
#   rebuild  traced-order bucket rebuild off / on, on mlp-reversed (8 Linear(2048, 2048)
#            registered last-to-first, bucket_cap_mb 5: one bucket per layer)
# Every round runs every configuration of every part once, in that order (configurations
# alternate, so a load change hits all alike); plots and docs/results/beyond_ddp.md use
# medians over ROUNDS. Each record carries the 1-minute load average at its end ("load"):
# this machine is shared (2 cores, load 6-12 while other builds run), so times are noisy;
# peak RSS, bucket sizes and bytes are not.
#   default: ROUNDS=2 ITERS=5 WARMUP=2 WORLD=2 IMAGE=64 LAYERS=2 SEQ=32: 40 runs, about
#   15 min at load 3-5 on 2 cores, 12 min per round at load 10
#   PARTS="view det autotune syncbn static rebuild" selects parts.
# Writes OUT/beyond_<part>.jsonl, .csv and .png (bench/figures/plot.py beyond_<part>).
#
#   bench/figures/beyond.sh      env: BUILD=build OUT=docs/results/figures ROUNDS ITERS PARTS ...
#
# Read before: bench/bench_ddp.cpp, bench/figures/common.sh, docs/ddp.md (sections 5-12).
# Read next: docs/results/beyond_ddp.md.
ROUNDS=${ROUNDS:-2}  # before common.sh, whose default is 1
source "$(dirname "$0")/common.sh"
ITERS=${ITERS:-5}
WARMUP=${WARMUP:-2}
WORLD=${WORLD:-2}
IMAGE=${IMAGE:-64}
LAYERS=${LAYERS:-2}
SEQ=${SEQ:-32}
PARTS=${PARTS:-view det autotune syncbn static rebuild}
need_bin bench_ddp lockstep-run

RESNET=(--model resnet50 --image "$IMAGE" --batch 4)
BERT=(--model bert --layers "$LAYERS" --seq "$SEQ" --batch 2)
MLP=(--model mlp-reversed --batch 32 --bucket-mb 5)
COMMON=(--iters "$ITERS" --warmup "$WARMUP" --mode ddp)

for part in $PARTS; do begin_figure "$OUT/beyond_$part.jsonl"; done

run() {  # PART LABEL WORLD bench_ddp-flags...
  local part=$1 label=$2 world=$3
  shift 3
  ours_ddp "$OUT/beyond_$part.jsonl" "\"fig\":\"beyond_$part\",\"label\":\"$label\",\"round\":$round" \
    "$world" "${COMMON[@]}" "$@"
}

for ((round = 0; round < ROUNDS; ++round)); do
  echo "beyond: round $((round + 1))/$ROUNDS (load $(load1))" >&2
  for part in $PARTS; do
    case $part in
      view)
        for v in 0 1; do
          label=$([[ $v == 1 ]] && echo view || echo copy)
          run view "$label" "$WORLD" "${RESNET[@]}" --bucket-view $v
          run view "$label" "$WORLD" "${BERT[@]}" --bucket-view $v
        done ;;
      det)
        for w in 2 4; do
          for d in 0 1; do
            run det "$([[ $d == 1 ]] && echo deterministic || echo allreduce)" "$w" "${RESNET[@]}" --deterministic $d
          done
        done ;;
      autotune)
        run autotune auto "$WORLD" "${RESNET[@]}" --bucket-mb auto
        for mb in 1 5 25 100; do run autotune "$mb MB" "$WORLD" "${RESNET[@]}" --bucket-mb $mb; done ;;
      syncbn)
        for s in 0 1; do
          run syncbn "$([[ $s == 1 ]] && echo SyncBatchNorm || echo BatchNorm)" "$WORLD" "${RESNET[@]}" --sync-bn $s
        done ;;
      static)
        run static "find_unused 0" "$WORLD" "${RESNET[@]}" --find-unused 0 --static-graph 0
        run static "find_unused 1" "$WORLD" "${RESNET[@]}" --find-unused 1 --static-graph 0
        run static "find_unused 1 + static_graph" "$WORLD" "${RESNET[@]}" --find-unused 1 --static-graph 1 ;;
      rebuild)
        for r in 0 1; do
          run rebuild "rebuild $r" "$WORLD" "${MLP[@]}" --rebuild-buckets $r
        done ;;
      *) echo "beyond: unknown part '$part' (view det autotune syncbn static rebuild)" >&2; exit 2 ;;
    esac
  done
done
for part in $PARTS; do "$PY" "$FIG_DIR/plot.py" "beyond_$part" "$OUT"; done
