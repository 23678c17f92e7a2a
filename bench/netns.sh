# bench/netns.sh — simulated hosts on one machine, as a library to `source`: network
# namespaces joined through a bridge, one per host. Used by bench/hosts.sh (the
# benchmarks, with a rate cap) and tests/interop/check_torchrun.sh (torchrun's c10d
# rendezvous across two hosts, no cap).
#
#   netns_usable                 0 when this process can make namespaces (root, `ip netns`),
#                                else prints why on stdout and returns 1
#   netns_up PREFIX N [RATE]     namespace PREFIXsw holds bridge br0; host i (0..N-1) is
#                                namespace PREFIXh$i with interface h$i, address
#                                198.18.0.(i+1)/24 (198.18.0.0/15 is reserved for
#                                benchmarks, RFC 2544), joined by a veth pair to port p$i on
#                                the bridge; with RATE (tc's words: 1gbit) both ends of every
#                                pair get `tbf rate RATE burst 1mb latency 100ms`. Refuses
#                                when namespaces with PREFIX exist already.
#   netns_names PREFIX N         gives host i the name host$i: writes /etc/netns/PREFIXh$i/hosts
#                                (localhost, host0..host(N-1) at their addresses), which
#                                `ip netns exec` shows as /etc/hosts inside the namespace
#                                only; run a command as host i with netns_as (below)
#   netns_as PREFIX I            sets the array NETNS_AS to the command line that runs what
#                                follows in host I's namespace, with its own UTS namespace
#                                (unshare --uts) and hostname host$I: "${NETNS_AS[@]}" CMD...
#                                Every step execs the next, so `"${NETNS_AS[@]}" CMD &` gives
#                                in $! the PID CMD ends up running as (kill it by that PID).
#   netns_kill PREFIX            ends every process still running in a namespace with PREFIX
#                                (`ip netns pids`: only what was started in them, e.g. a daemon's
#                                detached helpers): SIGTERM, up to 5 s, then SIGKILL
#   netns_down PREFIX            deletes every namespace with PREFIX (the veths go with them)
#                                and the /etc/netns/PREFIX* folders netns_names wrote
#   netns_list PREFIX            the namespaces with PREFIX, one a line
#
# The veth ends are created inside their namespaces (`ip link add ... netns`), so nothing
# is ever named in the machine's own namespace and two runs with different prefixes never
# collide. Callers delete what they made with a trap (netns_down on EXIT INT TERM).
# Read next: bench/hosts.sh, tests/interop/check_torchrun.sh.

netns_list() {  # PREFIX
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${1}(sw|h[0-9]+)$" || true
}

netns_usable() {
  if [[ $(id -u) -ne 0 ]]; then echo "not root (network namespaces need root)"; return 1; fi
  if ! command -v ip > /dev/null; then echo "no 'ip' command (apt-get install iproute2)"; return 1; fi
  if ! ip netns list > /dev/null 2>&1; then echo "'ip netns list' fails here: $(ip netns list 2>&1 | head -n 1)"; return 1; fi
  return 0
}

netns_up() {  # PREFIX N [RATE]
  local p=$1 n=$2 rate=${3:-} i
  [[ "$p" =~ ^[A-Za-z][A-Za-z0-9_-]{0,40}$ ]] || { echo "netns_up: prefix '$p' must be letters, digits, _ or -" >&2; return 1; }
  [[ "$n" =~ ^[0-9]+$ && "$n" -ge 1 && "$n" -le 200 ]] || { echo "netns_up: N must be 1..200, got '$n'" >&2; return 1; }
  if [[ -n "$(netns_list "$p")" ]]; then
    echo "netns_up: namespaces with prefix '$p' exist already (another run?): $(netns_list "$p" | tr '\n' ' ')" >&2
    return 1
  fi
  ip netns add "${p}sw" || return 1
  ip -n "${p}sw" link add br0 type bridge || return 1
  ip -n "${p}sw" link set br0 up || return 1
  for ((i = 0; i < n; ++i)); do
    ip netns add "${p}h$i" || return 1
    ip link add "h$i" netns "${p}h$i" type veth peer name "p$i" netns "${p}sw" || return 1
    ip -n "${p}sw" link set "p$i" master br0 || return 1
    ip -n "${p}sw" link set "p$i" up || return 1
    ip -n "${p}h$i" addr add "198.18.0.$((i + 1))/24" dev "h$i" || return 1
    ip -n "${p}h$i" link set "h$i" up || return 1
    ip -n "${p}h$i" link set lo up || return 1
    if [[ -n "$rate" ]]; then
      ip netns exec "${p}h$i" tc qdisc add dev "h$i" root tbf rate "$rate" burst 1mb latency 100ms || return 1
      ip netns exec "${p}sw" tc qdisc add dev "p$i" root tbf rate "$rate" burst 1mb latency 100ms || return 1
    fi
  done
}

netns_names() {  # PREFIX N
  local p=$1 n=$2 i j
  for ((i = 0; i < n; ++i)); do
    mkdir -p "/etc/netns/${p}h$i" || return 1
    {
      echo "127.0.0.1 localhost"
      for ((j = 0; j < n; ++j)); do echo "198.18.0.$((j + 1)) host$j"; done
    } > "/etc/netns/${p}h$i/hosts" || return 1
  done
}

netns_as() {  # PREFIX I
  # shellcheck disable=SC2016  # $0 and $@ are the inner shell's
  NETNS_AS=(ip netns exec "${1}h$2" unshare --uts sh -c 'hostname "$0" && exec "$@"' "host$2")
}

netns_kill() {  # PREFIX
  local ns pids=() pid _
  for ns in $(netns_list "$1"); do pids+=($(ip netns pids "$ns" 2> /dev/null)); done
  [[ ${#pids[@]} -gt 0 ]] || return 0
  for pid in "${pids[@]}"; do kill "$pid" 2> /dev/null || true; done
  for _ in $(seq 50); do
    for pid in "${pids[@]}"; do kill -0 "$pid" 2> /dev/null && break; pid=""; done
    [[ -z "$pid" ]] && return 0
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2> /dev/null || true; done
  return 0
}

netns_down() {  # PREFIX
  local ns
  for ns in $(netns_list "$1"); do ip netns del "$ns" 2>/dev/null || true; done
  for ns in /etc/netns/"$1"h*; do
    [[ -d "$ns" && "$(basename "$ns")" =~ ^${1}h[0-9]+$ ]] && rm -rf "$ns"
  done
  return 0
}
