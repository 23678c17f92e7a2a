#!/usr/bin/env bash
# tests/examples/check_checkpoint_safety.sh BIN_DIR — the checkpoint of the training
# examples is crash-safe and exclusive (Note [Resume semantics] in
# examples/train_checkpoint.h, Note [Checkpoint lock] in examples/checkpoint_lock.h,
# Note [Checkpoint checksum] in nn/serialize.h), with train_ddp (synthetic data, one
# process unless said otherwise):
#  - an edited "epochs_done" or "hparams.lr" is refused by the checksum, naming the file;
#  - a second run in the same checkpoint (fresh, --resume, --resume auto, or a fresh one
#    started moments after the first) refuses at start, naming the first run's PID, and a
#    run killed with SIGKILL blocks nobody;
#  - a FIFO as --checkpoint is refused at once, never waited on;
#  - a symbolic link is followed: its target gets the checkpoint, the link stays;
#  - ranks started with a different --batch fail before training, naming it;
#  - a resume with another world size or --deterministic says so (train_fashion_mnist
#    for --amp bf16, when its data is installed);
#  - NaN weights in a checkpoint are refused naming the tensor; weights that make the loss
#    non-finite stop the run naming rank, epoch and step, and keep the checkpoint;
#  - a Fashion-MNIST directory with no images is refused.
# Read before: examples/train_run.h. Read next: tests/examples/check_resume_cli.sh.
set -uo pipefail
bin=$(cd "$1" && pwd)
work=$(mktemp -d)
background=()
cleanup() {
  for pid in "${background[@]}"; do kill -KILL "$pid" 2> /dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $1"; [ -n "${2:-}" ] && head -20 "$2"; failures=$((failures + 1)); }

# expect STATUS TEXT PROGRAM ARGS...: PROGRAM (in BIN_DIR, run in $work) exits STATUS with
# TEXT in its output, kept in $work/last.log.
expect() {
  local want="$1" text="$2" prog="$3"
  shift 3
  (cd "$work" && env -u RANK -u WORLD_SIZE -u LOCAL_RANK timeout -s KILL 60 "$bin/$prog" "$@") > "$work/last.log" 2>&1
  local rc=$?
  if [ "$rc" -eq "$want" ] && grep -qF -- "$text" "$work/last.log"; then
    echo "ok: $prog $* -> exit $rc: $(grep -F -m1 -- "$text" "$work/last.log")"
  else
    fail "$prog $* -> exit $rc (want $want, output with: $text); output:" "$work/last.log"
  fi
}

# rewrite SRC DST PYTHON [keep-crc]: DST is SRC with PYTHON run on `meta` (its
# __metadata__) and `tensors` (name -> bytearray of float32 for F32 tensors), with helpers
# set_f32(name, index, value) and scale_f32(name, factor). With "keep-crc" the old checksum
# stays (an edit by hand); else a valid one is written (a file as a diverged run writes it).
rewrite() {
  /usr/bin/python3 - "$@" <<'PY'
import json, struct, sys, zlib
src, dst, code = sys.argv[1], sys.argv[2], sys.argv[3]
keep_crc = len(sys.argv) > 4
data = open(src, "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
meta = header.pop("__metadata__")
tensors = {k: bytearray(data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in header.items()}
def set_f32(name, i, value): struct.pack_into("<f", tensors[name], 4 * i, value)
def scale_f32(name, factor):
    t = tensors[name]
    for i in range(len(t) // 4): struct.pack_into("<f", t, 4 * i, struct.unpack_from("<f", t, 4 * i)[0] * factor)
exec(code)
if not keep_crc: meta["lockstep.crc32"] = "00000000"
out, body = {"__metadata__": dict(sorted(meta.items()))}, b""
for k in sorted(tensors):
    out[k] = {"dtype": header[k]["dtype"], "shape": header[k]["shape"], "data_offsets": [len(body), len(body) + len(tensors[k])]}
    body += bytes(tensors[k])
text = json.dumps(out, separators=(",", ":"))
text += " " * ((8 - len(text) % 8) % 8)
blob = struct.pack("<Q", len(text)) + text.encode() + body
if not keep_crc:
    blob = blob.replace(b'"lockstep.crc32":"00000000"', b'"lockstep.crc32":"%08x"' % (zlib.crc32(blob) & 0xffffffff))
open(dst, "wb").write(blob)
PY
}

run=(--epochs 1 --batch 256)
expect 0 "epoch 1 train_loss" train_ddp "${run[@]}" --checkpoint a.safetensors
cp "$work/a.safetensors" "$work/a.before"

# The checksum covers the metadata: edits by hand are refused (before, they were used).
rewrite "$work/a.before" "$work/edited_epochs.safetensors" 'meta["epochs_done"] = "9"' keep-crc
expect 1 "the file's CRC-32 (header, metadata and data)" train_ddp --epochs 2 --resume \
  --checkpoint edited_epochs.safetensors
grep -qF "edited_epochs.safetensors" "$work/last.log" || fail "the CRC message does not name the file" "$work/last.log"
rewrite "$work/a.before" "$work/edited_lr.safetensors" 'meta["hparams.lr"] = "0.5"' keep-crc
expect 1 "was modified after it was written" train_ddp --epochs 2 --resume --checkpoint edited_lr.safetensors
# The rewriter itself writes files that load when it recomputes the checksum.
rewrite "$work/a.before" "$work/same.safetensors" 'pass'
expect 0 "resumed from same.safetensors after epoch 1" train_ddp --epochs 2 --resume --checkpoint same.safetensors

# One run per checkpoint: a second one refuses at start, naming the first's PID.
(cd "$work" && exec env -u RANK -u WORLD_SIZE "$bin/train_ddp" --epochs 100000 --batch 512 \
  --checkpoint busy.safetensors > "$work/busy.log" 2>&1) &
busy=$!
background+=("$busy")
for _ in $(seq 100); do [ -s "$work/busy.safetensors" ] && break; sleep 0.1; done
[ -s "$work/busy.safetensors" ] || fail "the long run wrote no checkpoint" "$work/busy.log"
expect 2 "is in use by another run (PID $busy" train_ddp "${run[@]}" --overwrite --checkpoint busy.safetensors
expect 2 "is in use by another run (PID $busy" train_ddp --epochs 100000 --resume --checkpoint busy.safetensors
expect 2 "is in use by another run (PID $busy" train_ddp --epochs 100000 --resume auto --checkpoint busy.safetensors
# Through a symbolic link to the same file: the same lock.
ln -s busy.safetensors "$work/busy_link.safetensors"
expect 2 "is in use by another run (PID $busy" train_ddp "${run[@]}" --overwrite --checkpoint busy_link.safetensors
kill -KILL "$busy"
wait "$busy" 2> /dev/null
# Two fresh runs started moments apart, neither with --overwrite: the second refuses even
# when the first has not written its checkpoint yet (the "exists" check alone let it replace it).
(cd "$work" && exec env -u RANK -u WORLD_SIZE "$bin/train_ddp" --epochs 100000 --batch 512 \
  --checkpoint race.safetensors > "$work/race.log" 2>&1) &
race=$!
background+=("$race")
for _ in $(seq 100); do [ -s "$work/race.safetensors.lock" ] && break; sleep 0.05; done
expect 2 "is in use by another run (PID $race" train_ddp "${run[@]}" --checkpoint race.safetensors
kill -KILL "$race"
wait "$race" 2> /dev/null
# Killed: its lock went with it, and its last checkpoint is whole.
expect 0 "resumed from busy.safetensors" train_ddp --resume auto --checkpoint busy.safetensors --epochs 1
[ -e "$work/busy.safetensors.lock" ] && fail "a run that ended normally left its lock file"

# A FIFO is refused at once (before, each of these hung).
mkfifo "$work/fifo.safetensors"
expect 2 "fifo.safetensors is not a regular file" train_ddp "${run[@]}" --checkpoint fifo.safetensors
expect 2 "fifo.safetensors is not a regular file" train_ddp "${run[@]}" --overwrite --checkpoint fifo.safetensors
expect 2 "fifo.safetensors is not a regular file" train_ddp --epochs 2 --resume --checkpoint fifo.safetensors
expect 2 "fifo.safetensors is not a regular file" train_ddp --epochs 2 --resume auto --checkpoint fifo.safetensors

# A symbolic link is followed: the target is replaced, the link stays a link.
mkdir "$work/store"
ln -s store/real.safetensors "$work/link.safetensors"
expect 0 "epoch 1 train_loss" train_ddp "${run[@]}" --checkpoint link.safetensors
[ -L "$work/link.safetensors" ] || fail "the symbolic link was replaced by a file"
[ -f "$work/store/real.safetensors" ] || fail "the link's target was not written"
expect 0 "resumed from link.safetensors after epoch 1" train_ddp --epochs 2 --batch 256 --resume \
  --checkpoint link.safetensors
[ -L "$work/link.safetensors" ] || fail "the symbolic link was replaced by a file on resume"

# Resume notices: another world size, --deterministic (and --amp below).
cp "$work/a.before" "$work/det.safetensors"
expect 0 "resume: the checkpoint was written with --deterministic 0, this run uses --deterministic 1" \
  train_ddp --epochs 2 --resume --deterministic 1 --checkpoint det.safetensors
cp "$work/a.before" "$work/world.safetensors"
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
(cd "$work" && timeout -s KILL 120 "$bin/lockstep-run" --nproc-per-node 2 --master-port "$port" -- \
  "$bin/train_ddp" --epochs 2 --resume --checkpoint world.safetensors) > "$work/world.log" 2>&1 ||
  fail "the 2-rank resume failed" "$work/world.log"
grep -qF "resume: the checkpoint was written by 1 rank(s), this run has 2" "$work/world.log" ||
  fail "no notice for the changed world size" "$work/world.log"
# A different --batch per rank is caught before training, not at the timeout.
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
start=$(date +%s)
(cd "$work" && LOCKSTEP_TIMEOUT_S=60 timeout -s KILL 120 "$bin/lockstep-run" --nproc-per-node 2 --master-port "$port" -- \
  sh -c 'exec "$0" --epochs 1 --batch $((5 + RANK)) --checkpoint batch.safetensors' "$bin/train_ddp") \
  > "$work/batch.log" 2>&1 && fail "ranks with different --batch trained" "$work/batch.log"
grep -qF "rank 1 was started with --batch 6 (rank 0: 5); every rank must train with the same" "$work/batch.log" ||
  fail "a different --batch per rank is not named" "$work/batch.log"
[ $(( $(date +%s) - start )) -lt 30 ] || fail "a different --batch per rank took until the timeout" "$work/batch.log"
expect 0 "resumed from a.safetensors after epoch 1" train_ddp --epochs 3 --resume --checkpoint a.safetensors
grep -qF "resume: the checkpoint was written" "$work/last.log" && fail "a notice without a change" "$work/last.log"

# NaN weights are refused, naming the tensor.
rewrite "$work/a.before" "$work/nan.safetensors" 'set_f32("model.fc2.weight", 197, float("nan"))'
expect 1 "tensor 'model.fc2.weight' holds NaN (element 197)" train_ddp --epochs 2 --resume --checkpoint nan.safetensors
# Finite weights so large that the loss overflows: the run stops naming where, the file stays.
rewrite "$work/a.before" "$work/huge.safetensors" 'scale_f32("model.fc3.weight", 1e36)'
cp "$work/huge.safetensors" "$work/huge.before"
expect 1 "the loss is" train_ddp --epochs 2 --resume --checkpoint huge.safetensors
grep -qE "the loss is -?(nan|inf) on rank 0 at epoch 2 step [0-9]+: training diverged" "$work/last.log" ||
  fail "the non-finite loss is not located" "$work/last.log"
cmp -s "$work/huge.safetensors" "$work/huge.before" || fail "the diverged run overwrote its checkpoint"

# A Fashion-MNIST directory whose files hold no images.
mkdir "$work/empty_data"
/usr/bin/python3 - "$work/empty_data" <<'PY'
import struct, sys
for split in ("train", "t10k"):
    open(f"{sys.argv[1]}/{split}-images-idx3-ubyte", "wb").write(struct.pack(">IIII", 0x803, 0, 28, 28))
    open(f"{sys.argv[1]}/{split}-labels-idx1-ubyte", "wb").write(struct.pack(">II", 0x801, 0))
PY
expect 1 "holds no images" train_fashion_mnist --root "$work/empty_data" --epochs 1 --checkpoint e.safetensors

# --amp bf16 on resume (train_fashion_mnist: needs its data).
if [ -d /usr/share/datasets/fashion-mnist ]; then
  small=(--limit 128 --test-limit 100 --log-every 1000)
  expect 0 "epoch 1 train_loss" train_fashion_mnist "${small[@]}" --epochs 1 --checkpoint f.safetensors
  expect 0 "resume: the checkpoint was written with --amp off, this run uses --amp bf16" \
    train_fashion_mnist "${small[@]}" --epochs 2 --amp bf16 --resume --checkpoint f.safetensors
else
  echo "note: /usr/share/datasets/fashion-mnist missing; the --amp notice is not checked"
fi

if [ "$failures" -gt 0 ]; then echo "$failures check(s) failed"; exit 1; fi
echo "check_checkpoint_safety: PASS"
