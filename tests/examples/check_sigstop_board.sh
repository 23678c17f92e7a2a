#!/usr/bin/env bash
# tests/examples/check_sigstop_board.sh BIN_DIR [RUNS] — the README's promise that
# a timed-out collective names the ranks, kept under SIGSTOP: RUNS times (20 by
# default) a 2-rank DDP job of train_fashion_mnist (LOCKSTEP_TIMEOUT_S=3) has rank 1
# stopped with SIGSTOP at a random moment of training; rank 0's error must carry
# the progress board's line naming rank 1 every time (Note [Progress board when no
# rank is behind], distributed/ddp/ddp_progress.cpp). Only processes this script
# started are signalled, by their ids. Skips (exit 77, CTest: Skipped) without the Fashion-MNIST data.
# Read before: distributed/ddp/ddp_progress.h. Read next: tests/examples/check_ddp_kill_resume.sh.
set -uo pipefail
bin="$1"
runs="${2:-20}"
root=/usr/share/datasets/fashion-mnist
if [ ! -d "$root" ]; then echo "SKIP: $root missing (apt-get install dataset-fashion-mnist)"; exit 77; fi
work=$(mktemp -d)
launcher=""
cleanup() {
  if [ -n "$launcher" ]; then kill -KILL "$launcher" 2>/dev/null; fi
  rm -rf "$work"
}
trap cleanup EXIT
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' \
    2>/dev/null || echo $((20000 + RANDOM % 20000))
}
# The launcher's child that runs rank $2 (its environment says RANK=$2).
rank_pid() {
  local c
  for c in $(ps -o pid= --ppid "$1"); do
    if tr '\0' '\n' < "/proc/$c/environ" 2>/dev/null | grep -qx "RANK=$2"; then echo "$c"; return; fi
  done
}

named=0
for i in $(seq 1 "$runs"); do
  log="$work/run$i.log"
  : > "$log"
  LOCKSTEP_TIMEOUT_S=3 "$bin/lockstep-run" --nproc-per-node 2 --master-port "$(free_port)" --grace-period 1 -- \
    "$bin/train_fashion_mnist" --limit 12800 --batch 32 --epochs 1 --log-every 1 --test-limit 100 \
    --checkpoint "$work/run$i.safetensors" > "$log" 2>&1 &
  launcher=$!
  # Training is under way once rank 0 prints its steps; stop rank 1 a few steps in,
  # at a random point of a step.
  want_step=$((2 + RANDOM % 6))
  for _ in $(seq 1 600); do
    grep -q "epoch 1 step *$want_step " "$log" && break
    kill -0 "$launcher" 2>/dev/null || break
    sleep 0.05
  done
  pid=$(rank_pid "$launcher" 1)
  if [ -z "$pid" ]; then echo "FAIL: run $i: rank 1 not found"; cat "$log"; exit 1; fi
  sleep "0.$(printf '%03d' $((RANDOM % 1000)))"
  kill -STOP "$pid"
  wait "$launcher"
  status=$?
  launcher=""
  line=$(grep -m1 -o "Progress board: .*" "$log")
  if [ "$status" -ne 0 ] && grep -q "Progress board: .*rank 1" "$log"; then
    named=$((named + 1))
    echo "run $i (stopped after step $want_step): exit $status; $line"
  else
    echo "FAIL: run $i (stopped after step $want_step): exit $status, no progress-board line naming rank 1:"
    grep -v "epoch 1 step" "$log" | tail -40
  fi
done
echo "the progress board named the stopped rank in $named of $runs runs"
[ "$named" -eq "$runs" ]
