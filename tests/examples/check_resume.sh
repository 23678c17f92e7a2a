#!/usr/bin/env bash
# tests/examples/check_resume.sh BIN_DIR — train_fashion_mnist resumed from a
# checkpoint ends bit-identical to an uninterrupted run: 2 epochs straight vs a
# run stopped after epoch 1 (--stop-after-epoch 1) + --resume for the second;
# the final checkpoints (model, optimizer state, metadata) must be the same
# bytes. Checked for the constant and the cosine learning-rate schedule (which
# resume replays). Skips (exit 77 with a message, CTest: Skipped) when the Fashion-MNIST data is
# not installed.
set -euo pipefail
bin="$1"
root=/usr/share/datasets/fashion-mnist
if [ ! -d "$root" ]; then echo "SKIP: $root missing (apt-get install dataset-fashion-mnist)"; exit 77; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for schedule in constant cosine; do
args=(--limit 1280 --batch 64 --log-every 1000 --schedule "$schedule")
# Fresh runs: --overwrite replaces the previous schedule's files.
"$bin/train_fashion_mnist" "${args[@]}" --epochs 2 --overwrite --checkpoint "$work/straight.safetensors" > "$work/straight.log"
"$bin/train_fashion_mnist" "${args[@]}" --epochs 2 --stop-after-epoch 1 --overwrite --checkpoint "$work/resumed.safetensors" > "$work/first.log"
"$bin/train_fashion_mnist" "${args[@]}" --epochs 2 --checkpoint "$work/resumed.safetensors" --resume > "$work/second.log"
grep -q "resumed from" "$work/second.log" || { echo "FAIL: the second run did not resume"; exit 1; }
if cmp -s "$work/straight.safetensors" "$work/resumed.safetensors"; then
  echo "resume ($schedule lr): identical checkpoints after 2 epochs"
  grep "epoch 2" "$work/straight.log" "$work/second.log"
else
  echo "FAIL: resumed training ($schedule lr) differs from uninterrupted training"
  cat "$work/straight.log" "$work/second.log"
  exit 1
fi
done
