#!/usr/bin/env bash
# tests/interop/check_torch_tcpstore.sh — lockstep's TCPStore against PyTorch's,
# both ways: a torch.distributed.TCPStore client of a lockstep-hosted store, and a
# lockstep client of a PyTorch-hosted store with each server backend (libuv, the
# default, and the classic one, use_libuv=False). Not a download: it uses
# $TORCH_PY, else the venv bench/torch/venv.sh made
# (${LOCKSTEP_TORCH_VENV:-~/.cache/lockstep/torch-venv}), and exits 77 (CTest:
# Skipped) with a message when neither imports torch.
#   tests/interop/check_torch_tcpstore.sh BUILD/bin
# Read before: tests/interop/tcp_store_peer.cpp, tests/interop/torch_tcpstore.py.
set -euo pipefail
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
py=${TORCH_PY:-${LOCKSTEP_TORCH_VENV:-$HOME/.cache/lockstep/torch-venv}/bin/python}
if ! "$py" -c "import torch.distributed" 2>/dev/null; then
  echo "SKIP: no PyTorch at $py (make one with bench/torch/venv.sh, or set TORCH_PY)"
  exit 77
fi
peer=$bin/lockstep_tcp_store_peer
[[ -x $peer ]] || { echo "check_torch_tcpstore.sh: $peer is not built (cmake --build build --target lockstep_tcp_store_peer)"; exit 2; }
tmp=$(mktemp -d)
server_pid=
cleanup() {
  if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

echo "== PyTorch $("$py" -c 'import torch; print(torch.__version__)') client -> lockstep server"
"$peer" serve "$tmp/port" &
server_pid=$!
for _ in $(seq 100); do [[ -s $tmp/port ]] && break; sleep 0.1; done
"$py" "$here/torch_tcpstore.py" client "$(cat "$tmp/port")"
wait "$server_pid"
server_pid=

for backend in libuv classic; do
  echo "== lockstep client -> PyTorch server ($backend)"
  "$py" "$here/torch_tcpstore.py" serve "$peer" "$backend"
done
echo "check_torch_tcpstore: PASS"
