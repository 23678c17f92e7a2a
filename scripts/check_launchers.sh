#!/usr/bin/env bash
# scripts/check_launchers.sh [BUILD_DIR] — lockstep under every launcher, one line
# each: the PyTorch TCPStore interop (both ways); torchrun (static, --standalone,
# c10d across two simulated hosts — network namespaces, with a restart — a restart,
# the error file) and lockstep-run --max-restarts, each for train_fashion_mnist and
# the DDP example train_ddp; a real one-machine Slurm (`srun -n 2`); and the README's
# multi-node lines across two namespace hosts (check_two_hosts.sh). Unlike the
# test command, it installs the newest PyTorch in a venv on first use
# (bench/torch/venv.sh). The Slurm check needs root and `apt-get install slurm-wlm
# munge`, else it says SKIP; the namespace hosts need root and `ip netns` (without
# them the c10d check runs on 127.0.0.1/127.0.0.2 and says so). Details of a
# failure: rerun the named script by hand.
# Read next: tests/interop/, tests/examples/check_ddp_restart.sh, bench/netns.sh.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build}/bin
# shellcheck source=../bench/torch/venv.sh
source "$root/bench/torch/venv.sh"
torch_python || echo "check_launchers: no PyTorch venv: the torchrun checks will SKIP"
failed=0
check() {  # NAME SCRIPT ARGS...
  local name=$1 log
  shift
  log=$(mktemp)
  "$@" > "$log" 2>&1
  case $? in
    0) echo "PASS  $name: $(grep -v '^\s*$' "$log" | tail -n 2 | head -n 1)" ;;
    77) echo "SKIP  $name: $(grep SKIP "$log" | head -n 1)" ;;
    *) echo "FAIL  $name ($*)"; failed=1 ;;
  esac
  rm -f "$log"
}
check "TCPStore <-> PyTorch's (libuv, classic)" "$root/tests/interop/check_torch_tcpstore.sh" "$bin"
for prog in train_fashion_mnist train_ddp; do
  check "torchrun static / standalone / c10d 2 namespace hosts + restart / restart: $prog" \
    "$root/tests/interop/check_torchrun.sh" "$bin" "$prog"
done
for prog in train_fashion_mnist train_ddp; do
  check "lockstep-run --max-restarts: $prog" "$root/tests/examples/check_ddp_restart.sh" "$bin" "$prog"
done
check "srun -n 2 (one-machine Slurm)" "$root/tests/interop/check_slurm.sh" "$bin"
check "two namespace hosts: lockstep-run / torchrun c10d + restart / mpirun / srun -N 2: train_ddp" \
  "$root/tests/interop/check_two_hosts.sh" "$bin"
exit $failed
