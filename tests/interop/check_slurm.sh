#!/usr/bin/env bash
# tests/interop/check_slurm.sh BIN_DIR — lockstep under a real one-machine Slurm
# (Note [Slurm and PMI] in distributed/rendezvous.h): it starts munged,
# slurmctld and slurmd itself (as root, everything under a temporary folder,
# this host as the one node with CPUs=2, ports chosen free), then
#   1. `srun -n 2` gives the tasks SLURM_PROCID 0 and 1;
#   2. `srun -n 2 train_fashion_mnist` — no RANK, no MASTER_ADDR/PORT: the ranks
#      come from SLURM_PROCID/NTASKS, the master from SLURM_STEP_NODELIST — ends
#      with the same checkpoint bytes as the job under lockstep-run;
# and stops the daemons by their PIDs. Exits 77 (CTest: Skipped) when not root or
# when Debian's slurm-wlm / munge are not installed (apt-get install slurm-wlm munge),
# and without the Fashion-MNIST data. The cluster's pieces: tests/interop/slurm.sh.
set -euo pipefail
bin=$(cd "$1" && pwd)
for tool in srun slurmctld slurmd munged; do
  command -v "$tool" > /dev/null || { echo "SKIP: $tool not installed (apt-get install slurm-wlm munge)"; exit 77; }
done
[ "$(id -u)" -eq 0 ] || { echo "SKIP: the Slurm daemons need root"; exit 77; }
[ -r /etc/munge/munge.key ] || { echo "SKIP: no /etc/munge/munge.key"; exit 77; }
data=/usr/share/datasets/fashion-mnist
[ -d "$data" ] || { echo "SKIP: $data missing (apt-get install dataset-fashion-mnist)"; exit 77; }
tmp=$(mktemp -d)
pids=()
stop() {
  for pid in "${pids[@]}"; do kill "$pid" 2> /dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2> /dev/null || true; done
  rm -rf "$tmp"
}
trap stop EXIT
port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
node=$(hostname -s)
# shellcheck source=slurm.sh
source "$(dirname "$0")/slurm.sh"
slurm_munged "$tmp" || { echo "FAIL: munged did not start"; exit 1; }
pids+=("$MUNGED_PID")
mkdir -p "$tmp/spool-$node"
slurm_conf "$tmp" "$node(127.0.0.1)" "$(port)" "$(port)" \
  "NodeName=$node NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN" \
  "PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP"
slurmctld -D -c -f "$SLURM_CONF" > "$tmp/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" > "$tmp/slurmd.out" 2>&1 &
pids+=($!)
slurm_wait_idle 1 || { echo "FAIL: the Slurm node never became idle"; cat "$tmp"/*.log "$tmp"/*.out; exit 1; }

ranks=$(timeout 60 srun -n 2 sh -c 'echo $SLURM_PROCID' | sort | tr '\n' ' ')
[ "$ranks" = "0 1 " ] || { echo "FAIL: srun -n 2 gave SLURM_PROCID '$ranks'"; exit 1; }
echo "srun -n 2: tasks with SLURM_PROCID 0 and 1"

train=("$bin/train_fashion_mnist" --limit 640 --log-every 1000 --epochs 1 --batch 32 --test-limit 500)
export LOCKSTEP_TIMEOUT_S=60
"$bin/lockstep-run" --nproc-per-node 2 --master-port "$(port)" -- "${train[@]}" \
  --checkpoint "$tmp/ref.safetensors" > "$tmp/ref.log" 2>&1 || { echo "FAIL: lockstep-run"; cat "$tmp/ref.log"; exit 1; }
env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u MASTER_ADDR -u MASTER_PORT \
  timeout 300 srun -n 2 "${train[@]}" --checkpoint "$tmp/srun.safetensors" > "$tmp/srun.log" 2>&1 \
  || { echo "FAIL: srun -n 2 train_fashion_mnist"; cat "$tmp/srun.log"; exit 1; }
grep -q "2 rank(s)" "$tmp/srun.log" || { echo "FAIL: not 2 ranks under srun"; cat "$tmp/srun.log"; exit 1; }
cmp -s "$tmp/ref.safetensors" "$tmp/srun.safetensors" \
  || { echo "FAIL: the srun job's checkpoint differs from lockstep-run's"; cat "$tmp/srun.log"; exit 1; }
echo "srun -n 2 train_fashion_mnist: 2 ranks from SLURM_PROCID/NTASKS, master from the node list; checkpoint equals lockstep-run's"
echo "check_slurm: PASS"
