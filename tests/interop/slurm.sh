# tests/interop/slurm.sh — a throw-away Slurm cluster's pieces, as a library to `source`
# (tests/interop/check_slurm.sh: one node; tests/interop/check_two_hosts.sh: two nodes in
# network namespaces). Everything lives under one temporary folder DIR.
#
#   slurm_munged DIR          starts munged (socket DIR/munge.socket) in the background, sets
#                             MUNGED_PID, and waits until the socket is there
#   slurm_conf DIR CTLD_HOST CTLD_PORT SLURMD_PORT LINE...
#                             writes DIR/slurm.conf — root daemons, munge through DIR's
#                             socket, proctrack/linuxproc, task/none, cons_tres with CR_CPU,
#                             no accounting, state, spool, pid and log files under DIR (per
#                             node: %n) — ending with the NodeName= / PartitionName= LINEs,
#                             and exports SLURM_CONF
#   slurm_wait_idle N         waits (30 s) until sinfo shows N idle nodes; 1 if never
# The callers start slurmctld / slurmd themselves and stop every daemon by its PID.
# Read next: tests/interop/check_slurm.sh.

slurm_munged() {  # DIR
  munged --foreground --force --socket="$1/munge.socket" --pid-file="$1/munged.pid" \
    --log-file="$1/munged.log" --seed-file="$1/munged.seed" > /dev/null 2>&1 &
  MUNGED_PID=$!
  local _
  for _ in $(seq 50); do [ -S "$1/munge.socket" ] && return 0; sleep 0.1; done
  return 1
}

slurm_conf() {  # DIR CTLD_HOST CTLD_PORT SLURMD_PORT LINE...
  local dir=$1 line
  mkdir -p "$dir/state"
  {
    cat <<CONF
ClusterName=lockstep
SlurmctldHost=$2
SlurmctldPort=$3
SlurmdPort=$4
AuthType=auth/munge
AuthInfo=socket=$dir/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
CONF
    shift 4
    for line in "$@"; do echo "$line"; done
  } > "$dir/slurm.conf"
  export SLURM_CONF=$dir/slurm.conf
}

slurm_wait_idle() {  # N [CMD_PREFIX...]: sinfo run under CMD_PREFIX (e.g. a namespace's)
  local n=$1 _
  shift
  for _ in $(seq 150); do
    [ "$("$@" sinfo -h -o '%T %D' 2> /dev/null)" = "idle $n" ] && return 0
    sleep 0.2
  done
  return 1
}
