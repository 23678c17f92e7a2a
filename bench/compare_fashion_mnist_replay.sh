#!/usr/bin/env bash
# bench/compare_fashion_mnist_replay.sh [EPOCHS] — lockstep and PyTorch trained from the
# same start: for each seed, bench/torch/fashion_mnist_replay.py runs the reference CNN training
# (bench/torch/fashion_mnist.py with --seed SEED; PyTorch from bench/torch/venv.sh's venv or
# TORCH_PY) and records its initial
# weights and batch order; build/bin/bench_fashion_mnist_replay then trains lockstep from those
# weights on that order. Prints both runs' losses at a few steps of epoch 1 and test accuracy per
# epoch, per seed and the mean over seeds. This separates the implementations from the random
# draws that bench/compare_fashion_mnist.sh compares as well.
#   SEEDS="0 1 2 3 4" bench/compare_fashion_mnist_replay.sh 4      (default SEEDS=0)
# Env: BUILD (default build). Results: docs/results/fashion_mnist.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/openblas_coretype.sh
epochs=${1:-4}
seeds=${SEEDS:-0}
build=${BUILD:-build}
source bench/torch/venv.sh
torch_python
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for s in $seeds; do
  OMP_NUM_THREADS=1 "$TORCH_PY" bench/torch/fashion_mnist_replay.py "$s" "$out/$s" --epochs "$epochs" \
    | tee "$out/torch_$s.log"
  OMP_NUM_THREADS=1 "$build/bin/bench_fashion_mnist_replay" --dir "$out/$s" --epochs "$epochs" \
    | tee "$out/lockstep_$s.log"
done
echo
printf "%-5s %-10s %-14s %-14s\n" seed step lockstep_loss pytorch_loss
for s in $seeds; do
  paste <(awk '$1=="step"{print $2, $4}' "$out/lockstep_$s.log") <(awk '$1=="step"{print $4}' "$out/torch_$s.log") \
    | while read -r step a b; do printf "%-5s %-10s %-14s %-14s\n" "$s" "$step" "$a" "$b"; done
done
echo
acc() { awk -v e="$2" '$1=="epoch" && $2==e {print $6}' "$1"; }
printf "%-5s %-6s %-18s %-18s\n" seed epoch lockstep_accuracy pytorch_accuracy
for e in $(seq 1 "$epochs"); do
  for s in $seeds; do
    printf "%-5s %-6s %-18s %-18s\n" "$s" "$e" "$(acc "$out/lockstep_$s.log" "$e")" "$(acc "$out/torch_$s.log" "$e")"
  done
  printf "%-5s %-6s %-18s %-18s\n" mean "$e" \
    "$(for s in $seeds; do acc "$out/lockstep_$s.log" "$e"; done | awk '{t+=$1} END {printf "%.4f", t/NR}')" \
    "$(for s in $seeds; do acc "$out/torch_$s.log" "$e"; done | awk '{t+=$1} END {printf "%.4f", t/NR}')"
done
