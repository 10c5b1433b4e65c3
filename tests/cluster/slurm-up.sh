#!/usr/bin/env bash
# Brings up the project's test SLURM cluster on this host, from nothing or from any partial state:
# installs Debian 12's Slurm, MariaDB and munge with apt, writes /etc/slurm, starts munged,
# mariadbd, slurmdbd, slurmctld and two slurmd daemons (node1, node2; 4 fake GPUs each) on
# loopback, creates the accounting cluster, account `scalesweep` and QOS `acc_debug`, and waits
# until both nodes take jobs. Run again, it only starts what is not running (a few seconds).
#
#   sudo bash tests/cluster/slurm-up.sh
#
# Environment: SCALESWEEP_SLURM_DIR (state, default /var/lib/scalesweep-slurm),
# SCALESWEEP_SLURM_USERS (users besides root and $SUDO_USER to put in account scalesweep),
# SCALESWEEP_SLURM_NODE_CPUS (CPUs each node advertises, default 16: 4 GPUs x 4 CPUs),
# SCALESWEEP_SLURM_DB_PORT (loopback port of the cluster's MariaDB, default 3307, clear of a
# system MariaDB on 3306). No systemd needed: every daemon is started directly.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/cluster/common.sh
source "$HERE/common.sh"

PACKAGES=(slurm-wlm slurmdbd munge mariadb-server)
NODE_CPUS=${SCALESWEEP_SLURM_NODE_CPUS:-16}
NODE_MEM_MB=$((NODE_CPUS * 4096))
DB_PORT=${SCALESWEEP_SLURM_DB_PORT:-3307}
DB_PASS_FILE=$STATE_DIR/db.pass
ACCOUNT=scalesweep
QOS=acc_debug
WAIT_S=90

SECONDS=0
restart_dbd=0
restart_slurm=0

install_packages() {
    local missing=() pkg
    for pkg in "${PACKAGES[@]}"; do
        [[ $(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null) == installed ]] || missing+=("$pkg")
    done
    ((${#missing[@]})) || return 0
    log "installing ${missing[*]} (apt)"
    local t0=$SECONDS
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    log "installed in $((SECONDS - t0)) s"
}

ensure_localhost_resolves() {
    # Node names must resolve as on a real cluster: torchrun's rendezvous endpoint is the first
    # node of the allocation by name (scontrol show hostnames).
    local name
    for name in localhost node1 node2; do
        getent hosts "$name" >/dev/null && continue
        log "adding '$name' to /etc/hosts"
        printf '127.0.0.1 %s\n' "$name" >>/etc/hosts
    done
}

make_dirs() {
    mkdir -p "$STATE_DIR"/{ctld,run,log} "$SLURM_ETC"
    touch "$STATE_MARK"
    local node
    for node in "${NODES[@]}"; do mkdir -p "$STATE_DIR/spool/$node"; done
    install -d -o mysql -g mysql -m 0750 "$MARIADB_DIR"
}

# Character devices, so Slurm can hand out GPU indices; the numbers are /dev/null's (harmless).
make_fake_gpus() {
    local node i dev
    for node in "${NODES[@]}"; do
        mkdir -p "$FAKEGPU_DIR/$node"
        for i in 0 1 2 3; do
            dev=$FAKEGPU_DIR/$node/gpu$i
            [[ -c $dev ]] && continue
            rm -f "$dev"
            mknod -m 666 "$dev" c 1 3
        done
    done
}

db_password() {
    if [[ ! -s $DB_PASS_FILE ]]; then
        (umask 077 && od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$DB_PASS_FILE")
    fi
    cat "$DB_PASS_FILE"
}

render() {
    sed -e "s|@STATE_DIR@|$STATE_DIR|g" -e "s|@FAKEGPU_DIR@|$FAKEGPU_DIR|g" \
        -e "s|@CTLD_HOST@|$(uname -n | cut -d. -f1)|g" -e "s|@NODE_CPUS@|$NODE_CPUS|g" \
        -e "s|@NODE_MEM_MB@|$NODE_MEM_MB|g" -e "s|@DB_PORT@|$DB_PORT|g" \
        -e "s|@DB_PASS@|$(db_password)|g" "$1"
}

# Writes TEMPLATE rendered to TARGET with MODE; returns 0 only when the content changed.
install_config() {
    local template=$1 target=$2 mode=$3 tmp
    tmp=$(mktemp)
    render "$HERE/$template" >"$tmp"
    if cmp -s "$tmp" "$target"; then
        rm -f "$tmp"
        return 1
    fi
    install -m "$mode" "$tmp" "$target"
    rm -f "$tmp"
    log "wrote $target"
}

write_configs() {
    if install_config slurm.conf.in "$SLURM_ETC/slurm.conf" 0644; then restart_slurm=1; fi
    if install_config gres.conf.in "$SLURM_ETC/gres.conf" 0644; then restart_slurm=1; fi
    # slurmdbd refuses a config other users can read (it holds the database password).
    if install_config slurmdbd.conf.in "$SLURM_ETC/slurmdbd.conf" 0600; then restart_dbd=1; fi
}

wait_for() {
    local what=$1 i
    shift
    for ((i = 0; i < WAIT_S * 2; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    die "$what did not come up within $WAIT_S s (logs: $STATE_DIR/log, $MARIADB_DIR)"
}

start_munge() {
    if live_pid "$MUNGE_PID" munged >/dev/null; then return 0; fi
    install -d -o munge -g munge -m 0755 /run/munge
    install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
    if [[ ! -s /etc/munge/munge.key ]]; then
        log "creating the munge key"
        install -d -o munge -g munge -m 0700 /etc/munge
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
    log "starting munged"
    runuser -u munge -- /usr/sbin/munged
    wait_for munged bash -c 'munge -n | unmunge'
}

mariadb_sql() {
    mariadb --no-defaults --socket="$MARIADB_SOCK" -uroot -e "$1"
}

start_mariadb() {
    if live_pid "$MARIADB_PID" mariadbd >/dev/null; then return 0; fi
    if [[ ! -d $MARIADB_DIR/data/mysql ]]; then
        log "initialising the MariaDB data directory"
        mariadb-install-db --no-defaults --user=mysql --datadir="$MARIADB_DIR/data" \
            --auth-root-authentication-method=socket --skip-test-db >"$MARIADB_DIR/install.log" 2>&1 ||
            die "mariadb-install-db failed, see $MARIADB_DIR/install.log"
    fi
    log "starting mariadbd (127.0.0.1:$DB_PORT)"
    # Our own instance and config (--no-defaults): independent of any system MariaDB.
    # No native AIO: sandboxed kernels (gVisor) and some CI runners lack it.
    setsid /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$MARIADB_DIR/data" \
        --socket="$MARIADB_SOCK" --pid-file="$MARIADB_PID" --port="$DB_PORT" \
        --bind-address=127.0.0.1 --log-error="$MARIADB_DIR/mariadbd.log" \
        --innodb-use-native-aio=0 --innodb-buffer-pool-size=64M </dev/null >/dev/null 2>&1 &
    wait_for mariadbd mariadb-admin --no-defaults --socket="$MARIADB_SOCK" -uroot ping
    local pass
    pass=$(db_password)
    # Both host forms: slurmdbd connects over TCP to 127.0.0.1, which may or may not resolve to
    # 'localhost' in MariaDB's host matching.
    mariadb_sql "
        CREATE DATABASE IF NOT EXISTS slurm_acct_db;
        CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$pass';
        CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
        ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$pass';
        ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
}

start_slurmdbd() {
    if ((restart_dbd)) && live_pid "$STATE_DIR/run/slurmdbd.pid" slurmdbd >/dev/null; then
        stop_pid "$STATE_DIR/run/slurmdbd.pid" slurmdbd "slurmdbd (config changed)"
    fi
    if ! live_pid "$STATE_DIR/run/slurmdbd.pid" slurmdbd >/dev/null; then
        log "starting slurmdbd"
        /usr/sbin/slurmdbd
    fi
    wait_for slurmdbd sacctmgr -n show cluster
}

# Sets USERS: root, the sudo caller and $SCALESWEEP_SLURM_USERS (runs in this shell, so a bad
# name stops the script).
collect_users() {
    local u
    USERS=(root)
    [[ -n ${SUDO_USER:-} && $SUDO_USER != root ]] && USERS+=("$SUDO_USER")
    for u in ${SCALESWEEP_SLURM_USERS:-}; do
        id -u "$u" >/dev/null 2>&1 || die "SCALESWEEP_SLURM_USERS: no such user '$u'"
        [[ " ${USERS[*]} " == *" $u "* ]] || USERS+=("$u")
    done
}

# Cluster, QOS acc_debug (as on MareNostrum 5), account scalesweep allowed normal and
# acc_debug, and every cluster user in it with scalesweep as default account.
setup_accounting() {
    local cluster
    cluster=$(awk -F= '$1 == "ClusterName" {print $2}' "$SLURM_ETC/slurm.conf")
    local assocs missing=() u
    collect_users
    assocs=$(sacctmgr -nP show assoc where cluster="$cluster" account=$ACCOUNT format=user,qos)
    for u in "${USERS[@]}"; do
        grep -qE "^$u\|.*\b$QOS\b" <<<"$assocs" || missing+=("$u")
    done
    ((${#missing[@]})) || return 0
    log "accounting: cluster $cluster, account $ACCOUNT, QOS $QOS, users ${missing[*]}"
    sacctmgr -nP show cluster format=cluster | grep -qx "$cluster" ||
        sacctmgr -i add cluster "$cluster" >/dev/null
    sacctmgr -nP show qos format=name | grep -qx "$QOS" ||
        sacctmgr -i add qos "$QOS" description="debug QOS, as on MareNostrum 5" >/dev/null
    sacctmgr -nP show account format=account | grep -qx "$ACCOUNT" ||
        sacctmgr -i add account "$ACCOUNT" cluster="$cluster" \
            description="scalesweep test jobs" organization=scalesweep >/dev/null
    sacctmgr -i modify account where name="$ACCOUNT" cluster="$cluster" \
        set qos=normal,"$QOS" defaultqos=normal >/dev/null || true
    for u in "${missing[@]}"; do
        sacctmgr -i add user "$u" account="$ACCOUNT" cluster="$cluster" >/dev/null || true
        sacctmgr -i modify user where name="$u" cluster="$cluster" account="$ACCOUNT" \
            set qos=normal,"$QOS" defaultqos=normal >/dev/null || true
        sacctmgr -i modify user where name="$u" set defaultaccount="$ACCOUNT" >/dev/null || true
    done
    assocs=$(sacctmgr -nP show assoc where cluster="$cluster" account=$ACCOUNT format=user,qos)
    for u in "${USERS[@]}"; do
        grep -qE "^$u\|.*\b$QOS\b" <<<"$assocs" ||
            die "accounting: user $u has no association with account $ACCOUNT and QOS $QOS:
$assocs"
    done
}

start_slurmctld() {
    local pidfile=$STATE_DIR/run/slurmctld.pid
    if ((restart_slurm)) && live_pid "$pidfile" slurmctld >/dev/null; then
        stop_pid "$pidfile" slurmctld "slurmctld (config changed)"
    fi
    if ! live_pid "$pidfile" slurmctld >/dev/null; then
        log "starting slurmctld"
        /usr/sbin/slurmctld
    fi
    wait_for slurmctld bash -c 'scontrol ping | grep -q UP'
}

start_slurmds() {
    local node pidfile
    for node in "${NODES[@]}"; do
        pidfile=$(slurmd_pidfile "$node")
        if ((restart_slurm)) && live_pid "$pidfile" slurmd >/dev/null; then
            stop_pid "$pidfile" slurmd "slurmd $node (config changed)"
        fi
        live_pid "$pidfile" slurmd >/dev/null && continue
        log "starting slurmd -N $node"
        /usr/sbin/slurmd -N "$node"
    done
}

# Ready means every node takes jobs: idle, mixed, allocated or completing, and responding (no '*').
nodes_ready() {
    local states
    states=$(sinfo -h -N -o '%N %t' | sort -u)
    [[ $(grep -cE ' (idle|mix|alloc|comp)$' <<<"$states") == "${#NODES[@]}" ]]
}

# A node marked down or drained (e.g. from before a restart) but whose slurmd answers is resumed.
resume_stuck_nodes() {
    local node state
    while read -r node state; do
        case $state in
            down | drain | drng | fail)
                log "resuming $node (was $state)"
                scontrol update nodename="$node" state=resume 2>/dev/null || true
                ;;
        esac
    done < <(sinfo -h -N -o '%N %t' | sort -u)
}

wait_for_nodes() {
    local i
    for ((i = 0; i < WAIT_S; i++)); do
        nodes_ready && return 0
        ((i % 5 == 4)) && resume_stuck_nodes
        sleep 1
    done
    sinfo -R >&2 || true
    die "nodes not ready within $WAIT_S s (logs: $STATE_DIR/log/slurmd-node*.log)"
}

main() {
    require_root
    install_packages
    ensure_localhost_resolves
    make_dirs
    make_fake_gpus
    write_configs
    start_munge
    start_mariadb
    start_slurmdbd
    setup_accounting
    start_slurmctld
    start_slurmds
    wait_for_nodes
    log "cluster up in $SECONDS s"
    sinfo
}

main "$@"
