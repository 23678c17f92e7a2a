#!/usr/bin/env bash
# tests/examples/check_ddp_kill_resume.sh BIN_DIR [SHIM] — a 2-rank DDP training
# job killed with SIGKILL resumes from its last complete checkpoint and ends
# bit-identical to a run that was never interrupted (the promise: "resume after a
# kill at any point restores the last complete checkpoint and continues with
# identical results").
#  0. Reference: 2 ranks through lockstep-run, 3 epochs on the first 1,280
#     training images (cosine lr), a checkpoint after each epoch.
#  1. Rank 1 is killed mid-epoch 2, after the epoch-1 checkpoint
#     (LOCKSTEP_TEST_SIGKILL_AT, a test hook in train_fashion_mnist).
#  2. Rank 0 is killed while writing the epoch-2 checkpoint: SHIM (the
#     LD_PRELOAD library built from sigkill_before_rename.cpp) kills it after
#     the temporary file is written and before the rename. Skipped without SHIM.
# For each kill: lockstep-run exits non-zero in time (before the uninterrupted
# job's duration plus LOCKSTEP_TIMEOUT_S), naming the
# killed rank and SIGKILL; the checkpoint on disk is the epoch-1 one and loads
# (its CRC-32 is verified on load); `--resume` on 2 ranks then finishes the
# job, and its final checkpoint (model, optimizer state, metadata) is
# byte-identical to the reference's, as are its epoch-3 loss and accuracy.
# Skips (exit 77 with a message, CTest: Skipped) when the Fashion-MNIST data is not installed.
set -euo pipefail
bin="$1"
shim="${2:-}"
root=/usr/share/datasets/fashion-mnist
if [ ! -d "$root" ]; then echo "SKIP: $root missing (apt-get install dataset-fashion-mnist)"; exit 77; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export LOCKSTEP_TIMEOUT_S=60  # every wait on a peer gives up within 60 s (sanitizer builds are slow)

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' \
    2>/dev/null || echo $((20000 + RANDOM % 20000))
}
# run NAME CHECKPOINT [train args...]: 2 ranks; NAME.log gets both ranks' output; returns the exit status.
run() {
  local name="$1" ckpt="$2"
  shift 2
  local status=0
  "$bin/lockstep-run" --nproc-per-node 2 --master-port "$(free_port)" --grace-period 2 -- \
    "$bin/train_fashion_mnist" --limit 1280 --batch 32 --epochs 3 --schedule cosine --log-every 1000 \
    --test-limit 1000 --checkpoint "$ckpt" "$@" > "$work/$name.log" 2>&1 || status=$?
  return $status
}
fail() { echo "FAIL: $1"; shift; for f in "$@"; do echo "--- $f"; cat "$f"; done; exit 1; }
epoch_line() { grep "epoch $2 train_loss" "$1" | sed 's/^\[rank 0\] //; s/ seconds.*//'; }

start=$SECONDS
run reference "$work/reference.safetensors" || fail "the uninterrupted 2-rank run failed" "$work/reference.log"
# A killed job must end before the whole uninterrupted job plus one timeout:
# the other rank must not hang.
deadline=$((SECONDS - start + LOCKSTEP_TIMEOUT_S))
ref_epoch3=$(epoch_line "$work/reference.log" 3)
[ -n "$ref_epoch3" ] || fail "no epoch 3 line in the reference run" "$work/reference.log"
echo "reference: $ref_epoch3"

# check_kill NAME RANK: the killed job's log names RANK and SIGKILL, it ended in time,
# the checkpoint is epoch 1's, and a resumed 2-rank job ends identical to the reference.
check_kill() {
  local name="$1" killed="$2" status="$3" seconds="$4"
  local ckpt="$work/$name.safetensors" log="$work/$name.log"
  [ "$status" -ne 0 ] || fail "$name: lockstep-run exited 0 although rank $killed was killed" "$log"
  grep -q "rank $killed failed first (signal SIGKILL)" "$log" \
    || fail "$name: lockstep-run did not name rank $killed and SIGKILL" "$log"
  [ "$seconds" -le "$deadline" ] || fail "$name: the killed job took ${seconds}s to end (limit ${deadline}s)" "$log"
  [ -f "$ckpt" ] || fail "$name: no checkpoint on disk after the kill" "$log"
  # One process, --epochs 1 --resume: loads the file (its CRC-32 is checked)
  # and, epoch 1 being done, trains and rewrites nothing: a pure load check.
  "$bin/train_fashion_mnist" --limit 1280 --batch 32 --epochs 1 --schedule cosine --test-limit 1000 \
    --checkpoint "$ckpt" --resume > "$work/$name.load.log" 2>&1 \
    || fail "$name: the checkpoint left by the kill does not load" "$work/$name.load.log"
  grep -q "resumed from .* after epoch 1$" "$work/$name.load.log" \
    || fail "$name: the checkpoint on disk is not the epoch-1 one" "$work/$name.load.log"
  local status2=0
  run "$name.resumed" "$ckpt" --resume || status2=$?
  [ "$status2" -eq 0 ] || fail "$name: the resumed run failed" "$work/$name.resumed.log"
  grep -q "resumed from .* after epoch 1$" "$work/$name.resumed.log" \
    || fail "$name: the resumed run did not start after epoch 1" "$work/$name.resumed.log"
  cmp -s "$work/reference.safetensors" "$ckpt" \
    || fail "$name: the resumed job's final checkpoint differs from the uninterrupted run's" \
            "$work/reference.log" "$work/$name.resumed.log"
  local got
  got=$(epoch_line "$work/$name.resumed.log" 3)
  [ "$got" = "$ref_epoch3" ] || fail "$name: epoch 3 differs: '$got' vs '$ref_epoch3'" "$work/$name.resumed.log"
  echo "$name: lockstep-run exit $status after ${seconds}s naming rank $killed (SIGKILL); epoch-1 checkpoint" \
       "kept; resumed job identical to the reference (checkpoint bytes and '$got')"
}

# 1. Rank 1 dies before step 5 of epoch 2 (the epoch-1 checkpoint exists).
start=$SECONDS
status=0
LOCKSTEP_TEST_SIGKILL_AT=1:2:5 run killed_rank1 "$work/killed_rank1.safetensors" || status=$?
check_kill killed_rank1 1 "$status" $((SECONDS - start))

# 2. Rank 0 dies inside the epoch-2 save, between writing the temporary file and the rename.
if [ -n "$shim" ] && [ -f "$shim" ]; then
  ckpt="$work/killed_in_save.safetensors"
  start=$SECONDS
  status=0
  LD_PRELOAD="$shim" LOCKSTEP_TEST_SIGKILL_BEFORE_RENAME="$ckpt" LOCKSTEP_TEST_SIGKILL_BEFORE_RENAME_COUNT=2 \
    run killed_in_save "$ckpt" || status=$?
  grep -q "sigkill_before_rename: pid .* killed before renaming" "$work/killed_in_save.log" \
    || fail "killed_in_save: the shim did not fire" "$work/killed_in_save.log"
  ls "$ckpt".tmp.* > /dev/null 2>&1 \
    || fail "killed_in_save: no temporary file left: the kill did not land inside the save" "$work/killed_in_save.log"
  check_kill killed_in_save 0 "$status" $((SECONDS - start))
else
  echo "SKIP part 2 (kill inside a checkpoint write): no LD_PRELOAD shim given"
fi
