#!/usr/bin/env bash
# tests/examples/check_resume_cli.sh BIN_DIR — train_fashion_mnist's --resume,
# --overwrite and hyper-parameters on resume (Note [Resume semantics] in
# examples/train_checkpoint.h): a missing checkpoint under --resume is an error,
# --resume auto starts fresh and says so, a fresh run refuses to overwrite a
# checkpoint unless --overwrite, a missing directory fails before training, a
# hyper-parameter given on resume applies (and is announced when it differs),
# one not given is the checkpoint's. Skips (exit 77 with a message, CTest: Skipped) when the
# Fashion-MNIST data is not installed. Each run trains on 128 images.
# Read before: examples/train_checkpoint.h. Read next: tests/examples/check_resume.sh.
set -uo pipefail
bin=$(cd "$1" && pwd)
root=/usr/share/datasets/fashion-mnist
if [ ! -d "$root" ]; then echo "SKIP: $root missing (apt-get install dataset-fashion-mnist)"; exit 77; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
small=(--limit 128 --test-limit 100 --log-every 1000)

# expect STATUS TEXT ARGS...: train_fashion_mnist ARGS exits STATUS with TEXT in its output
# (TEXT "!PATTERN": PATTERN must NOT appear). The output is kept in $work/last.log.
expect() {
  local want="$1" text="$2"
  shift 2
  (cd "$work" && env -u RANK -u WORLD_SIZE timeout 300 "$bin/train_fashion_mnist" "${small[@]}" "$@") \
    > "$work/last.log" 2>&1
  local rc=$?
  local ok=1
  [ "$rc" -eq "$want" ] || ok=0
  if [ "${text:0:1}" = "!" ]; then
    grep -qF -- "${text:1}" "$work/last.log" && ok=0
  else
    grep -qF -- "$text" "$work/last.log" || ok=0
  fi
  if [ "$ok" -eq 1 ]; then
    echo "ok: $* -> exit $rc ($text)"
  else
    echo "FAIL: train_fashion_mnist $* -> exit $rc (want $want, output with: $text); output:"
    head -20 "$work/last.log"
    failures=$((failures + 1))
  fi
}

# --resume needs the file; nothing is created or trained when it is missing.
expect 2 "--resume: no checkpoint at $work/nosuch.safetensors" --epochs 1 --resume --checkpoint "$work/nosuch.safetensors"
[ -e "$work/nosuch.safetensors" ] && { echo "FAIL: a checkpoint appeared"; failures=$((failures + 1)); }
# --resume auto starts fresh, and says so.
expect 0 "no checkpoint found at $work/a.safetensors, starting fresh" --epochs 1 --resume auto \
  --checkpoint "$work/a.safetensors"
[ -e "$work/a.safetensors" ] || { echo "FAIL: --resume auto wrote no checkpoint"; failures=$((failures + 1)); }
# A fresh run does not overwrite it, unless told to.
cp "$work/a.safetensors" "$work/a.before"
expect 2 "the checkpoint $work/a.safetensors exists; pass --resume to continue it, --overwrite to replace it" \
  --epochs 1 --checkpoint "$work/a.safetensors"
cmp -s "$work/a.safetensors" "$work/a.before" || { echo "FAIL: the refused run changed the file"; failures=$((failures + 1)); }
expect 0 "epoch 1 train_loss" --epochs 1 --seed 3 --overwrite --checkpoint "$work/a.safetensors"
cmp -s "$work/a.safetensors" "$work/a.before" && { echo "FAIL: --overwrite kept the old file"; failures=$((failures + 1)); }
# An unusable checkpoint path fails before the first epoch.
expect 2 "the checkpoint's directory '$work/nodir' does not exist" --epochs 1 --checkpoint "$work/nodir/c.safetensors"
expect 2 "!epoch 1" --epochs 1 --checkpoint "$work/nodir/c.safetensors"
expect 2 "cannot write the checkpoint into '/sys'" --epochs 1 --checkpoint /sys/lockstep_check.safetensors
mkdir "$work/isdir"
expect 2 "is a directory; name a file" --epochs 1 --checkpoint "$work/isdir"

# Hyper-parameters on resume: one not given is the checkpoint's (lr 0.1 here) ...
expect 0 "SGD lr 0.1 " --epochs 1 --lr 0.1 --checkpoint "$work/b.safetensors"
cp "$work/b.safetensors" "$work/d.safetensors"
cp "$work/b.safetensors" "$work/e.safetensors"
expect 0 "SGD lr 0.1 " --epochs 2 --resume --checkpoint "$work/b.safetensors"
grep -qF "resume: --epochs 2 replaces the checkpoint's 1 from epoch 2 on" "$work/last.log" ||
  { echo "FAIL: the changed --epochs is not announced"; failures=$((failures + 1)); }
# ... one given applies, announced when it differs ...
expect 0 "resume: --lr 1e-07 replaces the checkpoint's 0.1 from epoch 2 on" --epochs 2 --lr 1e-7 --resume \
  --checkpoint "$work/d.safetensors"
grep -qF "SGD lr 1e-07 " "$work/last.log" || { echo "FAIL: the banner does not show the lr that applies"; failures=$((failures + 1)); }
# ... and the same value given or inherited is the same run.
expect 0 "!resume: --lr" --epochs 2 --lr 0.1 --resume --checkpoint "$work/e.safetensors"
cmp -s "$work/b.safetensors" "$work/e.safetensors" ||
  { echo "FAIL: --lr 0.1 given and inherited on resume wrote different checkpoints"; failures=$((failures + 1)); }
cmp -s "$work/d.safetensors" "$work/e.safetensors" && {
  echo "FAIL: --lr 1e-7 and --lr 0.1 on resume wrote the same checkpoint (the given lr did not apply)"
  failures=$((failures + 1))
}
# A checkpoint that has all its epochs: nothing to do, said so.
expect 0 "nothing to train: the checkpoint has 2 of --epochs 2" --resume --checkpoint "$work/e.safetensors"

# A checkpoint whose epochs_done is not a number: an error naming it, not a crash. (Its
# checksum is written anew, as a program writing that value would; an edit by hand alone is
# refused by the checksum: tests/examples/check_checkpoint_safety.sh.)
python3 - "$work/e.safetensors" "$work/bad.safetensors" <<'PY'
import json, struct, sys, zlib
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
header["__metadata__"]["epochs_done"] = "two"
header["__metadata__"]["lockstep.crc32"] = "00000000"
text = json.dumps(header, separators=(",", ":")).encode()
blob = struct.pack("<Q", len(text)) + text + data[8 + n:]
crc = b'"lockstep.crc32":"%08x"' % (zlib.crc32(blob) & 0xffffffff)
open(sys.argv[2], "wb").write(blob.replace(b'"lockstep.crc32":"00000000"', crc))
PY
expect 1 "epochs_done 'two' is not a whole number >= 0; the file is damaged" --resume --checkpoint "$work/bad.safetensors"

if [ "$failures" -gt 0 ]; then echo "$failures check(s) failed"; exit 1; fi
echo "every resume check passed"
