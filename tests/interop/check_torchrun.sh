#!/usr/bin/env bash
# tests/interop/check_torchrun.sh BIN_DIR — lockstep programs under PyTorch's own
# torchrun (Note [torchrun's agent store] in distributed/rendezvous.h): 2-rank DDP
# training of the Fashion-MNIST CNN started by
#   1. torchrun --no-python --nproc-per-node 2          (static rendezvous)
#   2. torchrun --standalone ...                         (c10d on a local port)
#   3. two torchrun --nnodes 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:PORT,
#      one per simulated host (--local-addr 127.0.0.1 and 127.0.0.2)
# each ends with checkpoint bytes equal to the same job under lockstep-run; and
#   4. torchrun --max-restarts 1 with rank 1 SIGKILLed in epoch 2: the restarted
#      ranks meet under attempt_1's keys in the agent's store, resume from the
#      epoch-1 checkpoint and end with the same bytes;
#   5. a failing rank's lockstep::Error is torchrun's "Root Cause" (the error file).
# Uses $TORCH_PY's or the bench/torch/venv.sh venv's torchrun; exits 77 (CTest:
# Skipped) without one, and 0 with a message without the Fashion-MNIST data.
set -euo pipefail
bin=$(cd "$1" && pwd)
py=${TORCH_PY:-${LOCKSTEP_TORCH_VENV:-$HOME/.cache/lockstep/torch-venv}/bin/python}
if ! "$py" -c "import torch.distributed.run" 2>/dev/null; then
  echo "SKIP: no PyTorch at $py (make one with bench/torch/venv.sh, or set TORCH_PY)"
  exit 77
fi
root=/usr/share/datasets/fashion-mnist
if [ ! -d "$root" ]; then echo "SKIP: $root missing (apt-get install dataset-fashion-mnist)"; exit 0; fi
torchrun=("$py" -m torch.distributed.run)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
train=("$bin/train_fashion_mnist" --limit 640 --log-every 1000 --epochs 2 --batch 32 --test-limit 500)
export LOCKSTEP_TIMEOUT_S=60
free_port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
same() {  # NAME CHECKPOINT LOG
  cmp -s "$work/ref.safetensors" "$2" || { echo "FAIL: $1: checkpoint differs from lockstep-run's"; cat "$3"; exit 1; }
  echo "torchrun $1: 2-rank DDP checkpoint equals lockstep-run's"
}

"$bin/lockstep-run" --nproc-per-node 2 -- "${train[@]}" --checkpoint "$work/ref.safetensors" > "$work/ref.log" 2>&1 \
  || { echo "FAIL: lockstep-run reference"; cat "$work/ref.log"; exit 1; }

"${torchrun[@]}" --no-python --nproc-per-node 2 "${train[@]}" --checkpoint "$work/static.safetensors" \
  > "$work/static.log" 2>&1 || { echo "FAIL: torchrun (static)"; cat "$work/static.log"; exit 1; }
same "static" "$work/static.safetensors" "$work/static.log"

"${torchrun[@]}" --standalone --no-python --nproc-per-node 2 "${train[@]}" --checkpoint "$work/standalone.safetensors" \
  > "$work/standalone.log" 2>&1 || { echo "FAIL: torchrun --standalone"; cat "$work/standalone.log"; exit 1; }
same "--standalone" "$work/standalone.safetensors" "$work/standalone.log"

port=$(free_port)
c10d=(--nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --rdzv-id lockstep-check
      --no-python "${train[@]}" --checkpoint "$work/c10d.safetensors")
"${torchrun[@]}" --local-addr 127.0.0.1 "${c10d[@]}" > "$work/node0.log" 2>&1 &
node0=$!
"${torchrun[@]}" --local-addr 127.0.0.2 "${c10d[@]}" > "$work/node1.log" 2>&1 &
node1=$!
rc=0
wait "$node0" || rc=1
wait "$node1" || rc=1
[ $rc -eq 0 ] || { echo "FAIL: torchrun c10d, 2 nodes"; cat "$work/node0.log" "$work/node1.log"; exit 1; }
same "c10d (2 nodes, 127.0.0.1 and 127.0.0.2)" "$work/c10d.safetensors" "$work/node0.log"

LOCKSTEP_TEST_SIGKILL_AT=1:2:3 "${torchrun[@]}" --no-python --nproc-per-node 2 --max-restarts 1 "${train[@]}" \
  --checkpoint "$work/restart.safetensors" > "$work/restart.log" 2>&1 \
  || { echo "FAIL: torchrun --max-restarts 1"; cat "$work/restart.log"; exit 1; }
grep -q "resumed from .* after epoch 1$" "$work/restart.log" \
  || { echo "FAIL: the restarted ranks did not resume after epoch 1"; cat "$work/restart.log"; exit 1; }
same "--max-restarts 1 (rank 1 SIGKILLed in epoch 2, resumed)" "$work/restart.safetensors" "$work/restart.log"

if "${torchrun[@]}" --no-python --nproc-per-node 2 "$bin/train_fashion_mnist" --root "$work/no-such-dir" \
  > "$work/fail.log" 2>&1; then echo "FAIL: a failing job succeeded"; exit 1; fi
grep -A8 "Root Cause" "$work/fail.log" | grep -q "traceback : train_fashion_mnist (rank [01]): lockstep::Error: FashionMNIST" \
  || { echo "FAIL: torchrun's Root Cause does not show lockstep's message"; cat "$work/fail.log"; exit 1; }
echo "torchrun Root Cause: $(grep -A8 'Root Cause' "$work/fail.log" | grep -o 'lockstep::Error: .\{0,60\}')"
echo "check_torchrun: PASS"
