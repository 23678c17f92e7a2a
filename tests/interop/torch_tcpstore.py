"""tests/interop/torch_tcpstore.py — PyTorch's side of the TCPStore interop check.

  torch_tcpstore.py client PORT            a torch.distributed.TCPStore client of the
                                           lockstep-hosted store at 127.0.0.1:PORT
  torch_tcpstore.py serve PEER libuv|classic   host a PyTorch store (that server
                                           backend) and run PEER client against it

Each step prints one line; a mismatch raises (exit 1).
Read before: tests/interop/tcp_store_peer.cpp. Driven by tests/interop/check_torch_tcpstore.sh.
"""
import datetime
import subprocess
import sys

import torch.distributed as dist


def expect(ok, what):
    if not ok:
        raise SystemExit(f"torch_tcpstore.py: FAILED: {what}")
    print(f"pytorch: {what}: ok", flush=True)


def client(port):
    s = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=30))
    s.set("py/key", "from-python")
    expect(s.get("py/key") == b"from-python", "client: set then get")
    expect(s.add("shared/count", 3) == 3 and s.add("shared/count", 4) == 7, "client: add")
    expect(s.compare_set("py/cas", "", "v1") == b"v1", "client: compare_set on an absent key")
    expect(s.compare_set("py/cas", "zz", "v2") == b"v1", "client: compare_set mismatch")
    expect(s.check(["py/key"]) and not s.check(["py/absent"]), "client: check")
    try:
        s.wait(["py/absent"], datetime.timedelta(milliseconds=300))
        timed_out = False
    except Exception:  # DistStoreError
        timed_out = True
    expect(timed_out, "client: wait on a missing key times out")
    s.wait(["ls/hello"])
    expect(s.get("ls/hello") == b"from-lockstep", "client: get of the key lockstep's server set")
    expect(s.num_keys() >= 4, "client: num_keys")
    expect(s.delete_key("py/cas") and not s.delete_key("py/cas"), "client: delete_key")
    s.append("py/app", "a")
    s.append("py/app", "b")
    expect(s.get("py/app") == b"ab", "client: append")
    s.multi_set(["py/m1", "py/m2"], ["1", "2"])
    expect(s.multi_get(["py/m1", "py/m2"]) == [b"1", b"2"], "client: multi_set / multi_get")
    s.set("py/done", "1")


def serve(peer, backend):
    s = dist.TCPStore("127.0.0.1", 0, is_master=True, use_libuv=(backend == "libuv"),
                      wait_for_workers=False, timeout=datetime.timedelta(seconds=30))
    s.set("py/key", "from-python")
    peer_proc = subprocess.Popen([peer, "client", "127.0.0.1", str(s.port)])
    s.wait(["ls/key"])
    s.set("py/go", "go")
    s.wait(["ls/done"])
    expect(peer_proc.wait(timeout=60) == 0, f"server ({backend}): the lockstep client finished")
    expect(s.get("ls/key") == b"from-lockstep", f"server ({backend}): lockstep's set reads back")
    expect(s.get("shared/count") == b"7", f"server ({backend}): lockstep's add is a decimal counter")
    expect(s.get("ls/cas") == b"first", f"server ({backend}): lockstep's compare_set")


if __name__ == "__main__":
    if sys.argv[1] == "client":
        client(int(sys.argv[2]))
    else:
        serve(sys.argv[2], sys.argv[3])
