#!/usr/bin/env bash
# tests/interop/check_two_hosts.sh BIN_DIR [PROGRAM ARGS...] — the README's multi-node
# "Launching" lines, run as written across two simulated hosts: network namespaces host0
# (198.18.0.1) and host1 (198.18.0.2) joined by veth pairs through a bridge, each with its
# own host name (UTS namespace) and an /etc/hosts naming both (bench/netns.sh), made and
# deleted by this script (trap) under a prefix unique to this run. A 4-rank job, 2 ranks
# per host, of PROGRAM (default: train_ddp --epochs 3, the DDP example) started by
#   1. lockstep-run --nnodes 2 --node-rank K --master-addr host0 --master-port 29500, one per host;
#   2. torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint host0:29400
#      --max-restarts 1, one per host (and once more with rank 3, on host1, SIGKILLed in
#      epoch 2 when PROGRAM is train_ddp or train_fashion_mnist: both agents restart and the
#      job resumes; with --deterministic 1, against a reference with it, since a 4-rank
#      resume is bit-identical only so: Note [Resuming on a restart] in
#      examples/train_run.h); skipped without a PyTorch venv (never downloaded here);
#   3. mpirun -np 4 --host host0:2,host1:2 -x MASTER_ADDR=host0 from host0, Open MPI's
#      remote start going through an rsh agent that enters host1's namespace (where a real
#      cluster would use ssh); skipped without mpirun;
#   4. srun -N 2 --ntasks-per-node 2 on a two-node Slurm — slurmctld and one slurmd per
#      host, munged, all started here and stopped by PID; skipped without slurm-wlm + munge;
# each ends with the same checkpoint bytes as `lockstep-run --nproc-per-node 4` on one host.
# Needs root and `ip netns` (exit 77, CTest: Skipped, otherwise). One line per launcher.
# Read before: bench/netns.sh, tests/interop/slurm.sh, tests/interop/check_slurm.sh. Read next: README.md "Launching".
set -euo pipefail
bin=$(cd "$1" && pwd)
shift
[ $# -gt 0 ] || set -- train_ddp --epochs 3
prog=$1
shift
train=("$bin/$prog" "$@")
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../../bench/netns.sh
source "$here/../../bench/netns.sh"
why=$(netns_usable) || { echo "SKIP: $why"; exit 77; }
for exe in "$bin/$prog" "$bin/lockstep-run"; do
  [ -x "$exe" ] || { echo "check_two_hosts.sh: $exe is not built (cmake --build build --target $(basename "$exe"))"; exit 2; }
done
py=${TORCH_PY:-${LOCKSTEP_TORCH_VENV:-$HOME/.cache/lockstep/torch-venv}/bin/python}
ns=lsth$$
work=$(mktemp -d)
pids=()
cleanup() {  # what runs in the namespaces first (slurmd before munged), then the rest by PID
  local pid
  netns_kill "$ns"
  for pid in "${pids[@]}"; do kill "$pid" 2> /dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2> /dev/null || true; done
  netns_down "$ns"
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
export LOCKSTEP_TIMEOUT_S=120
# The one-host reference reduces over TCP too: ranks that share a host would
# otherwise meet in shared memory, which sums in rank order, while the two-host
# job's Gloo ring sums in its own order, and float sums differ in the last bits
# (Note [Shared memory on one host]).
export LOCKSTEP_SHM=0
netns_up "$ns" 2 && netns_names "$ns" 2 || { echo "FAIL: could not make the two hosts"; exit 1; }
netns_as "$ns" 0 && as0=("${NETNS_AS[@]}")  # "${as0[@]}" CMD...: CMD as host0
netns_as "$ns" 1 && as1=("${NETNS_AS[@]}")
fail() { echo "FAIL: $1"; shift; for f in "$@"; do echo "== $f"; tail -n 40 "$f"; done; exit 1; }
same() {  # NAME CHECKPOINT LOGS...: compared with $work/${ref:-ref}.safetensors
  local name=$1 file=$2
  shift 2
  cmp -s "$work/${ref:-ref}.safetensors" "$file" || fail "$name: the checkpoint differs from one host's 4-rank job" "$@"
  echo "PASS  $name: 4 ranks on host0 + host1, checkpoint equals lockstep-run --nproc-per-node 4 on one host"
  passed+=("${name%% *}")
}
passed=() skipped=()
# on_both NAME CMD...: CMD as host0 (in the background) and as host1; "@K@" in CMD is the host's index.
on_both() {
  local name=$1 rc=0
  shift
  "${as0[@]}" timeout 600 "${@//@K@/0}" > "$work/$name.host0.log" 2>&1 &
  pids+=($!)
  "${as1[@]}" timeout 600 "${@//@K@/1}" > "$work/$name.host1.log" 2>&1 || rc=1
  wait "${pids[-1]}" || rc=1
  unset 'pids[-1]'
  [ $rc -eq 0 ] || fail "$name" "$work/$name.host0.log" "$work/$name.host1.log"
}

port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$bin/lockstep-run" --nproc-per-node 4 --master-port "$port" -- "${train[@]}" --checkpoint "$work/ref.safetensors" > "$work/ref.log" 2>&1 \
  || fail "the one-host reference (lockstep-run --nproc-per-node 4)" "$work/ref.log"

# 1. lockstep-run on each host.
on_both lockstep-run "$bin/lockstep-run" --nnodes 2 --node-rank @K@ --master-addr host0 --master-port 29500 \
  --nproc-per-node 2 -- "${train[@]}" --checkpoint "$work/lockstep-run.safetensors"
same "lockstep-run --nnodes 2 --node-rank K --master-addr host0" "$work/lockstep-run.safetensors" "$work"/lockstep-run.*.log

# 2. torchrun c10d on each host, then with a rank killed.
if "$py" -c "import torch.distributed.run" 2> /dev/null; then
  c10d=(--nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint host0:29400 --max-restarts 1 --no-python)
  on_both torchrun "$py" -m torch.distributed.run --rdzv-id a "${c10d[@]}" "${train[@]}" --checkpoint "$work/torchrun.safetensors"
  same "torchrun --nnodes 2 --rdzv-backend c10d --rdzv-endpoint host0:29400" "$work/torchrun.safetensors" "$work"/torchrun.*.log
  if [ "$prog" = train_ddp ] || [ "$prog" = train_fashion_mnist ]; then
    # With 4 ranks a resumed run is bit-identical only with --deterministic 1 (Note [Resuming
    # on a restart] in examples/train_run.h); so is its own one-host reference.
    "$bin/lockstep-run" --nproc-per-node 4 --master-port "$port" -- "${train[@]}" --deterministic 1 \
      --checkpoint "$work/ref-det.safetensors" > "$work/ref-det.log" 2>&1 \
      || fail "the one-host reference with --deterministic 1" "$work/ref-det.log"
    LOCKSTEP_TEST_SIGKILL_AT=3:2:3 on_both torchrun-kill "$py" -m torch.distributed.run --rdzv-id b "${c10d[@]}" \
      "${train[@]}" --deterministic 1 --checkpoint "$work/torchrun-kill.safetensors"
    grep -q "resumed from .* after epoch 1$" "$work/torchrun-kill.host0.log" \
      || fail "torchrun --max-restarts 1: the restarted job did not resume after epoch 1" "$work"/torchrun-kill.*.log
    ref=ref-det same "torchrun c10d --max-restarts 1 --deterministic 1, rank 3 (host1) SIGKILLed in epoch 2, resumed" \
      "$work/torchrun-kill.safetensors" "$work"/torchrun-kill.*.log
  fi
else
  skipped+=(torchrun)
  echo "SKIP  torchrun: no PyTorch at $py (make one with bench/torch/venv.sh, or set TORCH_PY)"
fi

# 3. mpirun from host0; Open MPI starts its daemon on host1 through an rsh agent.
if command -v mpirun > /dev/null; then
  cat > "$work/rsh_agent.sh" <<AGENT
#!/usr/bin/env bash
# Open MPI's rsh agent for the simulated hosts: \$1 is the host (hostK), the rest the command line.
host=\$1
shift
exec ip netns exec "${ns}h\${host#host}" unshare --uts sh -c "hostname \$host && \$*"
AGENT
  chmod +x "$work/rsh_agent.sh"
  OMPI_MCA_plm_rsh_agent=$work/rsh_agent.sh "${as0[@]}" timeout 600 mpirun --allow-run-as-root \
    -np 4 --host host0:2,host1:2 -x MASTER_ADDR=host0 -x LOCKSTEP_TIMEOUT_S "${train[@]}" \
    --checkpoint "$work/mpirun.safetensors" > "$work/mpirun.log" 2>&1 || fail "mpirun across host0, host1" "$work/mpirun.log"
  same "mpirun -np 4 --host host0:2,host1:2 -x MASTER_ADDR=host0" "$work/mpirun.safetensors" "$work/mpirun.log"
else
  skipped+=(mpirun)
  echo "SKIP  mpirun: not installed (apt-get install openmpi-bin)"
fi

# 4. A two-node Slurm: slurmctld on host0, a slurmd on each host.
if command -v srun > /dev/null && command -v slurmctld > /dev/null && command -v munged > /dev/null \
  && [ -r /etc/munge/munge.key ]; then
  # shellcheck source=slurm.sh
  source "$here/slurm.sh"
  slurm_munged "$work" || fail "munged did not start" "$work/munged.log"
  pids+=("$MUNGED_PID")
  slurm_conf "$work" "host0(198.18.0.1)" 6817 6818 \
    "NodeName=host0 NodeAddr=198.18.0.1 CPUs=2 State=UNKNOWN" \
    "NodeName=host1 NodeAddr=198.18.0.2 CPUs=2 State=UNKNOWN" \
    "PartitionName=debug Nodes=host0,host1 Default=YES MaxTime=INFINITE State=UP"
  "${as0[@]}" slurmctld -D -c -f "$SLURM_CONF" > "$work/slurmctld.out" 2>&1 &
  pids+=($!)
  for k in 0 1; do
    mkdir -p "$work/spool-host$k"
    # Not netns_as: `ip netns exec` mounts the namespace's own /sys, without the cgroup
    # file systems slurmd reads; nsenter --net enters the network namespace only, and
    # the host's /etc/hosts is bind-mounted in a private mount namespace (unshare --mount).
    nsenter --net="/run/netns/${ns}h$k" unshare --uts --mount sh -c \
      'mount --bind "/etc/netns/$1/hosts" /etc/hosts && hostname "$0" && shift && exec "$@"' "host$k" "${ns}h$k" \
      slurmd -D -N "host$k" -f "$SLURM_CONF" > "$work/slurmd-host$k.out" 2>&1 &
    pids+=($!)
  done
  slurm_wait_idle 2 "${as0[@]}" || fail "the two Slurm nodes never became idle" "$work"/slurm*.log "$work"/*.out
  "${as0[@]}" env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u MASTER_ADDR -u MASTER_PORT timeout 600 \
    srun -N 2 --ntasks-per-node 2 "${train[@]}" --checkpoint "$work/srun.safetensors" > "$work/srun.log" 2>&1 \
    || fail "srun -N 2 --ntasks-per-node 2" "$work/srun.log" "$work"/slurm*.log
  for _ in $(seq 150); do [ -z "$("${as0[@]}" squeue -h 2> /dev/null)" ] && break; sleep 0.2; done  # the step ended
  same "srun -N 2 --ntasks-per-node 2 (slurmd on host0 and host1)" "$work/srun.safetensors" "$work/srun.log"
else
  skipped+=(srun)
  echo "SKIP  srun: slurm-wlm / munge not installed, or no /etc/munge/munge.key"
fi
echo "$prog on 2 namespace hosts, checkpoints equal one host's: ${passed[*]}${skipped[*]:+; skipped: ${skipped[*]}}"
echo "check_two_hosts $prog: PASS"
