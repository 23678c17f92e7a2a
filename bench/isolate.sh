#!/usr/bin/env bash
# bench/isolate.sh — runs a benchmark in a CPU cgroup of the largest weight, so that other
# work on a shared machine (niced builds, test suites) gets only the CPU the benchmark leaves
# idle. Without it, a dozen nice-19 compilers still take ~8% of two cores from two nice-0 ranks
# and add noise to every number; with it each rank's thread runs ~100% of the time it is
# runnable (check with /proc/<pid>/task/*/schedstat). It cannot remove what happens outside the
# machine (a neighbour on a virtual machine's host), so read medians over alternating rounds.
#
#   bench/isolate.sh CMD [ARGS...]       e.g. bench/isolate.sh bench/compare_ddp.sh resnet50 4 5 4
#
# Needs root and a cgroup CPU controller: cgroup v1 (/sys/fs/cgroup/cpu, cpu.shares = 262144)
# or v2 (cpu.weight = 10000). The group, lockstep-bench, is left in place for the next run (it
# is empty once CMD exits). Without either it says so and exits 2.
# Read next: bench/compare_ddp.sh, bench/compare_allreduce.sh.
set -euo pipefail
(($# > 0)) || { echo "usage: bench/isolate.sh CMD [ARGS...]" >&2; exit 2; }
die() { echo "isolate.sh: $*" >&2; exit 2; }
[[ $(id -u) == 0 ]] || die "needs root (it creates a cgroup); run the benchmark without it otherwise"
if [[ -d /sys/fs/cgroup/cpu && -f /sys/fs/cgroup/cpu/cpu.shares ]]; then  # cgroup v1
  group=/sys/fs/cgroup/cpu/lockstep-bench
  mkdir -p "$group"
  echo 262144 > "$group/cpu.shares"
elif [[ -f /sys/fs/cgroup/cgroup.controllers ]] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then  # v2
  grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control || echo +cpu > /sys/fs/cgroup/cgroup.subtree_control ||
    die "could not enable the cpu controller in /sys/fs/cgroup/cgroup.subtree_control"
  group=/sys/fs/cgroup/lockstep-bench
  mkdir -p "$group"
  echo 10000 > "$group/cpu.weight"
else
  die "no cgroup CPU controller found under /sys/fs/cgroup"
fi
echo $$ > "$group/cgroup.procs" || die "could not move this shell into $group"
echo "# isolate.sh: running in $group (largest CPU weight)" >&2
exec "$@"
