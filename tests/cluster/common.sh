# Shared by slurm-up.sh and slurm-down.sh: where the test cluster keeps its state, and how a
# daemon is recognised from its pid file. Sourced, not run.

STATE_DIR=${SCALESWEEP_SLURM_DIR:-/var/lib/scalesweep-slurm}
# The Debian client tools (sbatch, sacct, srun, sacctmgr) read this path with no SLURM_CONF.
SLURM_ETC=/etc/slurm
FAKEGPU_DIR=/run/fakegpu
NODES=(node1 node2)
# munged keeps Debian's paths: libmunge in every Slurm tool connects to this socket by default.
MUNGE_PID=/run/munge/munged.pid
MARIADB_DIR=$STATE_DIR/mariadb
MARIADB_PID=$MARIADB_DIR/mariadbd.pid
MARIADB_SOCK=$MARIADB_DIR/mariadbd.sock
# Written into the state dir so --purge can tell it is ours before deleting anything.
STATE_MARK=$STATE_DIR/.scalesweep-slurm
# First line of every config file written, so --purge removes only what we wrote.
CONFIG_HEADER="# Written by scalesweep tests/cluster/slurm-up.sh"

log() { printf '[slurm-cluster] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

require_root() {
    [[ $(id -u) == 0 ]] || die "run as root (it installs packages and starts system daemons): sudo bash $0"
}

# Prints the pid when PIDFILE names a live process whose command is exactly COMM. Checking the
# command guards against a stale pid file whose number now belongs to something else.
live_pid() {
    local pidfile=$1 comm=$2 pid
    [[ -s $pidfile ]] || return 1
    pid=$(<"$pidfile")
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    [[ -r /proc/$pid/comm && $(<"/proc/$pid/comm") == "$comm" ]] || return 1
    printf '%s\n' "$pid"
}

# SIGTERM, then SIGKILL after a grace period; only the process named by the pid file.
stop_pid() {
    local pidfile=$1 comm=$2 label=$3 pid i
    if ! pid=$(live_pid "$pidfile" "$comm"); then
        log "$label: not running"
        rm -f "$pidfile"
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 150; i++)); do
        [[ -d /proc/$pid ]] || break
        sleep 0.1
    done
    if [[ -d /proc/$pid ]]; then
        log "$label: still alive after 15 s, sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
    log "$label: stopped (pid $pid)"
}

slurmd_pidfile() { printf '%s/run/slurmd-%s.pid\n' "$STATE_DIR" "$1"; }
