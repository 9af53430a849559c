#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for climbing the ladder through profiles/slurm with real
# sbatch, squeue and scancel (issue 26; tests/test_slurm_cluster.py, docs/cluster.md).
#
#   bash studies/cluster/slurm_local.sh start    # install (apt) if missing, write the config, start munged, slurmctld, slurmd
#   bash studies/cluster/slurm_local.sh status   # sinfo and the daemons' pids
#   bash studies/cluster/slurm_local.sh stop     # stop the three daemons this script started (by their pid files)
#
# Needs root and Debian's packages (bookworm: SLURM 22.05). No systemd: the daemons are started
# directly, which also works in a container. It writes /etc/slurm/slurm.conf, where every SLURM
# command looks for it, and refuses to overwrite one it did not write. State, logs and pid files
# live under $SLURM_LOCAL_DIR (default /var/lib/h3gates-slurm).
set -euo pipefail

DIR=${SLURM_LOCAL_DIR:-/var/lib/h3gates-slurm}
CONF=/etc/slurm/slurm.conf
MARK="# written by h3gates studies/cluster/slurm_local.sh"
PARTITION=gpu       # the partition profiles/slurm submits to (default-resources: slurm_partition)
NODE_MEM_MB=64000   # what profiles/slurm asks per job (default-resources: mem_mb)

need_root() { [ "$(id -u)" = 0 ] || { echo "slurm_local.sh: run as root (it installs packages and starts daemons)" >&2; exit 1; }; }

install_missing() {
    local missing=()
    for pair in munged:munge slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client; do
        command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
    done
    [ ${#missing[@]} = 0 ] && return
    echo "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # policy-rc.d refuses service starts in containers; the packages install anyway and we start the daemons ourselves
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null \
        || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }
}

write_conf() {
    if [ -f "$CONF" ] && ! grep -qxF "$MARK" "$CONF"; then
        echo "slurm_local.sh: $CONF exists and was not written by this script; not overwriting it" >&2
        exit 1
    fi
    mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log" /etc/slurm
    # The node's CPUs and sockets as slurmd sees them, its memory as the profile asks (below), and an
    # address that needs no name resolution.
    local node
    node="$(slurmd -C | head -1 | sed 's/ RealMemory=[0-9]*//') NodeAddr=127.0.0.1"
    cat > "$CONF" <<EOF
$MARK
ClusterName=h3gates-local
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
# No cgroups (containers rarely delegate them): processes tracked by parent pid, CPU binding by
# sched_setaffinity (the jobstep's srun asks --cpu-bind), so --mem is a request here, never a limit.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
# Cores are consumable, memory is not: profiles/slurm asks 64000 MB per job (a GPU node's share),
# more than a CI machine has. The node advertises that much (config_overrides: slurmd does not
# drain it for having less) so the profile's request is submitted unchanged; the tiny jobs use < 1 GB.
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
# No slurmdbd (the lightest setup): sacct then fails with "Slurm accounting storage is disabled",
# so runs pass --slurm-status-command squeue (with the plugin's default, sacct, it never sees a job
# finish and waits forever). squeue --states=all lists a finished job for MinJobAge seconds; the
# plugin trusts squeue only when MinJobAge >= 3 x its first status check interval.
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=3600
$node RealMemory=$NODE_MEM_MB
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

start() {
    need_root
    install_missing
    write_conf
    install -d -o munge -g munge -m 0755 /run/munge
    running /run/munge/munged.pid || runuser -u munge -- /usr/sbin/munged
    running "$DIR/slurmctld.pid" || slurmctld
    running "$DIR/slurmd.pid" || slurmd
    # Ready when the node is schedulable (a restarted node may come back "down" until slurmd registers).
    for _ in $(seq 60); do
        case $(sinfo -h -p "$PARTITION" -o %t 2>/dev/null) in
            idle*|mix*|alloc*) sinfo; return 0 ;;
            down*|drain*) scontrol update nodename="$(hostname -s)" state=resume 2>/dev/null || true ;;
        esac
        sleep 1
    done
    echo "slurm_local.sh: the node did not become idle in 60 s; see $DIR/log/" >&2
    sinfo >&2 || true
    exit 1
}

stop() {
    need_root
    # Only the daemons started from this configuration, by their pid files.
    for pidfile in "$DIR/slurmd.pid" "$DIR/slurmctld.pid" /run/munge/munged.pid; do
        if running "$pidfile"; then
            local pid
            pid=$(cat "$pidfile")
            kill "$pid"
            for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        fi
    done
    echo "stopped (state and logs kept under $DIR)"
}

status() {
    for pidfile in /run/munge/munged.pid "$DIR/slurmctld.pid" "$DIR/slurmd.pid"; do
        printf '%-32s %s\n' "$pidfile" "$(running "$pidfile" && cat "$pidfile" || echo 'not running')"
    done
    sinfo
}

case ${1:-} in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
