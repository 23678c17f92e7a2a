#!/usr/bin/env bash
# bench/amp_fashion_mnist.sh — Fashion-MNIST in float32 and under bf16 autocast, seed by seed.
#
# Trains examples/train_fashion_mnist.cpp twice per seed, --amp off then --amp bf16 (the
# order swaps every seed), same seed, epochs, batch and one thread, and prints the test
# accuracy and examples/s of every epoch: per seed, then the mean over the seeds with the
# bf16 - float32 accuracy difference per epoch and the rate ratio bf16 / float32. The
# target of the bf16 work (docs/results/bf16.md): within 0.3 points at every epoch on the
# mean of 5 seeds, at >= 2x the examples/s.
#
#   SEEDS="0 1 2 3 4" bench/amp_fashion_mnist.sh [EPOCHS]      (defaults: SEEDS=0, EPOCHS=4)
#   env: BUILD=build (where bin/train_fashion_mnist is), LIMIT=0 / TEST_LIMIT=0 (train and
#        test on the first N images only; 0 = all), EXTRA (more train_fashion_mnist flags)
# Read before: examples/train_fashion_mnist.cpp. Read next: docs/results/bf16.md.
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=${1:-4}
seeds=${SEEDS:-0}
build=${BUILD:-build}
bin="$build/bin/train_fashion_mnist"
[[ -x $bin ]] || { echo "amp_fashion_mnist: $bin not found; build first (scripts/build.sh)" >&2; exit 2; }
[[ $epochs =~ ^[1-9][0-9]*$ ]] || { echo "amp_fashion_mnist: EPOCHS must be a positive integer, got '$epochs'" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run() {  # seed amp
  OMP_NUM_THREADS=1 "$bin" --epochs "$epochs" --threads 1 --seed "$1" --amp "$2" \
    --limit "${LIMIT:-0}" --test-limit "${TEST_LIMIT:-0}" --checkpoint "$out/$1.$2.safetensors" \
    ${EXTRA:-} >"$out/$1.$2" 2>&1 ||
    { echo "amp_fashion_mnist: seed $1 --amp $2 failed:" >&2; tail -n 5 "$out/$1.$2" >&2; exit 1; }
}

i=0
for s in $seeds; do
  if ((i % 2 == 0)); then run "$s" off; run "$s" bf16; else run "$s" bf16; run "$s" off; fi
  i=$((i + 1))
done
echo "# amp_fashion_mnist: epochs=$epochs seeds=($seeds) limit=${LIMIT:-0} load: $(cut -d' ' -f1-3 /proc/loadavg)"
source bench/machine.sh && machine_line
# "epoch E train_loss L test_accuracy A seconds S examples/s R" -> "E A R"
field() { awk '$1 == "epoch" && /train_loss/ { for (k = 1; k < NF; k++) { if ($k == "test_accuracy") a = $(k + 1); if ($k == "examples/s") r = $(k + 1) } print $2, a, r }' "$1"; }
printf "%-5s %-6s %-14s %-14s %-12s %-12s\n" seed epoch fp32_accuracy bf16_accuracy fp32_ex/s bf16_ex/s
for s in $seeds; do
  paste <(field "$out/$s.off") <(field "$out/$s.bf16") |
    awk -v s="$s" '{ printf "%-5s %-6s %-14.4f %-14.4f %-12.0f %-12.0f\n", s, $1, $2, $5, $3, $6 }'
done | tee "$out/table"
echo "mean over seeds ($seeds):"
awk '{ n[$2]++; fa[$2] += $3; ba[$2] += $4; fr[$2] += $5; br[$2] += $6 }
     END { for (e = 1; e in n; e++)
             printf "epoch %d fp32 %.4f bf16 %.4f diff %+.2f points  ex/s fp32 %.0f bf16 %.0f ratio %.2f\n",
                    e, fa[e] / n[e], ba[e] / n[e], 100 * (ba[e] - fa[e]) / n[e], fr[e] / n[e], br[e] / n[e],
                    br[e] / fr[e] }' "$out/table"
