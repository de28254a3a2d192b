#!/usr/bin/env bash
# A single-node Slurm cluster on localhost for the tests: munged, slurmctld and slurmd.
#
#   tests/cluster/slurm.sh install      apt-get install slurm-wlm munge (root, Debian/Ubuntu)
#   tests/cluster/slurm.sh start DIR    write DIR/slurm.conf, start the daemons, wait for the node
#   tests/cluster/slurm.sh stop DIR     stop the daemons by the pids they wrote
#
# Clients find it with SLURM_CONF=DIR/slurm.conf. proctrack/linuxproc and task/none need no
# cgroups, so it runs in containers. The node has partition `debug`, this host's cores, no GPUs.
set -euo pipefail
cmd=${1:?usage: slurm.sh install|start DIR|stop DIR}

case "$cmd" in
install)
    if command -v slurmctld >/dev/null && command -v munged >/dev/null; then exit 0; fi
    [ "$(id -u)" = 0 ] || { echo "slurm.sh: installing Slurm needs root" >&2; exit 3; }
    command -v apt-get >/dev/null || { echo "slurm.sh: installing Slurm needs apt-get" >&2; exit 3; }
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && apt-get install -y -qq slurm-wlm munge >/dev/null
    ;;
start)
    dir=$(mkdir -p "${2:?DIR}" && cd "$2" && pwd)
    host=$(hostname -s)
    mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
    # munge: its own key, socket and pid under DIR, so a system munged is left alone.
    [ -f "$dir/munge/munge.key" ] || { dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none; }
    chmod 700 "$dir/munge"; chmod 400 "$dir/munge/munge.key"
    munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.sock" \
        --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munge.seed"
    cat > "$dir/slurm.conf" <<CONF
ClusterName=ddlbench-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=${SLURMCTLD_PORT:-16817}
SlurmdPort=${SLURMD_PORT:-16818}
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
    export SLURM_CONF="$dir/slurm.conf"
    slurmctld -f "$SLURM_CONF"
    slurmd -f "$SLURM_CONF"
    for _ in $(seq 1 100); do
        if sinfo -h -o %t 2>/dev/null | grep -q -E '^(idle|mix|alloc)'; then echo "slurm up: SLURM_CONF=$SLURM_CONF"; exit 0; fi
        sleep 0.2
    done
    echo "slurm.sh: the node did not come up; see $dir/slurmctld.log and $dir/slurmd.log" >&2
    exit 1
    ;;
stop)
    dir=${2:?DIR}
    for f in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
        [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
    done
    ;;
*) echo "usage: slurm.sh install|start DIR|stop DIR" >&2; exit 2 ;;
esac
