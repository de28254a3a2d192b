#!/usr/bin/env bash
# A Slurm cluster on this machine for the tests: munged, slurmctld and slurmd. Single-node on
# localhost by default; with EMULATED=1, one slurmd per host of the emulated cluster that is up
# (launch/netns.py: `make cluster-up`), each in its host's network and UTS namespaces with its
# own NodeName and NodeAddr, and slurmctld on the bridge's address, scheduling across them.
#
#   tests/cluster/slurm.sh install      apt-get install slurm-wlm munge (root, Debian/Ubuntu)
#   tests/cluster/slurm.sh start DIR    write DIR/slurm.conf, start the daemons, wait for the nodes
#   tests/cluster/slurm.sh stop DIR     stop the daemons by the pids they wrote
#
# Clients find it with SLURM_CONF=DIR/slurm.conf. proctrack/linuxproc and task/none need no
# cgroups, so it runs in containers. Every node has partition `debug`, this machine's cores, no
# GPUs. EMULATED=1 asks ddlbench for the hosts, with PYTHON (default python3; the venv's).
# Each slurmd starts under nsenter (python -m ddlbench.launch.netns shell I ...), not `ip netns
# exec`, which remounts /sys: slurmd then finds no cgroup filesystem and exits.
set -euo pipefail
cmd=${1:?usage: slurm.sh install|start DIR|stop DIR}
PYTHON=${PYTHON:-python3}

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
    if [ "${EMULATED:-0}" = 1 ]; then
        # "INDEX NAME ADDRESS" per emulated host, after the bridge's address
        mapfile -t emu < <("$PYTHON" -c 'from ddlbench.launch import netns
c = netns.current()
if c is None: raise SystemExit("slurm.sh: EMULATED=1 but no emulated cluster is up (make cluster-up)")
print(netns.BRIDGE_ADDRESS)
for h in c.hosts: print(h.index, h.hostname, h.address)')
        ctld_addr=${emu[0]}
        nodes=""
        node_lines=""
        for line in "${emu[@]:1}"; do
            read -r _ name addr <<<"$line"
            nodes="$nodes${nodes:+,}$name"
            node_lines="${node_lines}NodeName=$name NodeAddr=$addr CPUs=$(nproc) State=UNKNOWN"$'\n'
        done
        per_node=-%n  # %n: the node's name, so every slurmd has its own spool, pid and log
    else
        ctld_addr=127.0.0.1 nodes=$host per_node=""
        node_lines="NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN"$'\n'
    fi
    cat > "$dir/slurm.conf" <<CONF
ClusterName=ddlbench-test
SlurmctldHost=$host($ctld_addr)
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
SlurmdSpoolDir=$dir/spool$per_node
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd$per_node.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd$per_node.log
${node_lines}PartitionName=debug Nodes=$nodes Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
    export SLURM_CONF="$dir/slurm.conf"
    slurmctld -f "$SLURM_CONF"
    if [ "${EMULATED:-0}" = 1 ]; then
        for line in "${emu[@]:1}"; do
            read -r index name _ <<<"$line"
            "$PYTHON" -m ddlbench.launch.netns shell "$index" slurmd -f "$SLURM_CONF" -N "$name"
        done
    else
        slurmd -f "$SLURM_CONF"
    fi
    want=$(tr ',' '\n' <<<"$nodes" | wc -l)
    for _ in $(seq 1 150); do
        up=$(sinfo -h -N -o '%N %t' 2>/dev/null | grep -c -E ' (idle|mix|alloc)$' || true)
        if [ "$up" -ge "$want" ]; then echo "slurm up ($want node(s): $nodes): SLURM_CONF=$SLURM_CONF"; exit 0; fi
        sleep 0.2
    done
    echo "slurm.sh: $up of $want node(s) came up; see $dir/slurmctld.log and $dir/slurmd*.log" >&2
    exit 1
    ;;
stop)
    dir=${2:?DIR}
    pids=""
    for f in "$dir"/slurmd*.pid "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
        # read before the kill: a daemon removes its pid file as it exits
        p=$(cat "$f" 2>/dev/null) && kill "$p" 2>/dev/null && pids="$pids $p" || true
    done
    for _ in $(seq 1 50); do  # gone within 10 s, or said
        left=""; for p in $pids; do [ -d "/proc/$p" ] && left="$left $p"; done
        [ -z "$left" ] && exit 0
        sleep 0.2
    done
    echo "slurm.sh: daemon(s)$left still running after SIGTERM" >&2
    exit 1
    ;;
*) echo "usage: slurm.sh install|start DIR|stop DIR" >&2; exit 2 ;;
esac
