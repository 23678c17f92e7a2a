#!/usr/bin/env bash
# scripts/demo.sh — the README's main job: installs what is missing, builds, and
# runs the training demo (build/bin/train_demo).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
build/bin/train_demo "$@"
