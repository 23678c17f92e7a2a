#!/usr/bin/env bash
# tests/examples/check_foreign_port.sh BIN_DIR — a non-zero rank whose MASTER_PORT
# is held by a service that accepts connections but never answers (another program, not
# rank 0's store) says so within seconds on stderr, and fails naming the foreign service
# when the handshake's deadline passes — not a silent wait of the whole timeout.
# Read before: distributed/store/tcp_store.cpp (TCPStore::handshake).
set -uo pipefail
bin=$(cd "$1" && pwd)
work=$(mktemp -d)
server=""
cleanup() { [ -n "$server" ] && kill "$server" 2> /dev/null; rm -rf "$work"; }
trap cleanup EXIT
# A silent service: accepts, reads, never answers.
/usr/bin/python3 - "$work/port" <<'PY' &
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(8)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
held = []
while True:
    c, _ = s.accept()
    held.append(c)
PY
server=$!
for _ in $(seq 50); do [ -s "$work/port" ] && break; sleep 0.1; done
port=$(cat "$work/port")
start=$(date +%s)
(cd "$work" && env -u LOCAL_RANK WORLD_SIZE=2 RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" LOCKSTEP_TIMEOUT_S=8 \
  timeout -s KILL 60 "$bin/train_ddp" --epochs 1 --checkpoint c.safetensors) > "$work/out.log" 2>&1
rc=$?
elapsed=$(( $(date +%s) - start ))
failures=0
[ "$rc" -eq 1 ] || { echo "FAIL: expected exit 1, got $rc"; failures=$((failures + 1)); }
grep -qF "accepted the connection but has not answered the store handshake for 2 s" "$work/out.log" ||
  { echo "FAIL: no notice while waiting"; failures=$((failures + 1)); }
grep -qF "is not a lockstep (or PyTorch) TCPStore" "$work/out.log" ||
  { echo "FAIL: the error does not name the foreign service"; failures=$((failures + 1)); }
[ "$elapsed" -le 30 ] || { echo "FAIL: took $elapsed s"; failures=$((failures + 1)); }
if [ "$failures" -gt 0 ]; then cat "$work/out.log"; exit 1; fi
echo "check_foreign_port: PASS ($elapsed s): $(grep -F -m1 'has not answered' "$work/out.log")"
