#!/usr/bin/env bash
# scripts/test.sh — the README's test command: installs what is missing, builds,
# and runs the whole test suite with CTest. Extra arguments go to ctest
# (e.g. scripts/test.sh -L unit, or -R engine).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
jobs=$(nproc 2>/dev/null || echo 2)
cd build
ctest --output-on-failure -j"$jobs" --timeout 900 "$@"
