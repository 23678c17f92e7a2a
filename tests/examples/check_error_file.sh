#!/usr/bin/env bash
# tests/examples/check_error_file.sh BIN_DIR — Note [TORCHELASTIC_ERROR_FILE]:
# a program that fails with TORCHELASTIC_ERROR_FILE set writes the JSON error
# file torchrun reads, in the layout of PyTorch's ErrorHandler.record_exception,
# for a runtime lockstep::Error (exit 1), a usage error (exit 2) and a fatal
# signal (SIGSEGV sent to a training run: it still dies of SIGSEGV); without
# the variable no file appears. Checked with the system python3's json module.
set -euo pipefail
bin="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
check() {  # FILE EXPECTED_PREFIX
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
m = d["message"]
assert m["message"].startswith(sys.argv[2]), m["message"]
assert m["extraInfo"]["timestamp"].isdigit(), m
assert sys.argv[2] in m["extraInfo"]["py_callstack"], m
print("error file:", m["message"][:100])
PY
}
set +e
TORCHELASTIC_ERROR_FILE=$work/runtime.json RANK=0 "$bin/train_fashion_mnist" --root "$work/no-such-dir" 2> "$work/err"
rc=$?
set -e
[ $rc -eq 1 ] || { echo "FAIL: expected exit 1, got $rc"; cat "$work/err"; exit 1; }
check "$work/runtime.json" "lockstep::Error: FashionMNIST"
set +e
TORCHELASTIC_ERROR_FILE=$work/usage.json "$bin/train_fashion_mnist" --epochs abc 2> "$work/err"
rc=$?
set -e
[ $rc -eq 2 ] || { echo "FAIL: expected exit 2, got $rc"; cat "$work/err"; exit 1; }
check "$work/usage.json" "usage error: --epochs"
TORCHELASTIC_ERROR_FILE=$work/signal.json RANK=1 "$bin/train_fashion_mnist" --epochs 1 --checkpoint \
  "$work/never.safetensors" > /dev/null 2>&1 &
pid=$!
sleep 1
kill -SEGV "$pid"
set +e
wait "$pid"
rc=$?
set -e
[ $rc -eq $((128 + 11)) ] || { echo "FAIL: expected death by SIGSEGV (139), got $rc"; exit 1; }
check "$work/signal.json" "fatal signal SIGSEGV"
"$bin/train_fashion_mnist" --root "$work/no-such-dir" 2> /dev/null && { echo "FAIL: should fail"; exit 1; }
[ -z "$(ls "$work"/*.json 2>/dev/null | grep -v -e runtime.json -e usage.json -e signal.json)" ] || { echo "FAIL: stray file"; exit 1; }
echo "check_error_file: PASS"
