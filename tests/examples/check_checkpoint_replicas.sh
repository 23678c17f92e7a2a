#!/usr/bin/env bash
# tests/examples/check_checkpoint_replicas.sh BIN_DIR — a built-in program under DDP compares
# every rank's replica before it saves a checkpoint (Note [Replica check at checkpoints] in
# distributed/ddp/replica_check.h): train_ddp on 2 ranks (lockstep-run), with one rank made to
# part from the other just before a save (LOCKSTEP_TEST_DIVERGE_AT, examples/train_run.h):
#  - weights nudged on rank 1 after epoch 1: no checkpoint is written, the error (every rank's
#    alike) names both ranks and the parameter, though the periodic check (every 50
#    iterations) has not come;
#  - one optimizer step more on rank 0 after epoch 2: refused naming the step counts, and the
#    checkpoint of epoch 1 stays as it was written;
#  - with LOCKSTEP_REPLICA_CHECK_EVERY=0 (the periodic check off) the save is still checked;
#  - replicas that agree: the checkpoint is written (the check is not a false alarm);
#  - train_fashion_mnist (when its data is installed): an extra step refused the same way.
# Read before: examples/train_run.h. Read next: tests/examples/check_checkpoint_safety.sh.
set -uo pipefail
bin=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $1"; [ -n "${2:-}" ] && head -30 "$2"; failures=$((failures + 1)); }

# ddp NAME [VAR=VALUE...] -- ARGS...: train_ddp on 2 ranks in $work, output in $work/NAME.log;
# returns the launcher's exit status.
ddp() {
  local name="$1"
  shift
  local vars=()
  while [ "$1" != "--" ]; do vars+=("$1"); shift; done
  shift
  local port
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  (cd "$work" && env -u RANK -u WORLD_SIZE -u LOCAL_RANK "${vars[@]}" LOCKSTEP_TIMEOUT_S=60 timeout -s KILL 120 \
    "$bin/lockstep-run" --nproc-per-node 2 --master-port "$port" -- "$bin/train_ddp" --batch 256 "$@") \
    > "$work/$name.log" 2>&1
}

# epochs_done FILE: the checkpoint's finished epochs (its metadata).
epochs_done() {
  /usr/bin/python3 - "$1" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
print(json.loads(data[8:8 + n])["__metadata__"]["epochs_done"])
PY
}

# Weights: refused at the first save, on both ranks, naming the ranks and fc3.bias.
ddp weights LOCKSTEP_TEST_DIVERGE_AT=1:1:weights -- --epochs 2 --checkpoint w.safetensors &&
  fail "diverged weights were checkpointed (exit 0)" "$work/weights.log"
# (Every rank throws the same error; the launcher may stop one before it prints.)
grep -qE "the checkpoint of epoch 1 is not written to w.safetensors \(the last one written stays\): DDP replica check \(rank [01]\): the replicas' parameters differ" "$work/weights.log" ||
  fail "the checkpoint of diverged weights is not refused" "$work/weights.log"
grep -qF "rank 0 and rank 1 hold 2 different sets of parameters" "$work/weights.log" ||
  fail "the ranks are not named" "$work/weights.log"
grep -qF "the first that differs is 'fc3.bias'" "$work/weights.log" || fail "the parameter is not named" "$work/weights.log"
[ -e "$work/w.safetensors" ] && fail "a checkpoint of diverged replicas was written"
[ "$failures" -eq 0 ] && echo "ok: weights nudged on rank 1: $(grep -m1 -o "the checkpoint of epoch 1 is not written.*fc3.bias'" "$work/weights.log")"

# A step count: epoch 1's checkpoint is written, epoch 2's refused, the first one kept.
ddp step LOCKSTEP_TEST_DIVERGE_AT=0:2:step -- --epochs 3 --checkpoint s.safetensors &&
  fail "an extra optimizer step was checkpointed (exit 0)" "$work/step.log"
grep -qF "the checkpoint of epoch 2 is not written to s.safetensors" "$work/step.log" ||
  fail "the checkpoint after an extra step is not refused" "$work/step.log"
grep -qE "the optimizers' step counts differ at synced iteration 4 \(they were equal at iteration 2\): rank 0: 5 steps \([0-9]+ parameter updates\); rank 1: 4 steps" "$work/step.log" ||
  fail "the step counts are not named" "$work/step.log"
if [ -e "$work/s.safetensors" ]; then
  [ "$(epochs_done "$work/s.safetensors")" = 1 ] || fail "the kept checkpoint is not epoch 1's"
else
  fail "epoch 1's checkpoint is missing" "$work/step.log"
fi
[ "$failures" -eq 0 ] && echo "ok: a step more on rank 0: $(grep -m1 -o "the optimizers' step counts differ[^.]*" "$work/step.log")"

# The periodic check off: the save is still checked.
ddp off LOCKSTEP_REPLICA_CHECK_EVERY=0 LOCKSTEP_TEST_DIVERGE_AT=1:1:weights -- --epochs 1 --checkpoint off.safetensors &&
  fail "LOCKSTEP_REPLICA_CHECK_EVERY=0 let diverged weights be checkpointed" "$work/off.log"
grep -qF "the checkpoint of epoch 1 is not written to off.safetensors" "$work/off.log" ||
  fail "LOCKSTEP_REPLICA_CHECK_EVERY=0 turned the checkpoint check off" "$work/off.log"
[ -e "$work/off.safetensors" ] && fail "a checkpoint of diverged replicas was written with the periodic check off"

# Replicas that agree: written, exit 0.
ddp equal -- --epochs 2 --checkpoint e.safetensors || fail "equal replicas failed to checkpoint" "$work/equal.log"
[ -e "$work/e.safetensors" ] && [ "$(epochs_done "$work/e.safetensors")" = 2 ] ||
  fail "equal replicas: no checkpoint of epoch 2" "$work/equal.log"
grep -qF "replica check" "$work/equal.log" && fail "a replica-check message for equal replicas" "$work/equal.log"

# train_fashion_mnist (needs its data): the same refusal, by the step count.
if [ -d /usr/share/datasets/fashion-mnist ]; then
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  (cd "$work" && env -u RANK -u WORLD_SIZE -u LOCAL_RANK LOCKSTEP_TEST_DIVERGE_AT=0:1:step LOCKSTEP_TIMEOUT_S=60 \
    timeout -s KILL 120 "$bin/lockstep-run" --nproc-per-node 2 --master-port "$port" -- "$bin/train_fashion_mnist" \
    --limit 128 --test-limit 100 --log-every 1000 --epochs 2 --checkpoint f.safetensors) > "$work/fashion.log" 2>&1 &&
    fail "train_fashion_mnist checkpointed an extra optimizer step (exit 0)" "$work/fashion.log"
  grep -qF "the checkpoint of epoch 1 is not written to f.safetensors" "$work/fashion.log" &&
    grep -qF "the optimizers' step counts differ at synced iteration 1" "$work/fashion.log" ||
    fail "train_fashion_mnist does not refuse the checkpoint of an extra step" "$work/fashion.log"
  [ -e "$work/f.safetensors" ] && fail "train_fashion_mnist wrote a checkpoint of diverged replicas"
  [ "$failures" -eq 0 ] && echo "ok: train_fashion_mnist, a step more on rank 0: refused"
else
  echo "note: /usr/share/datasets/fashion-mnist missing; train_fashion_mnist is not checked"
fi

if [ "$failures" -gt 0 ]; then echo "$failures check(s) failed"; exit 1; fi
echo "check_checkpoint_replicas: PASS"
