#!/usr/bin/env bash
# scripts/fuzz.sh — builds the libFuzzer targets (fuzz/) with clang into
# build-fuzz/ and runs each for SECONDS (default 30) through CTest's `fuzz`
# label, then prints how many inputs each target executed. Installs Debian's
# clang 19 (clang 14 cannot capture structured bindings in lambdas, and 16-18
# refuse them in any file built with -fopenmp), its libFuzzer
# (libclang-rt-19-dev) and its OpenMP (libomp-19-dev) if missing.
# Usage: scripts/fuzz.sh [SECONDS]      e.g. scripts/fuzz.sh 300
# A failing target leaves its input in build-fuzz/fuzz/artifacts/<target>-*;
# rerun it alone with  build-fuzz/bin/fuzz_<target> <that file>.
# Read before: fuzz/CMakeLists.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
  echo "usage: scripts/fuzz.sh [SECONDS]  (SECONDS per target, a positive integer)" >&2
  exit 2
fi
scripts/install_deps.sh clang-19 libclang-rt-19-dev libomp-19-dev
jobs=$(nproc 2>/dev/null || echo 2)
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake --preset fuzz -DLOCKSTEP_FUZZ_SECONDS="$seconds" "${launcher[@]}"
cmake --build build-fuzz -j"$jobs" --target fuzz_make_seeds fuzz_safetensors \
  fuzz_safetensors_json fuzz_idx fuzz_tcp_store_protocol
status=0
(cd build-fuzz && ctest -L fuzz --output-on-failure) || status=$?

# Inputs executed per target, from libFuzzer's final stats in CTest's log.
log=build-fuzz/Testing/Temporary/LastTest.log
if [ -f "$log" ]; then
  awk '/^[0-9]+\/[0-9]+ Test: / { sub(/^[0-9]+\/[0-9]+ Test: /, ""); name = $0 }
       /stat::number_of_executed_units:/ { printf "fuzz.sh: %-28s %12s inputs\n", name, $2 }
       /stat::peak_rss_mb:/ { printf "fuzz.sh: %-28s %12s MB peak RSS\n", name, $2 }' "$log"
fi
exit $status
