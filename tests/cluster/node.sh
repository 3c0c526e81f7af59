#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# A real Kubernetes node for the cluster tests: containerd and a kubelet joined to the
# cluster.sh control plane of STATE, running real pods from two local images (a static pause
# and a busybox-static rootfs; no registry is ever contacted), plus the test device plugin
# (device_plugin.py) that advertises the MIG devices of a simulated GPU host.
#
#   node.sh start          start containerd and the kubelet, wait until the node is Ready,
#                          write STATE/node.json; needs root and a running cluster.sh cluster
#   node.sh stop           stop the device plugin, the kubelet, every pod, containerd; delete the
#                          Node object, the pod cgroups, the bridge; restore the kernel settings
#                          the kubelet changed (safe to repeat, also after a failed start)
#   node.sh status         exit 0 when the node runs and the API server reports it Ready
#   node.sh restart-kubelet  stop the kubelet and start a new one (pods and containerd keep
#                          running); waits until it re-created kubelet.sock and the node is Ready
#   node.sh plugin-start   start device_plugin.py for the simulated host GPUFLEET_MIG_SIMULATOR
#                          names; waits until it served or paused (by the node label)
#   node.sh plugin-stop    stop it (safe to repeat)
#   node.sh plugin-hup     make it re-enumerate the simulated GPUs (SIGHUP); it reads its mode file
#                          (node.json device_plugin.mode_file: device_plugin.py's index ids or
#                          kept destroyed ids) each time
#   node.sh dra-start      start dra_plugin.py (NVIDIA's DRA driver's kubelet plugin, gpu.nvidia.com) for
#                          GPUFLEET_MIG_SIMULATOR's host; waits until the kubelet registered it and its
#                          ResourceSlice is published
#   node.sh dra-stop       stop it (it deletes its slice; safe to repeat)
#
# Isolation. containerd, its shims and the kubelet run in a mount namespace of their own
# (unshare --mount), in which /run and /var/lib are overlays whose upper layers live in
# STATE/node, /var/lib/kubelet/device-plugins (a path the kubelet hard-codes) is the
# device-plugins folder under the kubelet's --root-dir STATE/node/kubelet, and
# /etc/nsswitch.conf says "hosts: files": nothing on the node can resolve a name through the
# machine's resolver, and every mount the node makes (overlay snapshots, the pods' network
# namespaces, the kubelet's) disappears with that namespace. Network: the pods' addresses come
# from 10.231.79.0/24 on the bridge gfmn-cni0 (no address on the host side, no gateway, no
# masquerading); the kubelet listens on 127.0.0.1 only. It is given --node-ip 127.0.0.1 but
# refuses to report a loopback address, so start writes InternalIP 127.0.0.1 into the Node's
# status; the API server (--kubelet-preferred-address-types InternalIP) reaches the kubelet
# there for logs and exec, never by name. Ownership: start draws a token (STATE/node/owner); the bridge
# carries it as its alias, the pods' cgroups live under /<token> in every cgroup hierarchy
# (the kubelet's cgroupRoot), the Node object carries it as the label gpufleet.mig/test-node;
# stop removes only what carries it.
#
# Kernel settings: the kubelet sets vm.overcommit_memory, vm.panic_on_oom, kernel.panic,
# kernel.panic_on_oops, kernel.keys.root_maxkeys and kernel.keys.root_maxbytes at start. In the
# node's mount namespace each of these /proc/sys files is a bind mount of a plain file in
# STATE/node/sysctl, so the kubelet changes only those copies and the machine keeps its values
# (kernel.panic_on_oops=1 would turn any oops into a panic). As a second line, start saves the
# real values (STATE/node/sysctl.saved) and stop writes back any that changed of those it could
# not shield (a change to a shielded one was made by someone else, and stays).
#
# Environment:
#   GPUFLEET_CLUSTER_STATE_DIR   the cluster's state directory (default <repo>/.state/cluster);
#                                the node's files go to STATE/node
#   GPUFLEET_NODE_NAME           node name (default gpu-node)
#   GPUFLEET_NODE_LABELS         node labels, k=v,... (default nvidia.com/gpu.present=true,
#                                nvidia.com/gpu.deploy.device-plugin=true)
#   GPUFLEET_NODE_START_TIMEOUT  seconds to wait for Ready (default 180)
#   GPUFLEET_CLUSTER_PYTHON      Python for the device plugin, with grpcio and nvidia-ml-py
#                                (default python3)
#   GPUFLEET_CLUSTER_LIFETIME    seconds after which the node stops itself (default 7200)
#   GPUFLEET_MIG_SIMULATOR       plugin-start: the simulated GPU host's state file
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

state=$(realpath -m "${GPUFLEET_CLUSTER_STATE_DIR:-$repo/.state/cluster}")
node=$state/node
name=${GPUFLEET_NODE_NAME:-gpu-node}
python=${GPUFLEET_CLUSTER_PYTHON:-python3}
labels=${GPUFLEET_NODE_LABELS:-nvidia.com/gpu.present=true,nvidia.com/gpu.deploy.device-plugin=true}

bridge=gfmn-cni0
pod_cidr=10.231.79.0/24
owner_label=gpufleet.mig/test-node
pause_image=gpufleet.invalid/pause:local
busybox_image=gpufleet.invalid/busybox:local
cni_bin=/usr/lib/cni
# What the kubelet's setupKernelTunables writes (pkg/kubelet/cm/container_manager_linux.go).
sysctls=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

containerd_sock=$node/containerd/containerd.sock
kubelet_root=$node/kubelet
plugin_dir=$kubelet_root/device-plugins
pod_resources_sock=$kubelet_root/pod-resources/kubelet.sock

token() { cat "$node/owner" 2>/dev/null || true; }

pid_running() { # PIDFILE PATTERN: the pid in PIDFILE runs a command line containing PATTERN
    local pid
    pid=$(cat "$1" 2>/dev/null || true)
    [[ -n "$pid" ]] && tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "$2"
}

supervisor_alive() { pid_running "$node/supervisor.pid" "node.sh _supervise"; }
plugin_alive() { pid_running "$node/device-plugin.pid" "$plugin_dir"; }
dra_alive() { pid_running "$node/dra-plugin.pid" "dra_plugin.py"; }

kubectl_() { "$(cat "$state/bin_dir")/kubectl" --kubeconfig "$state/kubeconfig" --request-timeout 10s "$@"; }

node_ready() { # the Node of this node's kubelet (owner label) reports Ready
    [[ "$(kubectl_ get nodes --field-selector "metadata.name=$name" -l "$owner_label=$(token)" \
        -o 'jsonpath={.items[0].status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}

cgroup_mounts() { findmnt -rn -t cgroup,cgroup2 -o TARGET; }

sysctl_path() { echo "/proc/sys/${1//.//}"; }

# --- preparation -----------------------------------------------------------------------------

ensure_packages() {
    local missing=()
    command -v containerd >/dev/null && command -v ctr >/dev/null || missing+=(containerd)
    command -v runc >/dev/null || missing+=(runc)
    [[ -x $cni_bin/bridge && -x $cni_bin/host-local && -x $cni_bin/loopback ]] || missing+=(containernetworking-plugins)
    [[ -x /bin/busybox ]] && ! ldd /bin/busybox >/dev/null 2>&1 || missing+=(busybox-static)
    # gcc -static needs libc.a; -print-file-name answers the bare name when it has none.
    command -v gcc >/dev/null && [[ "$(gcc -print-file-name=libc.a)" == /* ]] || missing+=(gcc libc6-dev)
    ((${#missing[@]})) || return 0
    apt_install "${missing[@]}"
    if [[ ! -x /bin/busybox ]] || ldd /bin/busybox >/dev/null 2>&1; then
        die "/bin/busybox is not the static busybox (busybox-static)"
    fi
}

build_images() {
    mkdir -p "$node/images"
    gcc -static -Os -Wall -Wextra -Werror -o "$node/images/pause" "$here/images/pause.c"
    python3 "$here/images/build_images.py" "$node/images" "$node/images/pause" /bin/busybox "$pause_image" "$busybox_image"
}

write_configs() { # KUBELET_PORT HEALTHZ_PORT
    local t etc=$node/etc
    t=$(token)
    mkdir -p "$etc" "$node/cni/net.d" "$node/cni/ipam" "$node/containerd" "$plugin_dir" "$node/pod-logs" \
        "$node/volume-plugins" "$node/tmp" "$node/overlay/run/upper" "$node/overlay/run/work" \
        "$node/overlay/var-lib/upper" "$node/overlay/var-lib/work" "$node/logs"

    cat >"$etc/containerd.toml" <<EOF
# containerd of the gpufleet-mig test node (tests/cluster/node.sh); owner $t
version = 2
root = "$node/containerd/root"
state = "$node/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$containerd_sock"
[ttrpc]
  address = ""
[debug]
  address = ""
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$node/containerd/opt"
# Unused (the CRI runs runc v2), but containerd's task service needs it loaded.
[plugins."io.containerd.runtime.v1.linux"]
  runtime_root = "$node/containerd/runtime-v1"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  # This VM lacks CAP_SYS_RESOURCE: without it every sandbox fails on oom_score_adj.
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$node/containerd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$cni_bin"
    conf_dir = "$node/cni/net.d"
    max_conf_num = 1
EOF

    cat >"$node/cni/net.d/10-gpufleet-node.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "gpufleet-mig-node",
  "plugins": [
    {"type": "bridge", "bridge": "$bridge", "isGateway": false, "ipMasq": false, "hairpinMode": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$pod_cidr"}]], "dataDir": "$node/cni/ipam"}}
  ]
}
EOF

    cat >"$etc/kubelet.yaml" <<EOF
# kubelet of the gpufleet-mig test node (tests/cluster/node.sh); owner $t
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $1
healthzBindAddress: 127.0.0.1
healthzPort: $2
readOnlyPort: 0
# The API server calls in without a client certificate (logs, exec); loopback only.
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://$containerd_sock
cgroupDriver: cgroupfs
cgroupRoot: /$t
failSwapOn: false
failCgroupV1: false
makeIPTablesUtilChains: false
hairpinMode: none
resolvConf: ""
podLogsDir: $node/pod-logs
volumePluginDir: $node/volume-plugins
# Fast enough that a device plugin's resources reach the node's status within seconds.
nodeStatusUpdateFrequency: 2s
nodeStatusReportFrequency: 10s
syncFrequency: 10s
evictionHard: {memory.available: 1Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%, imagefs.inodesFree: 1%}
evictionPressureTransitionPeriod: 10s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
rotateCertificates: false
serverTLSBootstrap: false
logging: {verbosity: 1}
EOF

    (
        umask 077
        cat >"$etc/kubelet.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: gpufleet-test
    cluster:
      server: https://127.0.0.1:$(cat "$state/ports/apiserver")
      certificate-authority: $state/pki/ca.crt
users:
  - name: gpufleet-kubelet
    user:
      token: $(cat "$state/kubelet.token")
contexts:
  - name: gpufleet-test
    context: {cluster: gpufleet-test, user: gpufleet-kubelet}
current-context: gpufleet-test
EOF
    )
    # Name lookups on the node: local files only (see the header).
    printf '%s\n' "passwd: files" "group: files" "shadow: files" "hosts: files" "networks: files" \
        "protocols: files" "services: files" >"$etc/nsswitch.conf"
    printf '%s\n' "127.0.0.1 localhost $name" "::1 localhost" >"$etc/hosts"
    printf '%s\n' "# the gpufleet-mig test node resolves no names through DNS" >"$etc/resolv.conf"
}

save_sysctls() {
    local key
    rm -f "$node/sysctl.shielded"
    : >"$node/sysctl.saved.new"
    for key in "${sysctls[@]}"; do
        [[ -r "$(sysctl_path "$key")" ]] || continue
        printf '%s=%s\n' "$key" "$(cat "$(sysctl_path "$key")")" >>"$node/sysctl.saved.new"
    done
    mv "$node/sysctl.saved.new" "$node/sysctl.saved"
}

make_cgroups() {
    local t mnt
    t=$(token)
    while read -r mnt; do
        mkdir -p "$mnt/$t"
        # A cpuset cgroup takes no task before it has cpus and mems.
        if [[ -f "$mnt/cpuset.cpus" ]]; then
            cat "$mnt/cpuset.cpus" >"$mnt/$t/cpuset.cpus"
            cat "$mnt/cpuset.mems" >"$mnt/$t/cpuset.mems"
        fi
        # cgroup v2 (a unified hierarchy with controllers): hand them down to the kubelet's root.
        if [[ -f "$mnt/cgroup.subtree_control" && -s "$mnt/cgroup.controllers" ]]; then
            local c controllers
            read -r -a controllers <"$mnt/cgroup.subtree_control"
            for c in "${controllers[@]}"; do
                echo "+$c" >"$mnt/$t/cgroup.subtree_control" 2>/dev/null || true
            done
        fi
    done < <(cgroup_mounts)
}

make_bridge() {
    local t
    t=$(token)
    if ip link show dev "$bridge" >/dev/null 2>&1; then
        [[ "$(bridge_alias)" == "$t" ]] || die "link $bridge exists but was not created from $node; refusing to touch it"
        return 0
    fi
    ip link add "$bridge" type bridge
    ip link set dev "$bridge" alias "$t"
    ip link set dev "$bridge" up
}

bridge_alias() { ip -o link show dev "$bridge" 2>/dev/null | sed -n 's/.*\\ *alias \(.*\)$/\1/p'; }

node_supervisor_running() { # a node.sh supervisor runs, from any state directory
    local dir
    for dir in /proc/[0-9]*; do
        [[ "$(tr '\0' ' ' 2>/dev/null <"$dir/cmdline")" == *"node.sh _supervise"* ]] && return 0
    done
    return 1
}

# The bridge's name and the pod CIDR are fixed, so a bridge left by a node that died without `stop` (its test run
# killed) would keep every later node from starting. One is reclaimed when node.sh made it (its alias is a node
# token) and no node.sh supervisor runs anywhere; any other link of that name is refused.
reclaim_dead_bridge() {
    ip link show dev "$bridge" >/dev/null 2>&1 || return 0
    local alias
    alias=$(bridge_alias)
    if [[ "$alias" != gpufleet-mig-node-* ]] || node_supervisor_running; then
        die "link $bridge exists but was not created from $node; refusing to touch it"
    fi
    ip link del dev "$bridge"
    log "deleted bridge $bridge, left by node $alias, which no longer runs"
}

# --- supervisor: runs detached (setsid) in its own mount namespace -------------------------------

supervise() {
    local bin lifetime t
    bin=$(cat "$state/bin_dir")
    lifetime=${GPUFLEET_CLUSTER_LIFETIME:-7200}
    t=$(token)
    pids=()
    declare -gA names=()

    # shellcheck disable=SC2317  # invoked through the EXIT trap
    teardown() {
        trap - EXIT TERM INT
        rm -f "$node/started"
        stop_pid "${kubelet_pid:-}" kubelet 20
        kill_pods
        stop_pid "${containerd_pid:-}" containerd 20
        kill_namespace_processes
        log "supervisor: stopped"
    }
    trap teardown EXIT
    trap 'exit 0' TERM INT

    # Nothing of this namespace's mounts may reach the machine's.
    mount --make-rprivate /
    mount -t overlay gpufleet-node-run -o "lowerdir=/run,upperdir=$node/overlay/run/upper,workdir=$node/overlay/run/work" /run
    mount -t overlay gpufleet-node-var-lib \
        -o "lowerdir=/var/lib,upperdir=$node/overlay/var-lib/upper,workdir=$node/overlay/var-lib/work" /var/lib
    mkdir -p /var/lib/kubelet/device-plugins
    mount --bind "$plugin_dir" /var/lib/kubelet/device-plugins
    local f
    for f in nsswitch.conf hosts resolv.conf; do
        mount --bind "$node/etc/$f" "/etc/$f"
    done
    # The kubelet's kernel tunables: it reads and writes files standing in for them, so the
    # machine's settings never change (stop restores the saved values of any it could not shield).
    local key
    mkdir -p "$node/sysctl"
    for key in "${sysctls[@]}"; do
        [[ -e "$(sysctl_path "$key")" ]] || continue
        cat "$(sysctl_path "$key")" >"$node/sysctl/$key"
        if mount --bind "$node/sysctl/$key" "$(sysctl_path "$key")"; then
            echo "$key" >>"$node/sysctl.shielded"
        else
            log "supervisor: could not shield $key"
        fi
    done
    readlink /proc/self/ns/mnt >"$node/mntns"

    TMPDIR=$node/tmp containerd --config "$node/etc/containerd.toml" >"$node/logs/containerd.log" 2>&1 </dev/null &
    containerd_pid=$!
    pids+=("$containerd_pid")
    names[$containerd_pid]=containerd
    log "supervisor: started containerd (pid $containerd_pid)"
    wait_for 60 "containerd" "$containerd_pid" ctr --address "$containerd_sock" version || exit 1
    local image
    for image in pause busybox; do
        ctr --address "$containerd_sock" --namespace k8s.io images import "$node/images/$image.tar" >/dev/null \
            || { log "supervisor: importing $node/images/$image.tar failed"; exit 1; }
    done

    launch_kubelet() {
        TMPDIR=$node/tmp "$bin/kubelet" --config "$node/etc/kubelet.yaml" --kubeconfig "$node/etc/kubelet.kubeconfig" \
            --root-dir "$kubelet_root" --cert-dir "$kubelet_root/pki" --hostname-override "$name" --node-ip 127.0.0.1 \
            --node-labels "$labels,$owner_label=$t" >>"$node/logs/kubelet.log" 2>&1 </dev/null &
        kubelet_pid=$!
        pids=("$containerd_pid" "$kubelet_pid")
        names[$kubelet_pid]=kubelet
        log "supervisor: started kubelet (pid $kubelet_pid)"
    }
    launch_kubelet
    touch "$node/started"

    # SIGUSR1 (node.sh restart-kubelet): a new kubelet, the pods and containerd untouched.
    local restart=""
    trap 'restart=1' USR1
    local deadline=$((SECONDS + lifetime)) ticker done_pid
    while :; do
        sleep 5 &
        ticker=$!
        done_pid=""
        wait -n -p done_pid "${pids[@]}" "$ticker" || true
        if [[ -n "$restart" ]]; then
            restart=""
            kill "$ticker" 2>/dev/null || true
            log "supervisor: restarting the kubelet"
            stop_pid "$kubelet_pid" kubelet 20
            launch_kubelet
            continue
        fi
        if [[ "$done_pid" != "$ticker" ]]; then
            kill "$ticker" 2>/dev/null || true
            log "supervisor: ${names[$done_pid]:-process $done_pid} exited, stopping the node"
            exit 1
        fi
        if [[ ! -f "$node/owner" || ! -f "$state/.gpufleet-cluster" ]]; then
            log "supervisor: state directory $node is gone, stopping the node"
            exit 1
        fi
        if ((SECONDS >= deadline)); then
            log "supervisor: lifetime of ${lifetime}s reached, stopping"
            exit 1
        fi
    done
}

stop_pid() { # PID NAME SECONDS: TERM, then KILL after SECONDS
    local pid=$1 what=$2 limit=$3
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq $((limit * 4))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    if kill -0 "$pid" 2>/dev/null; then
        log "$what (pid $pid) did not stop; killing it"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}

# --- teardown pieces (each safe to repeat) -----------------------------------------------------

our_cgroups() { # every cgroup hierarchy's copy of the kubelet's cgroup root
    local t mnt
    t=$(token)
    [[ -n "$t" ]] || return 0
    while read -r mnt; do
        [[ -d "$mnt/$t" ]] && echo "$mnt/$t"
    done < <(cgroup_mounts)
    return 0
}

pod_pids() { # every process in the pods' cgroups
    local dir
    while read -r dir; do
        find "$dir" -name cgroup.procs -exec cat {} + 2>/dev/null || true
    done < <(our_cgroups)
}

kill_pods() {
    local pids
    for _ in $(seq 40); do
        pids=$(pod_pids | sort -u | tr '\n' ' ')
        [[ -z "${pids// /}" ]] && return 0
        # shellcheck disable=SC2086  # one pid per word
        kill -KILL $pids 2>/dev/null || true
        sleep 0.25
    done
    log "pod processes still running: $(pod_pids | sort -u | tr '\n' ' ')"
}

node_process_pids() { # processes whose command line names this node's files (containerd, shims, kubelet, plugin)
    local dir cmdline mntns=""
    # Only those in the node's mount namespace, once it is known: a user's `tail -f` of a node log is not the node's.
    [[ -f "$node/mntns" ]] && mntns=$(cat "$node/mntns")
    for dir in /proc/[0-9]*; do
        [[ -z "$mntns" || "$(readlink "$dir/ns/mnt" 2>/dev/null)" == "$mntns" ]] || continue
        # Read into a variable: a grep given "$node/" as its argument would match itself.
        cmdline=$(tr '\0' ' ' 2>/dev/null <"$dir/cmdline") || continue
        # Shells running this script (the supervisor, a concurrent stop) are not the node's.
        [[ "$cmdline" == *"$node/"* && "$cmdline" != *node.sh* ]] && echo "${dir#/proc/}"
    done
    return 0
}

kill_namespace_processes() { # what is left of the node: shims, a stray kubelet or containerd
    local pids signal
    # Nothing of theirs is worth saving (stop wipes the node's state): a short TERM, then KILL.
    for signal in TERM KILL KILL; do
        pids=$(node_process_pids | tr '\n' ' ')
        [[ -z "${pids// /}" ]] && return 0
        # shellcheck disable=SC2086  # one pid per word
        kill -"$signal" $pids 2>/dev/null || true
        for _ in $(seq 8); do
            [[ -z "$(node_process_pids)" ]] && return 0
            sleep 0.25
        done
    done
    log "node processes still running: $(node_process_pids | tr '\n' ' ')"
}

remove_cgroups() {
    local dir ok=""
    for _ in $(seq 40); do
        ok=1
        while read -r dir; do
            find "$dir" -depth -type d -exec rmdir {} \; 2>/dev/null || true
            [[ -d "$dir" ]] && ok=""
        done < <(our_cgroups)
        [[ -n "$ok" ]] && return 0
        sleep 0.25
    done
    log "cgroups left: $(our_cgroups | tr '\n' ' ')"
    return 1
}

remove_bridge() {
    local t
    t=$(token)
    ip link show dev "$bridge" >/dev/null 2>&1 || return 0
    if [[ -n "$t" && "$(bridge_alias)" == "$t" ]]; then
        ip link del dev "$bridge"
        log "deleted bridge $bridge"
    else
        log "leaving bridge $bridge alone: it was not created from $node"
    fi
}

restore_sysctls() { # only the tunables the kubelet could reach: a change to a shielded one was someone else's
    [[ -f "$node/sysctl.saved" ]] || return 0
    local key value
    while IFS='=' read -r key value; do
        [[ -n "$key" ]] || continue
        [[ -f "$node/sysctl.shielded" ]] && grep -qxF "$key" "$node/sysctl.shielded" && continue
        if [[ "$(cat "$(sysctl_path "$key")")" != "$value" ]]; then
            echo "$value" >"$(sysctl_path "$key")"
            log "restored $key=$value"
        fi
    done <"$node/sysctl.saved"
    rm -f "$node/sysctl.saved" "$node/sysctl.shielded"
}

unmount_under_node() { # mounts of this node seen from here (none normally: they live in the node's namespace)
    local target
    while read -r target; do
        umount -l "$target" && log "unmounted $target"
    done < <(awk -v p="$node/" 'index($5, p) == 1 {print $5}' /proc/self/mountinfo | sort -r)
}

delete_node_object() {
    local t
    t=$(token)
    [[ -n "$t" && -f "$state/bin_dir" && -f "$state/kubeconfig" ]] || return 0
    "$here/cluster.sh" status >/dev/null 2>&1 || return 0
    if kubectl_ get nodes --field-selector "metadata.name=$name" -l "$owner_label=$t" -o name 2>/dev/null | grep -q .; then
        kubectl_ delete node "$name" --wait=false >/dev/null && log "deleted Node $name"
    fi
}

# --- commands ----------------------------------------------------------------------------------

cmd_start() {
    [[ $EUID -eq 0 ]] || die "node.sh needs root (containerd, the kubelet, cgroups, the bridge)"
    case "$node/" in
        /run/* | /var/run/* | /var/lib/*) die "the state directory $state must not be under /run or /var/lib (the node overlays them)" ;;
    esac
    # A unix socket path has at most 107 bytes; the device plugins' are the longest.
    ((${#plugin_dir} <= 70)) || die "state directory $state is too long for the node's unix sockets: use a shorter GPUFLEET_CLUSTER_STATE_DIR"
    "$here/cluster.sh" status >/dev/null 2>&1 || die "no running cluster in $state: run cluster.sh start first"
    [[ -f "$state/kubelet.token" ]] || die "the cluster in $state has no kubelet token: restart it with this version of cluster.sh"
    [[ -x "$(cat "$state/bin_dir")/kubelet" ]] || die "no kubelet in $(cat "$state/bin_dir"): rebuild with build.sh"
    if supervisor_alive; then
        die "a node is already running from $node (pid $(cat "$node/supervisor.pid")); run '$0 stop' first"
    fi
    if [[ -f "$node/owner" ]]; then
        log "cleaning up an earlier node of $node first"
        cmd_stop
    fi
    reclaim_dead_bridge
    # A Node of that name: a fake one (refuse), or one an earlier node.sh left behind (replace).
    local existing
    existing=$(kubectl_ get nodes --field-selector "metadata.name=$name" \
        -o "jsonpath={.items[*].metadata.labels.${owner_label//./\\.}}" 2>/dev/null) || die "cannot read the nodes of the cluster"
    if [[ -n "$(kubectl_ get nodes --field-selector "metadata.name=$name" -o name 2>/dev/null)" ]]; then
        [[ -n "$existing" ]] || die "the cluster already has a Node $name that node.sh did not register; choose another GPUFLEET_NODE_NAME"
        log "deleting the Node $name an earlier node.sh left behind"
        kubectl_ delete node "$name" --wait=true >/dev/null
    fi
    if ! command -v unshare >/dev/null || ! command -v findmnt >/dev/null; then
        die "unshare and findmnt are needed (util-linux)"
    fi
    ensure_packages

    local started=$SECONDS
    trap 'log "start failed, stopping the node"; cmd_stop' EXIT
    rm -rf "$node"
    mkdir -p "$node/logs"
    printf 'gpufleet-mig-node-%s\n' "$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')" >"$node/owner"
    build_images
    local -a ports
    read -r -a ports <<<"$(python3 "$here/helper.py" ports 2)"
    write_configs "${ports[0]}" "${ports[1]}"
    save_sysctls
    make_cgroups
    make_bridge

    log "starting the node supervisor (logs in $node/logs)"
    GPUFLEET_CLUSTER_STATE_DIR=$state GPUFLEET_NODE_NAME=$name GPUFLEET_NODE_LABELS=$labels \
        setsid unshare --mount --propagation private -- "$here/node.sh" _supervise >>"$node/logs/supervisor.log" 2>&1 </dev/null &
    echo $! >"$node/supervisor.pid"

    local deadline=$((SECONDS + ${GPUFLEET_NODE_START_TIMEOUT:-180}))
    until node_ready; do
        if ! supervisor_alive; then
            log "the node failed to start; supervisor log:"
            sed 's/^/    /' "$node/logs/supervisor.log" >&2
            show_logs
            exit 1
        fi
        if ((SECONDS >= deadline)); then
            log "timed out waiting for node $name to become Ready"
            show_logs
            exit 1
        fi
        sleep 0.5
    done
    # The kubelet refuses a loopback --node-ip for the node's addresses ("nodeIP can't be loopback
    # address") and then leaves them alone: write them here, so the API server reaches the
    # kubelet (logs, exec) on 127.0.0.1 and never by name.
    kubectl_ patch node "$name" --subresource status --type merge \
        -p "{\"status\":{\"addresses\":[{\"type\":\"InternalIP\",\"address\":\"127.0.0.1\"},{\"type\":\"Hostname\",\"address\":\"$name\"}]}}" \
        >/dev/null || die "could not set the addresses of node $name"
    write_node_json "${ports[0]}" "${ports[1]}"
    trap - EXIT
    log "node $name is Ready after $((SECONDS - started))s (kubelet root $kubelet_root)"
}

show_logs() {
    local f
    for f in "$node"/logs/containerd.log "$node"/logs/kubelet.log; do
        [[ -f "$f" ]] || continue
        log "--- last lines of $(basename "$f")"
        # Without the kubelet's list of its flags, which fills its first hundred lines.
        grep -v ' flags.go:' "$f" | tail -n 20 | sed 's/^/    /' >&2
    done
}

write_node_json() { # KUBELET_PORT HEALTHZ_PORT
    NODE_JSON_ARGS="$name|$kubelet_root|$pod_resources_sock|$plugin_dir|$containerd_sock|$pause_image|$busybox_image|$(token)|$bridge|$pod_cidr|$1|$2|$node|$labels|$owner_label" \
        python3 - "$state/node.json" <<'EOF'
import json, os, shutil, sys
(name, root, podres, plugins, sock, pause, busybox, token, bridge, cidr, port, healthz, node, labels,
 owner_label) = os.environ["NODE_JSON_ARGS"].split("|")
ctr = ["ctr", "--address", sock, "--namespace", "k8s.io"]
crictl = ["crictl", "--runtime-endpoint", "unix://" + sock, "--image-endpoint", "unix://" + sock]
facts = {
    "name": name,
    "kubelet_root_dir": root,
    "pod_resources_socket": podres,
    "device_plugin_dir": plugins,
    "kubelet_registration_socket": os.path.join(plugins, "kubelet.sock"),
    "containerd_socket": sock,
    "ctr": ctr,
    "ctr_command": " ".join(ctr),
    "crictl": crictl,
    "crictl_command": " ".join(crictl),
    "crictl_installed": shutil.which("crictl") is not None,
    "images": {"pause": pause, "busybox": busybox},
    "owner": token,
    "owner_label": {owner_label: token},
    "labels": dict(kv.split("=", 1) for kv in labels.split(",") if kv),
    "cgroup_root": "/" + token,
    "bridge": bridge,
    "pod_cidr": cidr,
    "kubelet_port": int(port),
    "kubelet_healthz_port": int(healthz),
    "logs_dir": os.path.join(node, "logs"),
    "pod_logs_dir": os.path.join(node, "pod-logs"),
    "node_dir": node,
    "dra_plugin": {"status_file": os.path.join(node, "dra-plugin.json"), "log": os.path.join(node, "logs", "dra-plugin.log"),
                   "registry_dir": os.path.join(root, "plugins_registry")},
    "device_plugin": {"pid_file": os.path.join(node, "device-plugin.pid"),
                      "status_file": os.path.join(node, "device-plugin.json"),
                      "mode_file": os.path.join(node, "device-plugin.mode.json"),
                      "log": os.path.join(node, "logs", "device-plugin.log")},
}
path = sys.argv[1]
with open(path + ".tmp", "w") as f:
    json.dump(facts, f, indent=1, sort_keys=True)
os.replace(path + ".tmp", path)
EOF
}

cmd_stop() {
    trap - EXIT
    if [[ ! -d "$node" ]]; then
        log "nothing to stop in $node"
        return 0
    fi
    plugin_stop
    dra_stop
    if supervisor_alive; then
        local pid
        pid=$(cat "$node/supervisor.pid")
        kill -TERM "$pid" 2>/dev/null || true
        # The supervisor gives the kubelet and containerd 20 s each.
        for _ in $(seq 240); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
        if kill -0 "$pid" 2>/dev/null; then
            log "supervisor $pid did not stop; killing it"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    # After a crash or a failed start: whatever is left, in order (pods, then their shims).
    kill_pods
    kill_namespace_processes
    unmount_under_node
    local left=""
    remove_cgroups || left+=" cgroups"
    remove_bridge
    restore_sysctls
    delete_node_object
    [[ -z "$(node_process_pids)" ]] || left+=" processes"
    [[ -z "$left" ]] || die "could not remove:$left (see above); run '$0 stop' again"
    # The node's files; logs stay for a post-mortem. The token goes last, once nothing of ours is left.
    local part
    for part in containerd kubelet overlay cni images tmp pod-logs volume-plugins etc sysctl device-plugin.json device-plugin.mode.json \
        mntns supervisor.pid started; do
        rm -rf "${node:?}/$part"
    done
    rm -f "$state/node.json"
    rm -f "$node/owner"
    log "stopped the node in $node"
}

cmd_status() {
    supervisor_alive && [[ -f "$node/started" ]] && node_ready
}

plugin_start() {
    if [[ ! -f "$state/node.json" ]] || ! supervisor_alive; then
        die "no node is running from $node: run '$0 start' first"
    fi
    [[ -n "${GPUFLEET_MIG_SIMULATOR:-}" ]] || die "GPUFLEET_MIG_SIMULATOR must name the simulated GPU host's state file"
    [[ -r "$GPUFLEET_MIG_SIMULATOR" ]] || die "simulator state $GPUFLEET_MIG_SIMULATOR is not readable"
    plugin_alive && die "the device plugin already runs (pid $(cat "$node/device-plugin.pid")); run '$0 plugin-stop' first"
    "$python" -c 'import grpc, pynvml' 2>/dev/null \
        || die "$python lacks grpcio or nvidia-ml-py: set GPUFLEET_CLUSTER_PYTHON to the repository's .venv/bin/python"
    rm -f "$node/device-plugin.json" "$node/device-plugin.mode.json"  # a new plugin starts in the default mode
    GPUFLEET_MIG_SIMULATOR=$(realpath "$GPUFLEET_MIG_SIMULATOR") setsid "$python" "$here/device_plugin.py" \
        --plugin-dir "$plugin_dir" --node-name "$name" \
        --server "https://127.0.0.1:$(cat "$state/ports/apiserver")" --ca-file "$state/pki/ca.crt" \
        --token-file "$state/admin.token" --status-file "$node/device-plugin.json" \
        --mode-file "$node/device-plugin.mode.json" \
        >>"$node/logs/device-plugin.log" 2>&1 </dev/null &
    echo $! >"$node/device-plugin.pid"
    helper_started device-plugin "device plugin" "the device plugin to serve or pause" "(serving|paused)" plugin_stop
}

plugin_stop() { helper_stop device-plugin "device plugin" plugin_alive; }

# The device plugin and the DRA plugin, each a helper process of this node with $node/NAME.pid, NAME.json (its
# status) and logs/NAME.log.
helper_started() { # NAME WORDS WAITING STATES STOP: wait until the helper's status says one of STATES, else stop it and die
    local name=$1 words=$2 waiting=$3 states=$4 stop=$5
    wait_for 60 "$waiting" "$(cat "$node/$name.pid")" grep -qE "\"state\": \"$states\"" "$node/$name.json" \
        || { tail -n 20 "$node/logs/$name.log" | sed 's/^/    /' >&2; "$stop"; die "the $words did not start"; }
    log "$words: $(cat "$node/$name.json")"
}

helper_stop() { # NAME WORDS ALIVE: stop the helper where ALIVE says it runs; its pid file goes either way
    local name=$1 words=$2 alive=$3
    if "$alive"; then
        stop_pid "$(cat "$node/$name.pid")" "$words" 10
        log "stopped the $words"
    fi
    rm -f "$node/$name.pid"
}

dra_start() {
    if [[ ! -f "$state/node.json" ]] || ! supervisor_alive; then
        die "no node is running from $node: run '$0 start' first"
    fi
    [[ -r "${GPUFLEET_MIG_SIMULATOR:-}" ]] || die "GPUFLEET_MIG_SIMULATOR must name the simulated GPU host's state file"
    dra_alive && die "the DRA plugin already runs (pid $(cat "$node/dra-plugin.pid")); run '$0 dra-stop' first"
    rm -f "$node/dra-plugin.json"
    # The kubelet's plugin watcher (pkg/kubelet/pluginmanager) watches <--root-dir>/plugins_registry.
    GPUFLEET_MIG_SIMULATOR=$(realpath "$GPUFLEET_MIG_SIMULATOR") setsid "$python" "$here/dra_plugin.py" \
        --registry-dir "$kubelet_root/plugins_registry" --plugin-dir "$kubelet_root/plugins/gpu.nvidia.com" \
        --node-name "$name" --server "https://127.0.0.1:$(cat "$state/ports/apiserver")" --ca-file "$state/pki/ca.crt" \
        --token-file "$state/admin.token" --status-file "$node/dra-plugin.json" \
        >>"$node/logs/dra-plugin.log" 2>&1 </dev/null &
    echo $! >"$node/dra-plugin.pid"
    helper_started dra-plugin "DRA plugin" "the kubelet to register the DRA plugin" serving dra_stop
}

dra_stop() { helper_stop dra-plugin "DRA plugin" dra_alive; }

kubelet_sock_replaced() { # BEFORE: kubelet.sock exists and is not the file stat described as BEFORE
    local now
    now=$(stat -c '%i %z' "$plugin_dir/kubelet.sock" 2>/dev/null) && [[ "$now" != "$1" ]]
}

restart_kubelet() {
    if ! supervisor_alive || [[ ! -f "$node/started" ]]; then
        die "no node is running from $node"
    fi
    local before healthz
    healthz=$(awk '$1 == "healthzPort:" {print $2}' "$node/etc/kubelet.yaml")
    # Inode and change time: a freed inode number is often handed out again at once.
    before=$(stat -c '%i %z' "$plugin_dir/kubelet.sock" 2>/dev/null || true)
    kill -USR1 "$(cat "$node/supervisor.pid")"
    # The new kubelet re-creates its registration socket, then reports the node Ready again.
    wait_for 60 "a new kubelet.sock" "" kubelet_sock_replaced "$before" \
        || die "the kubelet did not come back"
    wait_for 60 "the new kubelet's /healthz" "" curl -fsS --max-time 2 "http://127.0.0.1:$healthz/healthz" \
        || die "the new kubelet is not healthy"
    wait_for 60 "node $name Ready" "" node_ready || die "node $name is not Ready after the kubelet restart"
    log "restarted the kubelet of $name"
}

plugin_hup() {
    plugin_alive || die "the device plugin is not running"
    kill -HUP "$(cat "$node/device-plugin.pid")"
}

# Sourced (tests/cluster/test_node_sh.py): the functions only.
[[ "${BASH_SOURCE[0]}" == "$0" ]] || return 0

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status)
        if cmd_status; then echo "running: $(cat "$state/node.json")"; else echo "not running"; exit 1; fi ;;
    plugin-start) plugin_start ;;
    plugin-stop) plugin_stop ;;
    plugin-hup) plugin_hup ;;
    dra-start) dra_start ;;
    dra-stop) dra_stop ;;
    restart-kubelet) restart_kubelet ;;
    _supervise) supervise ;;
    *) die "usage: $0 start|stop|status|restart-kubelet|plugin-start|plugin-stop|plugin-hup|dra-start|dra-stop" ;;
esac
