#!/usr/bin/env bash
# Simulated GPU hosts that Ansible reaches over real SSH, for the Molecule "fleet" scenario.
# Each host is a Linux network namespace with its own address on a private bridge and its
# own OpenSSH server; the hosts share the filesystem, so every sshd keeps its config, host
# key, pid file and log under STATE/sshd/NAME (the simulated GPUs live where the inventory
# says, see molecule/fleet/inventory).
#
#   fleet.sh up NAME=ADDRESS...   install openssh-server if missing (apt-get; the machine's own
#                                 sshd is kept from starting, though on a systemd machine the
#                                 package enables ssh.service for the next boot), create the
#                                 bridge, one namespace per host, the SSH keys, start the sshds
#                                 and write STATE/ssh/known_hosts (ssh-keyscan, checked against
#                                 the generated host keys); safe to repeat
#   fleet.sh down                 stop every process in our namespaces, close the controller's
#                                 SSH master connections, delete namespaces, veths and bridge
#                                 (safe to repeat, also after a failed run)
#   fleet.sh stop-sshd NAME       the host goes dark: its sshd, its SSH sessions, everything
#                                 else running in its namespace, and the controller's
#                                 ControlPersist master connection to it
#   fleet.sh start-sshd NAME      start the host's sshd again (same host key)
#   fleet.sh status               one line per host; exit 0 only when every sshd listens
#
# Only what this script created is ever touched: namespaces are named gpufleet-mig-fleet-NAME,
# links gfmf-*, and each of them carries the owner token of STATE (the alias of the bridge,
# of the host-side veths and of each namespace's loopback). A namespace, bridge or address
# that exists without that token makes the script refuse instead of reusing or deleting it.
#
# Network: 10.231.77.0/24 only, bridge gfmf-br0 at 10.231.77.1 in the root namespace. The
# namespaces have no default route, and the key is accepted only from 10.231.77.1.
#
# Environment:
#   GPUFLEET_FLEET_STATE_DIR  state directory (default <repo>/.state/fleet)
#   GPUFLEET_FLEET_CONTROL_DIR  folder of the controller's SSH ControlPath sockets, named
#                               USER@ADDRESS-PORT (default STATE/cp; see the inventory's
#                               ansible_control_path)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
state=$(realpath -m "${GPUFLEET_FLEET_STATE_DIR:-$repo/.state/fleet}")
control_dir=$(realpath -m "${GPUFLEET_FLEET_CONTROL_DIR:-$state/cp}")

ns_prefix=gpufleet-mig-fleet-
link_prefix=gfmf-
bridge=${link_prefix}br0
net=10.231.77
bridge_addr=$net.1
sshd_bin=/usr/sbin/sshd

# shellcheck disable=SC2034  # the prefix of tests/support/lib.sh's lines
log_tag=fleet
# shellcheck source=../support/lib.sh
. "$repo/tests/support/lib.sh"

# --- ownership ---------------------------------------------------------------

token() { cat "$state/owner" 2>/dev/null || true; }

link_alias() { # [ip options...] LINK: the link's alias, empty if none or absent
    ip -o "${@:1:$#-1}" link show dev "${!#}" 2>/dev/null | sed -n 's/.*\\ *alias \(.*\)$/\1/p'
}

ns_exists() { [[ -e "/run/netns/$1" ]]; }

ns_owned() { # NS: exists and carries our token
    local t
    t=$(token)
    [[ -n "$t" ]] && ns_exists "$1" && [[ "$(link_alias -n "$1" lo)" == "$t" ]]
}

link_owned() { # LINK in the root namespace
    local t
    t=$(token)
    [[ -n "$t" ]] && [[ "$(link_alias "$1")" == "$t" ]]
}

link_exists() { ip link show dev "$1" >/dev/null 2>&1; }

# --- hosts -------------------------------------------------------------------

# STATE/fleet.list: one line per host, "NAME ADDRESS INDEX", written by up.
host_field() { # NAME FIELD(2=address, 3=index)
    awk -v n="$1" -v f="$2" '$1 == n {print $f; found = 1} END {exit !found}' "$state/fleet.list" 2>/dev/null \
        || die "unknown host '$1' (hosts of $state: $(host_names | tr '\n' ' '))"
}

host_names() { awk '{print $1}' "$state/fleet.list" 2>/dev/null || true; }

ns_of() { echo "$ns_prefix$1"; }
sshd_dir() { echo "$state/sshd/$1"; }

# --- processes ---------------------------------------------------------------

sshd_pid() { # NAME: pid of the host's listening sshd, empty if not running
    local dir pid
    dir=$(sshd_dir "$1")
    pid=$(cat "$dir/sshd.pid" 2>/dev/null || true)
    [[ -n "$pid" ]] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$dir/sshd_config" && echo "$pid"
    return 0
}

listening() { # NAME ADDRESS
    ip netns exec "$(ns_of "$1")" ss -Hltn "( sport = :22 )" 2>/dev/null | grep -qF "$2:22"
}

kill_ns_processes() { # NS: every process in the namespace (sshd, sessions, module runs)
    local pids seen="" signal pid
    for signal in TERM TERM TERM KILL; do
        pids=$(ip netns pids "$1" 2>/dev/null || true)
        [[ -z "$pids" ]] && break
        seen+=" $pids"
        # shellcheck disable=SC2086  # one pid per word
        kill -"$signal" $pids 2>/dev/null || true
        for _ in $(seq 20); do
            [[ -z "$(ip netns pids "$1" 2>/dev/null || true)" ]] && break 2
            sleep 0.1
        done
    done
    [[ -z "$(ip netns pids "$1" 2>/dev/null || true)" ]] || die "processes left in namespace $1: $(ip netns pids "$1" | tr '\n' ' ')"
    # The daemonized sshds are children of PID 1: wait (bounded) until it has reaped them,
    # so that nothing, not even a zombie, is left when this returns.
    for pid in $seen; do
        for _ in $(seq 100); do
            [[ -e "/proc/$pid" ]] || break
            sleep 0.1
        done
    done
}

close_masters() { # ADDRESS: the controller's ControlPersist master connections to it
    local sock
    for sock in "$control_dir"/*@"$1"-*; do
        [[ -e "$sock" ]] || continue
        if [[ -S "$sock" ]]; then
            ssh -F /dev/null -o ControlPath="$sock" -O exit "$1" >/dev/null 2>&1 || true
        fi
        rm -f "$sock"
        log "closed the SSH master connection $(basename "$sock")"
    done
}

# --- openssh-server ----------------------------------------------------------

ensure_openssh_server() {
    if [[ ! -x "$sshd_bin" ]]; then
        apt_install openssh-server
        [[ -x "$sshd_bin" ]] || die "openssh-server installed but $sshd_bin is missing"
    fi
    # sshd's privilege separation folder (the package's tmpfiles.d entry, without systemd).
    [[ -d /run/sshd ]] || install -d -m 0755 /run/sshd
    local cmd
    for cmd in ssh ssh-keygen ssh-keyscan; do
        command -v "$cmd" >/dev/null || die "$cmd is needed (Debian: openssh-client)"
    done
}

# --- sshd --------------------------------------------------------------------

write_sshd_config() { # NAME ADDRESS
    local dir
    dir=$(sshd_dir "$1")
    mkdir -p "$dir"
    [[ -s "$dir/ssh_host_ed25519_key" ]] \
        || ssh-keygen -q -t ed25519 -N '' -C "gpufleet-mig-fleet host $1" -f "$dir/ssh_host_ed25519_key"
    cat >"$dir/sshd_config" <<EOF
# sshd of simulated host $1 (namespace $(ns_of "$1")), written by tests/fleet/fleet.sh
ListenAddress $2:22
HostKey $dir/ssh_host_ed25519_key
PidFile $dir/sshd.pid
AuthorizedKeysFile $state/ssh/authorized_keys
# The state folder may sit below /tmp, which StrictModes refuses; STATE/ssh is 0700 and ours.
StrictModes no
AuthenticationMethods publickey
PermitRootLogin prohibit-password
AllowUsers root@$bridge_addr
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AllowAgentForwarding no
AllowTcpForwarding no
X11Forwarding no
PermitTunnel no
PrintMotd no
PrintLastLog no
# A host's own shell start-up, not the controller's: bash sources ~/.bashrc for every SSH
# command of a top-level shell, and the hosts share root's home with this machine, whose
# .bashrc may be a developer's (pyenv and the like, a few hundred ms per command).
SetEnv SHLVL=1
MaxStartups 50
MaxSessions 20
Subsystem sftp internal-sftp
EOF
    "$sshd_bin" -t -f "$dir/sshd_config" || die "invalid sshd config $dir/sshd_config"
}

start_sshd() { # NAME
    local name=$1 addr ns dir
    addr=$(host_field "$name" 2)
    ns=$(ns_of "$name")
    dir=$(sshd_dir "$name")
    ns_owned "$ns" || die "namespace $ns is missing or was not created from $state"
    if [[ -n "$(sshd_pid "$name")" ]] && listening "$name" "$addr"; then
        return 0
    fi
    rm -f "$dir/sshd.pid"
    ip netns exec "$ns" "$sshd_bin" -f "$dir/sshd_config" -E "$dir/sshd.log"
    for _ in $(seq 100); do
        listening "$name" "$addr" && { log "$name: sshd $(sshd_pid "$name") listens on $addr:22"; return 0; }
        sleep 0.1
    done
    die "$name: sshd did not start listening on $addr:22 within 10s (see $dir/sshd.log)"
}

stop_sshd() { # NAME
    local name=$1 addr ns
    addr=$(host_field "$name" 2)
    ns=$(ns_of "$name")
    close_masters "$addr"
    if ns_exists "$ns"; then
        ns_owned "$ns" || die "namespace $ns was not created from $state; refusing to touch it"
        kill_ns_processes "$ns"
    fi
    # Anything that reconnected while the processes went down.
    close_masters "$addr"
    rm -f "$(sshd_dir "$name")/sshd.pid"
    log "$name: sshd, its sessions and the master connections are stopped"
}

# --- up ----------------------------------------------------------------------

check_address_space() { # refuse when 10.231.77.0/24 is used by anything that is not ours
    local line dev
    while read -r line; do
        dev=$(awk '{print $2}' <<<"$line")
        dev=${dev%%@*}
        [[ "$dev" == "$bridge" ]] && link_owned "$bridge" && continue
        die "address space $net.0/24 is in use on this machine ($line); refusing to create the fleet"
    done < <(ip -o -4 addr show | grep -F " $net." || true)
    while read -r line; do
        [[ -z "$line" ]] && continue
        [[ "$line" == *" dev $bridge "* ]] && link_owned "$bridge" && continue
        die "a route to $net.0/24 exists ($line); refusing to create the fleet"
    done < <(ip -4 route show table all | grep -E "^(local |broadcast )?${net//./\\.}\." || true)
}

parse_specs() { # NAME=ADDRESS...; writes STATE/fleet.list.new
    local spec name addr index=0
    : >"$state/fleet.list.new"
    (($# > 0)) || die "usage: $0 up NAME=ADDRESS... (addresses in $net.2-$net.254)"
    for spec in "$@"; do
        name=${spec%%=*} addr=${spec#*=}
        [[ "$name" =~ ^[a-z0-9][a-z0-9-]{0,30}$ ]] || die "bad host name '$name' (lower case letters, digits, dashes)"
        if ! [[ "$addr" =~ ^${net//./\\.}\.([0-9]{1,3})$ ]] || ((10#${BASH_REMATCH[1]} < 2 || 10#${BASH_REMATCH[1]} > 254)); then
            die "address of $name must be in $net.2-$net.254, not '$addr'"
        fi
        awk -v n="$name" -v a="$addr" '$1 == n || $2 == a {exit 1}' "$state/fleet.list.new" \
            || die "duplicate host name or address: $spec"
        index=$((index + 1))
        ((index <= 99)) || die "at most 99 hosts"
        printf '%s %s %s\n' "$name" "$addr" "$index" >>"$state/fleet.list.new"
    done
}

cmd_up() {
    [[ $EUID -eq 0 ]] || die "must run as root (namespaces, veths, sshd)"
    local cmd
    for cmd in ip awk ss flock; do command -v "$cmd" >/dev/null || die "$cmd is needed"; done
    ensure_openssh_server
    parse_specs "$@"
    if [[ -s "$state/fleet.list" ]] && ! cmp -s "$state/fleet.list" "$state/fleet.list.new"; then
        rm -f "$state/fleet.list.new"
        die "$state holds a fleet with other hosts; run '$0 down' first"
    fi
    mv "$state/fleet.list.new" "$state/fleet.list"
    if [[ ! -s "$state/owner" ]]; then
        # A new owner: nothing of ours may exist yet under our names.
        ! link_exists "$bridge" || die "bridge $bridge exists but was not created from $state; refusing to touch it"
        printf 'gpufleet-mig-fleet-%s\n' "$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')" >"$state/owner"
    fi
    local t
    t=$(token)
    # From here on a failure takes down what this run created.
    trap 'log "up failed, taking the fleet down"; cmd_down' EXIT

    check_address_space
    if ! link_exists "$bridge"; then
        ip link add "$bridge" type bridge
        ip link set dev "$bridge" alias "$t"
        ip addr add "$bridge_addr/24" dev "$bridge"
        ip link set dev "$bridge" up
    fi
    link_owned "$bridge" || die "bridge $bridge was not created from $state; refusing to touch it"

    local name addr index ns veth
    while read -r name addr index; do
        ns=$(ns_of "$name") veth=${link_prefix}h$index
        if ns_exists "$ns"; then
            ns_owned "$ns" || die "namespace $ns exists but was not created from $state; refusing to touch it"
        else
            ip netns add "$ns"
            ip -n "$ns" link set dev lo alias "$t"
            ip -n "$ns" link set dev lo up
        fi
        if ! ip -n "$ns" link show dev eth0 >/dev/null 2>&1; then
            ! link_exists "$veth" || die "link $veth exists but does not lead to $ns; refusing to touch it"
            ip link add "$veth" type veth peer name eth0 netns "$ns"
            ip link set dev "$veth" alias "$t"
            ip link set dev "$veth" master "$bridge" up
            ip -n "$ns" addr add "$addr/24" dev eth0
            ip -n "$ns" link set dev eth0 up
        fi
    done <"$state/fleet.list"

    # The controller's key, accepted only from the bridge address.
    install -d -m 0700 "$state/ssh" "$control_dir"
    [[ -s "$state/ssh/id_ed25519" ]] || ssh-keygen -q -t ed25519 -N '' -C "gpufleet-mig-fleet controller" -f "$state/ssh/id_ed25519"
    printf 'from="%s",no-agent-forwarding,no-port-forwarding,no-X11-forwarding %s\n' \
        "$bridge_addr" "$(cat "$state/ssh/id_ed25519.pub")" >"$state/ssh/authorized_keys"
    chmod 0600 "$state/ssh/authorized_keys"

    while read -r name addr index; do
        write_sshd_config "$name" "$addr"
        start_sshd "$name"
    done <"$state/fleet.list"

    # known_hosts from what each sshd presents, which must be the key generated for it.
    local scanned expected
    : >"$state/ssh/known_hosts.new"
    while read -r name addr index; do
        scanned=$(ssh-keyscan -T 5 -t ed25519 "$addr" 2>/dev/null | awk '$2 == "ssh-ed25519"')
        expected=$(awk '{print $1, $2}' "$(sshd_dir "$name")/ssh_host_ed25519_key.pub")
        [[ "$(awk '{print $2, $3}' <<<"$scanned")" == "$expected" ]] \
            || die "$name: ssh-keyscan $addr returned '$scanned', not the generated host key"
        echo "$scanned" >>"$state/ssh/known_hosts.new"
    done <"$state/fleet.list"
    mv "$state/ssh/known_hosts.new" "$state/ssh/known_hosts"
    trap - EXIT
    log "fleet up: $(awk '{printf "%s=%s ", $1, $2}' "$state/fleet.list")(state $state)"
}

# --- down --------------------------------------------------------------------

cmd_down() {
    trap - EXIT
    local t ns name addr link
    t=$(token)
    # The controller's master connections, whatever happens to the namespaces.
    if [[ -d "$control_dir" ]]; then
        while read -r name addr _; do
            close_masters "$addr"
        done < <(cat "$state/fleet.list" 2>/dev/null || true)
    fi
    while read -r ns _; do
        [[ "$ns" == "$ns_prefix"* ]] || continue
        if ! ns_owned "$ns"; then
            log "leaving namespace $ns alone: it was not created from $state"
            continue
        fi
        kill_ns_processes "$ns"
        ip netns del "$ns"
        log "deleted namespace $ns"
    done < <(ip netns list 2>/dev/null || true)
    # Host-side veths go with their namespace; one left over from a half-done up goes here.
    while read -r link; do
        [[ -n "$link" && "$link" != "$bridge" ]] && link_owned "$link" && ip link del dev "$link" && log "deleted link $link"
    done < <(ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | grep "^$link_prefix" || true)
    if link_owned "$bridge"; then
        ip link del dev "$bridge"
        log "deleted bridge $bridge"
    elif link_exists "$bridge"; then
        log "leaving bridge $bridge alone: it was not created from $state"
    fi
    rm -f "$state"/sshd/*/sshd.pid
    # Forget the token only once nothing of ours is left, so that a later down still finds it.
    local left=""
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$ns_prefix" || true); do
        if ns_owned "$ns"; then left+=" $ns"; fi
    done
    if link_owned "$bridge"; then left+=" $bridge"; fi
    [[ -z "$left" ]] || die "still there:$left"
    rm -f "$state/owner" "$state/fleet.list"
    if [[ -d "$state" ]]; then log "fleet down (state $state)"; fi
}

# --- status ------------------------------------------------------------------

cmd_status() {
    local name addr index ns pid ok=0 where
    [[ -s "$state/fleet.list" ]] || { log "no fleet in $state"; return 1; }
    while read -r name addr index; do
        ns=$(ns_of "$name")
        if ns_owned "$ns"; then where=ns; elif ns_exists "$ns"; then where=foreign; else where=absent; fi
        pid=$(sshd_pid "$name")
        if [[ "$where" == ns && -n "$pid" ]] && listening "$name" "$addr"; then
            printf '%-20s %-15s namespace %-7s sshd %s listening\n' "$name" "$addr" "$where" "$pid"
        else
            printf '%-20s %-15s namespace %-7s sshd %s\n' "$name" "$addr" "$where" "${pid:-stopped}"
            ok=1
        fi
    done <"$state/fleet.list"
    return "$ok"
}

# --- main --------------------------------------------------------------------

case "${1:-}" in
    up | down | stop-sshd | start-sshd | status) ;;
    *) die "usage: $0 up NAME=ADDRESS...|down|stop-sshd NAME|start-sshd NAME|status" ;;
esac
if [[ "$1" == down && ! -d "$state" ]]; then
    log "nothing to take down in $state"
    exit 0
fi
mkdir -p "$state"
exec 9>"$state/.lock"
flock 9
cmd=$1
shift
case "$cmd" in
    up) cmd_up "$@" ;;
    down) cmd_down ;;
    stop-sshd) (($# == 1)) || die "usage: $0 stop-sshd NAME"; stop_sshd "$1" ;;
    start-sshd) (($# == 1)) || die "usage: $0 start-sshd NAME"; start_sshd "$1" ;;
    status) cmd_status ;;
esac
