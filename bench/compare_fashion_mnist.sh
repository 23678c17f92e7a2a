#!/usr/bin/env bash
# bench/compare_fashion_mnist.sh [EPOCHS] — trains the Fashion-MNIST CNN with
# lockstep (build/bin/train_fashion_mnist) and with PyTorch
# (bench/torch/fashion_mnist.py, the newest PyTorch from PyPI in the venv of
# bench/torch/venv.sh, or TORCH_PY) on the same machine, one thread each, same architecture and hyper-parameters, alternating
# the two for each seed, and prints test accuracy and training seconds per
# epoch: per seed, then the mean over seeds.
#   SEEDS="0 1 2" bench/compare_fashion_mnist.sh 4     (default SEEDS=0)
# Both take the seed (--seed). The two frameworks' initial weights and shuffles come
# from different generators, so one seed of each is one draw from each
# distribution: compare means over several seeds. Env: BUILD (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/openblas_coretype.sh  # PyTorch's OpenBLAS at its best kernels
epochs=${1:-4}
seeds=${SEEDS:-0}
build=${BUILD:-build}
source bench/torch/venv.sh
torch_python
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for s in $seeds; do
  OMP_NUM_THREADS=1 "$build/bin/train_fashion_mnist" --epochs "$epochs" --threads 1 --seed "$s" \
    --log-every 100000 --checkpoint "$out/ckpt_$s.safetensors" | tee "$out/lockstep_$s.log"
  OMP_NUM_THREADS=1 "$TORCH_PY" bench/torch/fashion_mnist.py --seed "$s" --epochs "$epochs" --threads 1 \
    | tee "$out/torch_$s.log"
done
# Lines "epoch E train_loss L test_accuracy A seconds S ..." in both logs.
field() { awk -v e="$2" -v f="$3" '$1=="epoch" && $2==e && $3=="train_loss" {print $f}' "$1"; }
echo
printf "%-5s %-6s %-18s %-18s %-12s %-12s\n" seed epoch lockstep_accuracy pytorch_accuracy lockstep_s pytorch_s
for s in $seeds; do
  for e in $(seq 1 "$epochs"); do
    printf "%-5s %-6s %-18s %-18s %-12s %-12s\n" "$s" "$e" \
      "$(field "$out/lockstep_$s.log" "$e" 6)" "$(field "$out/torch_$s.log" "$e" 6)" \
      "$(field "$out/lockstep_$s.log" "$e" 8)" "$(field "$out/torch_$s.log" "$e" 8)"
  done
done
echo
echo "mean over seeds ($seeds):"
printf "%-6s %-18s %-18s %-10s %-12s %-12s\n" epoch lockstep_accuracy pytorch_accuracy difference lockstep_s pytorch_s
for e in $(seq 1 "$epochs"); do
  la=0; ta=0; lsec=0; tsec=0; n=0
  for s in $seeds; do
    la=$(echo "$la + $(field "$out/lockstep_$s.log" "$e" 6)" | bc -l)
    ta=$(echo "$ta + $(field "$out/torch_$s.log" "$e" 6)" | bc -l)
    lsec=$(echo "$lsec + $(field "$out/lockstep_$s.log" "$e" 8)" | bc -l)
    tsec=$(echo "$tsec + $(field "$out/torch_$s.log" "$e" 8)" | bc -l)
    n=$((n + 1))
  done
  printf "%-6s %-18.4f %-18.4f %-+10.4f %-12.1f %-12.1f\n" "$e" "$(echo "$la / $n" | bc -l)" \
    "$(echo "$ta / $n" | bc -l)" "$(echo "($la - $ta) / $n" | bc -l)" \
    "$(echo "$lsec / $n" | bc -l)" "$(echo "$tsec / $n" | bc -l)"
done
