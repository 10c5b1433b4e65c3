#!/usr/bin/env bash
# Stops the test SLURM cluster started by slurm-up.sh: cancels its jobs, then stops slurmd
# (node1, node2), slurmctld, slurmdbd, mariadbd and munged, each by the pid in its pid file.
#
#   sudo bash tests/cluster/slurm-down.sh           # stop; state and job history are kept
#   sudo bash tests/cluster/slurm-down.sh --purge   # also delete the state dir (database
#                                                   # included), the fake GPUs and /etc/slurm files
#
# Uses the same SCALESWEEP_SLURM_DIR as slurm-up.sh.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/cluster/common.sh
source "$HERE/common.sh"

usage() { die "usage: $0 [--purge]"; }

# With proctrack/linuxproc a job's processes outlive a stopped slurmd; cancel them first.
cancel_jobs() {
    live_pid "$STATE_DIR/run/slurmctld.pid" slurmctld >/dev/null || return 0
    local jobs i
    jobs=$(squeue -h -o %A 2>/dev/null) || return 0
    [[ -n $jobs ]] || return 0
    log "cancelling jobs: $(tr '\n' ' ' <<<"$jobs")"
    # shellcheck disable=SC2086
    scancel $jobs || true
    for ((i = 0; i < 30; i++)); do
        [[ -z $(squeue -h -t running,completing -o %A 2>/dev/null) ]] && return 0
        sleep 1
    done
    log "some jobs still running after 30 s; stopping the daemons anyway"
}

stop_all() {
    local node
    cancel_jobs
    for node in "${NODES[@]}"; do
        stop_pid "$(slurmd_pidfile "$node")" slurmd "slurmd $node"
    done
    stop_pid "$STATE_DIR/run/slurmctld.pid" slurmctld slurmctld
    stop_pid "$STATE_DIR/run/slurmdbd.pid" slurmdbd slurmdbd
    stop_pid "$MARIADB_PID" mariadbd mariadbd
    stop_pid "$MUNGE_PID" munged munged
}

# Deletes only what slurm-up.sh made: the state dir carrying its mark, the fake GPU devices,
# and config files that start with its header.
purge() {
    if [[ -d $STATE_DIR ]]; then
        [[ -e $STATE_MARK ]] || die "$STATE_DIR lacks $(basename "$STATE_MARK"): not deleting a directory slurm-up.sh did not make"
        rm -rf -- "$STATE_DIR"
        log "deleted $STATE_DIR"
    fi
    rm -rf -- "$FAKEGPU_DIR"
    local f
    for f in slurm.conf gres.conf slurmdbd.conf; do
        if [[ -f $SLURM_ETC/$f ]] && head -n1 "$SLURM_ETC/$f" | grep -qF "$CONFIG_HEADER"; then
            rm -f -- "$SLURM_ETC/$f"
            log "deleted $SLURM_ETC/$f"
        fi
    done
}

main() {
    local do_purge=0
    case ${1:-} in
        "") ;;
        --purge) do_purge=1 ;;
        *) usage ;;
    esac
    (($# <= 1)) || usage
    require_root
    stop_all
    ((do_purge)) && purge
    log "cluster down"
}

main "$@"
