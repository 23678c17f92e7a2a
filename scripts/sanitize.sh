#!/usr/bin/env bash
# scripts/sanitize.sh — builds lockstep with sanitizers and runs its tests
# (tools/sanitizers/README.md): `asan` = AddressSanitizer + UndefinedBehaviorSanitizer on every
# unit-labelled test (preset asan-ubsan, build-asan/); `tsan` = ThreadSanitizer
# on the distributed-labelled tests (preset tsan, build-tsan/); `all` = both.
# The sanitizer options and suppression files (tools/sanitizers/, each entry
# with its reason) come from the test presets in CMakePresets.json.
# Usage: scripts/sanitize.sh [asan|tsan|all] [extra ctest arguments, e.g. -R serialize]
# Only the programs those tests run are built: for asan the unit-test
# executables and train_fashion_mnist (its resume check is unit-labelled), for
# tsan test_distributed, lockstep-run, train_fashion_mnist and the fault
# injector of the kill/resume check — not the benchmarks. scripts/test.sh runs
# `sanitize.sh asan` after the normal suite under CI (see there).
# Read before: CMakePresets.json, tools/sanitizers/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-asan}
shift || true
case "$which" in asan|tsan|all) ;; *)
  echo "usage: scripts/sanitize.sh [asan|tsan|all] [ctest args...]" >&2; exit 2 ;;
esac
scripts/install_deps.sh
jobs=$(nproc 2>/dev/null || echo 2)
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi

# Excluded under both: the install check builds a consumer against the
# installed static libraries without the -fsanitize link flags they need; and
# the cli checks of the programs this script does not build (only
# train_fashion_mnist is built, so only its cli check runs here), the ports of
# pytorch/examples' programs, and the script checks that drive train_ddp or the
# store's interop peer.
exclude='^install: |^cli: (lockstep-run|bench_|train_demo|train_ddp|(mnist|custom_dataset|dcgan|distributed|autograd|word_language_model) )|^examples: checkpoints refuse|^examples: [a-z_]+ \(a port of pytorch/examples\)|^interop: lockstep_tcp_store_peer'
status=0
if [ "$which" = asan ] || [ "$which" = all ]; then
  cmake --preset asan-ubsan "${launcher[@]}"
  cmake --build --preset asan-ubsan -j"$jobs" --target test_core test_autograd test_nn test_optim test_data \
    test_models train_fashion_mnist
  ctest --preset asan-ubsan -j"$jobs" --timeout 1800 -E "$exclude" "$@" || status=$?
fi
if [ "$which" = tsan ] || [ "$which" = all ]; then
  cmake --preset tsan "${launcher[@]}"
  cmake --build --preset tsan -j"$jobs" --target test_distributed lockstep-run train_fashion_mnist \
    lockstep_sigkill_before_rename
  ctest --preset tsan -j"$jobs" --timeout 1800 -E "$exclude" "$@" || status=$?
fi
exit $status
