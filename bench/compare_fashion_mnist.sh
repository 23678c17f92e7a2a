#!/usr/bin/env bash
# bench/compare_fashion_mnist.sh [EPOCHS] — trains the Fashion-MNIST CNN with
# lockstep (build/bin/train_fashion_mnist) and with PyTorch 1.13
# (../shared/ref/torch_fashion_mnist.py, Debian python3-torch) one after the
# other on the same machine, one thread each, same architecture and
# hyper-parameters, and prints test accuracy and examples/s per epoch side by side.
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=${1:-4}
ref=../shared/ref/torch_fashion_mnist.py
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  scripts/install_deps.sh python3-torch python3-torchvision
fi
out=$(mktemp -d)
OMP_NUM_THREADS=1 build/bin/train_fashion_mnist --epochs "$epochs" --threads 1 --log-every 100000 \
  --checkpoint "$out/ckpt.safetensors" | tee "$out/lockstep.log"
OMP_NUM_THREADS=1 /usr/bin/python3 "$ref" --epochs "$epochs" --threads 1 | tee "$out/torch.log"
echo
printf "%-6s %-22s %-22s %-14s %-14s\n" epoch lockstep_accuracy pytorch_accuracy lockstep_s pytorch_s
for e in $(seq 1 "$epochs"); do
  la=$(awk -v e="$e" '$1=="epoch" && $2==e && $3=="train_loss" {print $6}' "$out/lockstep.log")
  ls_=$(awk -v e="$e" '$1=="epoch" && $2==e && $3=="train_loss" {print $8}' "$out/lockstep.log")
  ta=$(awk -v e="$e" '$1=="epoch" && $2==e {print $6}' "$out/torch.log")
  ts=$(awk -v e="$e" '$1=="epoch" && $2==e {print $8}' "$out/torch.log")
  printf "%-6s %-22s %-22s %-14s %-14s\n" "$e" "$la" "$ta" "$ls_" "$ts"
done
rm -rf "$out"
