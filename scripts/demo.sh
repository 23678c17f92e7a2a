#!/usr/bin/env bash
# scripts/demo.sh — the README's main job: installs what is missing, builds, and
# trains the Fashion-MNIST CNN with DistributedDataParallel on 2 ranks (2
# processes on this machine, Gloo over loopback) through the launcher.
# Batch 32 per rank makes the global batch 64, the single-process reference's, so
# the run is the same SGD as `train_fashion_mnist --schedule cosine --epochs 2`
# in one process; the lr decays to 0 over the 2 epochs (cosine).
# Extra arguments go to train_fashion_mnist (e.g. --epochs 4). Each run starts
# fresh and replaces the previous run's checkpoint (--overwrite), unless the
# arguments ask for --resume.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
fresh=(--overwrite)
for a in "$@"; do [[ "$a" == --resume* ]] && fresh=(); done
build/bin/lockstep-run --nproc-per-node 2 -- build/bin/train_fashion_mnist --epochs 2 --batch 32 \
  --schedule cosine "${fresh[@]}" "$@"
