#!/usr/bin/env bash
# tests/interop/check_torchrun.sh BIN_DIR [PROGRAM] — lockstep programs under PyTorch's own
# torchrun (Note [torchrun's agent store] in distributed/rendezvous.h): 2-rank DDP training
# of PROGRAM (train_fashion_mnist, the default, or train_ddp, the DDP example) started by
#   1. torchrun --no-python --nproc-per-node 2          (static rendezvous)
#   2. torchrun --standalone ...                         (c10d on a local port)
#   3. two torchrun --nnodes 2 --rdzv-backend c10d --rdzv-endpoint 198.18.0.1:29400, one in
#      each of two simulated hosts: network namespaces with a veth pair each to a bridge
#      (bench/netns.sh), made and deleted by this script (trap) under a prefix unique to
#      this run; then the same with --max-restarts 1 and rank 1 (the second host's) SIGKILLed
#      in epoch 2: both hosts' ranks fail, both agents restart, and the job resumes. Without
#      root or `ip netns` it says "SKIP (namespaces)" and runs the two nodes on 127.0.0.1
#      and 127.0.0.2 instead;
# each ends with checkpoint bytes equal to the same job under lockstep-run; and
#   4. torchrun --max-restarts 1 with rank 1 SIGKILLed in epoch 2: the restarted
#      ranks meet under attempt_1's keys in the agent's store, resume from the
#      epoch-1 checkpoint and end with the same bytes;
#   5. a failing rank's message is torchrun's "Root Cause" (the error file).
# In a namespace torchrun needs --local-addr (the host name resolves to the machine's own
# address, not the namespace's) and, on the endpoint's host, --rdzv-conf is_host=1 (for the
# same reason it would not know it is the endpoint); on real hosts both follow from DNS.
# Uses $TORCH_PY's or the bench/torch/venv.sh venv's torchrun, never downloads one: exits 77
# (CTest: Skipped) without one, and also 77 with a message without the Fashion-MNIST data
# (train_fashion_mnist only). Read next: scripts/check_launchers.sh.
set -euo pipefail
bin=$(cd "$1" && pwd)
prog=${2:-train_fashion_mnist}
here=$(cd "$(dirname "$0")" && pwd)
py=${TORCH_PY:-${LOCKSTEP_TORCH_VENV:-$HOME/.cache/lockstep/torch-venv}/bin/python}
if ! "$py" -c "import torch.distributed.run" 2>/dev/null; then
  echo "SKIP: no PyTorch at $py (make one with bench/torch/venv.sh, or set TORCH_PY)"
  exit 77
fi
case "$prog" in
  train_fashion_mnist)
    root=/usr/share/datasets/fashion-mnist
    if [ ! -d "$root" ]; then echo "SKIP: $root missing (apt-get install dataset-fashion-mnist)"; exit 77; fi
    train=("$bin/train_fashion_mnist" --limit 640 --log-every 1000 --epochs 2 --batch 32 --test-limit 500)
    kill_at=1:2:3 fail_args=(--root /nonexistent/no-such-dir) fail_text="lockstep::Error: FashionMNIST" ;;
  train_ddp)
    train=("$bin/train_ddp" --epochs 3 --batch 32)
    kill_at=1:2:5 fail_args=(--batch 0) fail_text="usage error: --batch: 0 is out of range" ;;
  *) echo "check_torchrun.sh: PROGRAM must be train_fashion_mnist or train_ddp, got '$prog'"; exit 2 ;;
esac
for exe in "${train[0]}" "$bin/lockstep-run"; do
  [ -x "$exe" ] || { echo "check_torchrun.sh: $exe is not built (cmake --build build --target $(basename "$exe"))"; exit 2; }
done
torchrun=("$py" -m torch.distributed.run)
work=$(mktemp -d)
# shellcheck source=../../bench/netns.sh
source "$here/../../bench/netns.sh"
ns=lstr$$  # this run's namespaces: ${ns}sw, ${ns}h0, ${ns}h1
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  netns_kill "$ns"
  netns_down "$ns"
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
export LOCKSTEP_TIMEOUT_S=60
free_port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
same() {  # NAME CHECKPOINT LOG
  cmp -s "$work/ref.safetensors" "$2" || { echo "FAIL: $1: checkpoint differs from lockstep-run's"; cat "$3"; exit 1; }
  echo "torchrun $1: 2-rank DDP $prog checkpoint equals lockstep-run's"
}
# two_nodes NAME ENDPOINT_HOST [WRAP0 ...] -- [WRAP1 ...] -- TORCHRUN_ARGS...: a 2-node c10d
# job, node 0 started under WRAP0 (e.g. ip netns exec HOST), node 1 under WRAP1.
two_nodes() {
  local name=$1 w0=() w1=() rc=0
  shift
  while [ "$1" != "--" ]; do w0+=("$1"); shift; done
  shift
  while [ "$1" != "--" ]; do w1+=("$1"); shift; done
  shift
  "${w0[@]}" "${torchrun[@]}" "${a0[@]}" "$@" > "$work/$name.node0.log" 2>&1 &
  pids=($!)
  "${w1[@]}" "${torchrun[@]}" "${a1[@]}" "$@" > "$work/$name.node1.log" 2>&1 || rc=1
  wait "${pids[0]}" || rc=1
  pids=()
  [ $rc -eq 0 ] || { echo "FAIL: torchrun c10d, 2 nodes ($name)"; cat "$work/$name.node0.log" "$work/$name.node1.log"; exit 1; }
}

# Ports picked free, not the default 29500: ctest runs this script for two programs at once.
"$bin/lockstep-run" --nproc-per-node 2 --master-port "$(free_port)" -- "${train[@]}" --checkpoint "$work/ref.safetensors" > "$work/ref.log" 2>&1 \
  || { echo "FAIL: lockstep-run reference"; cat "$work/ref.log"; exit 1; }

"${torchrun[@]}" --master-port "$(free_port)" --no-python --nproc-per-node 2 "${train[@]}" --checkpoint "$work/static.safetensors" \
  > "$work/static.log" 2>&1 || { echo "FAIL: torchrun (static)"; cat "$work/static.log"; exit 1; }
same "static" "$work/static.safetensors" "$work/static.log"

"${torchrun[@]}" --standalone --no-python --nproc-per-node 2 "${train[@]}" --checkpoint "$work/standalone.safetensors" \
  > "$work/standalone.log" 2>&1 || { echo "FAIL: torchrun --standalone"; cat "$work/standalone.log"; exit 1; }
same "--standalone" "$work/standalone.safetensors" "$work/standalone.log"

c10d=(--nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-id lockstep-check --no-python "${train[@]}")
if why=$(netns_usable) && netns_up "$ns" 2; then
  a0=(--local-addr 198.18.0.1 --rdzv-conf is_host=1 --rdzv-endpoint 198.18.0.1:29400)
  a1=(--local-addr 198.18.0.2 --rdzv-conf is_host=0 --rdzv-endpoint 198.18.0.1:29400)
  two_nodes c10d ip netns exec "${ns}h0" -- ip netns exec "${ns}h1" -- "${c10d[@]}" --checkpoint "$work/c10d.safetensors"
  same "c10d (2 hosts: network namespaces ${ns}h0, ${ns}h1)" "$work/c10d.safetensors" "$work/c10d.node0.log"
  LOCKSTEP_TEST_SIGKILL_AT=$kill_at two_nodes c10d-restart ip netns exec "${ns}h0" -- ip netns exec "${ns}h1" -- \
    --max-restarts 1 "${c10d[@]}" --checkpoint "$work/c10d-restart.safetensors"
  grep -q "resumed from .* after epoch 1$" "$work/c10d-restart.node0.log" \
    || { echo "FAIL: c10d --max-restarts 1: the restarted ranks did not resume after epoch 1"; cat "$work/c10d-restart.node0.log" "$work/c10d-restart.node1.log"; exit 1; }
  same "c10d --max-restarts 1 (2 namespace hosts, rank 1 SIGKILLed in epoch 2, resumed)" \
    "$work/c10d-restart.safetensors" "$work/c10d-restart.node0.log"
  netns_down "$ns"
  hosts="2 network-namespace hosts, with a restart"
else
  echo "SKIP (namespaces): ${why:-could not make the namespaces}; the 2 c10d nodes run on 127.0.0.1 and 127.0.0.2 instead"
  netns_down "$ns"
  port=$(free_port)
  a0=(--local-addr 127.0.0.1 --rdzv-endpoint "127.0.0.1:$port")
  a1=(--local-addr 127.0.0.2 --rdzv-endpoint "127.0.0.1:$port")
  two_nodes c10d -- -- "${c10d[@]}" --checkpoint "$work/c10d.safetensors"
  same "c10d (2 nodes, 127.0.0.1 and 127.0.0.2)" "$work/c10d.safetensors" "$work/c10d.node0.log"
  hosts="2 nodes on 127.0.0.1/127.0.0.2 (namespaces skipped)"
fi

LOCKSTEP_TEST_SIGKILL_AT=$kill_at "${torchrun[@]}" --no-python --nproc-per-node 2 --max-restarts 1 "${train[@]}" \
  --checkpoint "$work/restart.safetensors" > "$work/restart.log" 2>&1 \
  || { echo "FAIL: torchrun --max-restarts 1"; cat "$work/restart.log"; exit 1; }
grep -q "resumed from .* after epoch 1$" "$work/restart.log" \
  || { echo "FAIL: the restarted ranks did not resume after epoch 1"; cat "$work/restart.log"; exit 1; }
same "--max-restarts 1 (rank 1 SIGKILLed in epoch 2, resumed)" "$work/restart.safetensors" "$work/restart.log"

if "${torchrun[@]}" --no-python --nproc-per-node 2 "${train[0]}" "${fail_args[@]}" \
  > "$work/fail.log" 2>&1; then echo "FAIL: a failing job succeeded"; exit 1; fi
grep -A8 "Root Cause" "$work/fail.log" | grep -qF "): $fail_text" \
  || { echo "FAIL: torchrun's Root Cause does not show lockstep's message"; cat "$work/fail.log"; exit 1; }
grep -A8 "Root Cause" "$work/fail.log" | grep -q "traceback : $prog (rank [01]): " \
  || { echo "FAIL: torchrun's Root Cause does not name the program and rank"; cat "$work/fail.log"; exit 1; }
echo "torchrun Root Cause: $(grep -A8 'Root Cause' "$work/fail.log" | grep -o "$prog (rank [01]): .\{0,60\}")"
echo "$prog under torchrun: static, --standalone, c10d on $hosts, --max-restarts 1: checkpoints equal lockstep-run's; Root Cause shows lockstep's message"
echo "check_torchrun $prog: PASS"
