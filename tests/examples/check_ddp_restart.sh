#!/usr/bin/env bash
# tests/examples/check_ddp_restart.sh BIN_DIR [PROGRAM] — Note [Restarts] and Note
# [Resuming on a restart] (examples/train_run.h): a 2-rank DDP job under `lockstep-run
# --max-restarts 1` whose rank 1 is SIGKILLed mid-epoch 2 (LOCKSTEP_TEST_SIGKILL_AT,
# first attempt only) is restarted whole, resumes from the epoch-1 checkpoint
# (TORCHELASTIC_RESTART_COUNT=1 -> '--resume auto'), exits 0, and ends with the same
# checkpoint bytes as an uninterrupted run. With --max-restarts 0 the same kill fails the
# job. PROGRAM: train_fashion_mnist (the default; skips, exit 77 with a message, when the
# Fashion-MNIST data is not installed) or train_ddp (the DDP example, synthetic data).
# Read before: examples/train_run.h, tools/lockstep_run.cpp. Read next: tests/interop/check_torchrun.sh.
set -euo pipefail
bin="$1"
prog=${2:-train_fashion_mnist}
export LOCKSTEP_TIMEOUT_S=60
case "$prog" in
  train_fashion_mnist)
    data=/usr/share/datasets/fashion-mnist
    [ -d "$data" ] || { echo "SKIP: $data missing (apt-get install dataset-fashion-mnist)"; exit 77; }
    args=(--limit 1280 --batch 32 --epochs 3 --schedule cosine --log-every 1000 --test-limit 1000) ;;
  train_ddp) args=(--batch 32 --epochs 4) ;;
  *) echo "check_ddp_restart.sh: PROGRAM must be train_fashion_mnist or train_ddp, got '$prog'"; exit 2 ;;
esac
for exe in "$bin/$prog" "$bin/lockstep-run"; do
  [ -x "$exe" ] || { echo "check_ddp_restart.sh: $exe is not built (cmake --build build --target $(basename "$exe"))"; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
job() {  # LOG CHECKPOINT RESTARTS
  "$bin/lockstep-run" --nproc-per-node 2 --master-port "$(port)" --grace-period 2 --max-restarts "$3" -- \
    "$bin/$prog" "${args[@]}" --checkpoint "$2" > "$1" 2>&1
}
bad() { echo "FAIL: $1"; cat "$2"; exit 1; }

job "$work/ref.log" "$work/ref.safetensors" 0 || bad "the uninterrupted run failed" "$work/ref.log"
LOCKSTEP_TEST_SIGKILL_AT=1:2:5 job "$work/restart.log" "$work/restart.safetensors" 1 \
  || bad "the job with one restart failed" "$work/restart.log"
grep -q "rank 1 failed first (signal SIGKILL); stopped the other ranks; restarting all ranks (restart 1 of 1)" \
  "$work/restart.log" || bad "lockstep-run did not report the restart" "$work/restart.log"
grep -q "resumed from .* after epoch 1$" "$work/restart.log" || bad "the restart did not resume after epoch 1" \
  "$work/restart.log"
cmp -s "$work/ref.safetensors" "$work/restart.safetensors" \
  || bad "the restarted job's final checkpoint differs from the uninterrupted run's" "$work/restart.log"
echo "$prog restart: rank 1 SIGKILLed in epoch 2, restarted once, resumed after epoch 1, checkpoint equals the reference"
status=0
LOCKSTEP_TEST_SIGKILL_AT=1:2:5 job "$work/norestart.log" "$work/norestart.safetensors" 0 || status=$?
[ "$status" -ne 0 ] || bad "without restarts the killed job succeeded" "$work/norestart.log"
grep -q "restarting" "$work/norestart.log" && bad "--max-restarts 0 restarted" "$work/norestart.log"
echo "no restart: --max-restarts 0 fails the job (exit $status)"
echo "check_ddp_restart $prog: PASS"
