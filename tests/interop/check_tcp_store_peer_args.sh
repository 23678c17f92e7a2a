#!/usr/bin/env bash
# tests/interop/check_tcp_store_peer_args.sh BIN_DIR — the interop test helper
# lockstep_tcp_store_peer refuses a malformed PORT (it took 'abc' as 0) and a PORT_FILE in
# a missing directory (it failed silently, then waited), each with exit 1 and a message.
# Read before: tests/interop/tcp_store_peer.cpp.
set -uo pipefail
peer="$1/lockstep_tcp_store_peer"
failures=0
check() {  # TEXT ARGS...
  local text="$1" out rc
  shift
  out=$(timeout -s KILL 30 "$peer" "$@" 2>&1)
  rc=$?
  if [ "$rc" -eq 1 ] && grep -qF -- "$text" <<<"$out"; then echo "ok: $*: $out"
  else echo "FAIL: lockstep_tcp_store_peer $* -> exit $rc, want 1 and: $text; got: $out"; failures=$((failures + 1)); fi
}
check "PORT 'abc' is not a TCP port (1..65535)" client 127.0.0.1 abc
check "PORT '70000' is not a TCP port (1..65535)" client 127.0.0.1 70000
check "cannot write the port to '/nonexistent-dir/port'" serve /nonexistent-dir/port
[ "$failures" -eq 0 ] || exit 1
echo "check_tcp_store_peer_args: PASS"
