#!/usr/bin/env bash
# tests/examples/check_ddp_demo.sh BIN_DIR — the README's main job, shortened:
# 2-rank DDP training of the Fashion-MNIST CNN through lockstep-run, 32 images
# per rank per step with the cosine lr, on the first 2,560 training images.
#  1. It trains and rank 0 reports the test accuracy.
#  2. It is the same training as one process with batch 64: rank r's i-th
#     sample is the shuffled list's element 2i + r, so each global batch of
#     2 x 32 is exactly the single process's batch of 64, and DDP averages the
#     two halves' mean losses — only the floating-point summation order
#     differs. The test accuracies must agree within 0.3 points.
#  3. A single process loads the DDP checkpoint (--resume) and trains on.
# Skips (exit 77 with a message, CTest: Skipped) when the Fashion-MNIST data is not installed.
set -euo pipefail
bin="$1"
root=/usr/share/datasets/fashion-mnist
if [ ! -d "$root" ]; then echo "SKIP: $root missing (apt-get install dataset-fashion-mnist)"; exit 77; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--limit 2560 --log-every 1000 --schedule cosine)
"$bin/lockstep-run" --nproc-per-node 2 -- "$bin/train_fashion_mnist" "${common[@]}" --epochs 1 \
  --batch 32 --checkpoint "$work/ddp.safetensors" > "$work/ddp.log" 2>&1 \
  || { echo "FAIL: DDP run failed"; cat "$work/ddp.log"; exit 1; }
"$bin/train_fashion_mnist" "${common[@]}" --epochs 1 --batch 64 \
  --checkpoint "$work/single.safetensors" > "$work/single.log"
acc() { awk '$0 ~ /epoch 1 train_loss/ {for (i = 1; i <= NF; ++i) if ($i == "test_accuracy") print $(i + 1)}' "$1"; }
a_ddp=$(acc "$work/ddp.log")
a_one=$(acc "$work/single.log")
[ -n "$a_ddp" ] || { echo "FAIL: no accuracy line from rank 0"; cat "$work/ddp.log"; exit 1; }
echo "test accuracy: 2-rank DDP (2 x 32) $a_ddp, one process (64) $a_one"
awk -v a="$a_ddp" -v b="$a_one" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.003) }' \
  || { echo "FAIL: DDP and single-process accuracies differ by more than 0.003"; exit 1; }
"$bin/train_fashion_mnist" "${common[@]}" --epochs 2 --batch 64 --resume \
  --checkpoint "$work/ddp.safetensors" > "$work/resumed.log"
grep -q "resumed from .* after epoch 1" "$work/resumed.log" \
  || { echo "FAIL: one process did not resume from the DDP checkpoint"; cat "$work/resumed.log"; exit 1; }
grep -q "^epoch 2 train_loss" "$work/resumed.log" \
  || { echo "FAIL: no epoch 2 after resuming"; cat "$work/resumed.log"; exit 1; }
echo "one process resumed from the DDP checkpoint and trained epoch 2"
